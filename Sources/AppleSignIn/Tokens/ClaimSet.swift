import Foundation
import JOSE

/// Typed access to a JWT payload, each failure a `claims` error naming the claim.
struct ClaimSet {
    private let object: ParsedJSON

    /// Parses the payload bytes; anything but a JSON object is a `claims` error.
    init(payload: [UInt8]) throws(IdentityTokenError) {
        guard let parsed = try? ParsedJSON.parse(payload), parsed.isObject else {
            throw IdentityTokenError(.claims, "the payload is not a JSON object")
        }
        object = parsed
    }

    private var fields: Fields { Fields(object: object) }

    /// Member lookup by name.
    private struct Fields {
        let object: ParsedJSON
        subscript(_ name: String) -> ParsedJSON? { object[member: name] }
    }

    func string(_ name: String) throws(IdentityTokenError) -> String {
        guard let value = try optionalString(name) else { throw IdentityTokenError(.claims, "the claim \(name) is missing") }
        return value
    }

    func optionalString(_ name: String) throws(IdentityTokenError) -> String? {
        switch fields[name] {
        case nil, .null?: return nil
        case .string(let text)?: return text
        default: throw IdentityTokenError(.claims, "the claim \(name) has the wrong type")
        }
    }

    /// A NumericDate (seconds since 1970).
    func date(_ name: String) throws(IdentityTokenError) -> Double {
        guard let value = try optionalDate(name) else { throw IdentityTokenError(.claims, "the claim \(name) is missing") }
        return value
    }

    /// The largest NumericDate accepted (year 5138): beyond it a date is not a date, and converting it to an
    /// integer for a message would trap (found by fuzzing with an `iat` of 1.3e111).
    static let maximumDate = 1e11

    func optionalDate(_ name: String) throws(IdentityTokenError) -> Double? {
        switch fields[name] {
        case nil, .null?: return nil
        case .number(let number)? where number.isFinite && abs(number) <= Self.maximumDate: return number
        case .number?: throw IdentityTokenError(.claims, "the claim \(name) is not a plausible date")
        default: throw IdentityTokenError(.claims, "the claim \(name) has the wrong type")
        }
    }

    func optionalInt(_ name: String) throws(IdentityTokenError) -> Int? {
        switch fields[name] {
        case nil, .null?: return nil
        case .number(let number)? where number == number.rounded() && abs(number) < 1e15: return Int(number)
        default: throw IdentityTokenError(.claims, "the claim \(name) has the wrong type")
        }
    }

    /// A boolean Apple may send as `true` or as `"true"`.
    func flexibleBool(_ name: String) throws(IdentityTokenError) -> Bool? {
        switch fields[name] {
        case nil, .null?: return nil
        case .bool(let value)?: return value
        case .string("true")?: return true
        case .string("false")?: return false
        case .string(let text)? where text.lowercased() == "true": return true
        case .string(let text)? where text.lowercased() == "false": return false
        default: throw IdentityTokenError(.claims, "the claim \(name) has the wrong type")
        }
    }

    /// `aud`: one string or an array of strings.
    func audience() throws(IdentityTokenError) -> Audience {
        switch fields["aud"] {
        case .string(let single)?: return Audience(values: [single])
        case .array(let items)?:
            var values: [String] = []
            for item in items {
                guard let text = item.stringValue else { throw IdentityTokenError(.claims, "the claim aud has the wrong type") }
                values.append(text)
            }
            return Audience(values: values)
        case nil, .null?: throw IdentityTokenError(.claims, "the claim aud is missing")
        default: throw IdentityTokenError(.claims, "the claim aud has the wrong type")
        }
    }
}
