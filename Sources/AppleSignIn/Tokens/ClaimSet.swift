import Foundation
import JOSE

/// Typed access to the claims of a JWT Apple signed (identity tokens and notifications alike), each failure a
/// `claims` error naming the claim: one tolerant boolean, one rule for dates. Read only after the signature
/// verified, with `ParsedJSON`, the strict parser the core benchmark needs (Foundation's JSONDecoder costs
/// more than the RSA check on Linux); what arrives unauthenticated (the header, a notification's body) goes
/// through JSONDecoder.
struct ClaimSet {
    private let object: ParsedJSON

    /// Parses the payload bytes; anything but a JSON object is a `claims` error.
    init(payload: [UInt8]) throws(IdentityTokenError) {
        guard let parsed = try? ParsedJSON.parse(payload), parsed.isObject else {
            throw IdentityTokenError(.claims, "the payload is not a JSON object")
        }
        object = parsed
    }

    private init(object: ParsedJSON) {
        self.object = object
    }

    /// A claim holding an object, or (as Apple sends a notification's `events`) a string of JSON text of one.
    func nested(_ name: String) throws(IdentityTokenError) -> ClaimSet {
        switch fields[name] {
        case let value? where value.isObject: return ClaimSet(object: value)
        case .string(let text)?:
            guard let parsed = try? ParsedJSON.parse(Array(text.utf8)), parsed.isObject else {
                throw IdentityTokenError(.claims, "the claim \(name) is not a JSON object")
            }
            return ClaimSet(object: parsed)
        case nil, .null?: throw IdentityTokenError(.claims, "the claim \(name) is missing")
        default: throw IdentityTokenError(.claims, "the claim \(name) has the wrong type")
        }
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

    /// A time in milliseconds since 1970 (a notification's `event_time`), as seconds.
    func milliseconds(_ name: String) throws(IdentityTokenError) -> Double {
        guard let value = try optionalDate(name, maximum: Self.maximumDate * 1000) else { throw IdentityTokenError(.claims, "the claim \(name) is missing") }
        return value / 1000
    }

    func optionalDate(_ name: String, maximum: Double = maximumDate) throws(IdentityTokenError) -> Double? {
        switch fields[name] {
        case nil, .null?: return nil
        case .number(let number)? where number.isFinite && abs(number) <= maximum: return number
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
