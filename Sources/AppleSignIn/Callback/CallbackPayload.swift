import JOSE

/// What Apple sends to the return URL, parsed from a `form_post` body or a query string.
public struct CallbackPayload: Sendable, Hashable {
    /// Largest body accepted.
    public static let maximumBodySize = 64 * 1024
    /// Largest value accepted per field; a field not listed is bounded by `defaultFieldLimit`.
    static let fieldLimits: [String: Int] = [
        "code": 1024, "id_token": 16 * 1024, "state": 512, "user": 4 * 1024, "error": 128, "error_description": 1024,
    ]
    static let defaultFieldLimit = 1024

    /// The authorization code, if Apple returned one.
    public var code: String?
    /// The front-channel identity token, if requested.
    public var idToken: String?
    /// The `state` we sent.
    public var state: String?
    /// The first-time user data, if any.
    public var user: AppleUser?
    /// Apple's error code (e.g. `user_cancelled_authorize`), if the user did not authorize.
    public var error: String?

    /// Creates a payload from parts.
    public init(code: String? = nil, idToken: String? = nil, state: String? = nil, user: AppleUser? = nil, error: String? = nil) {
        self.code = code
        self.idToken = idToken
        self.state = state
        self.user = user
        self.error = error
    }

    /// Parses an `application/x-www-form-urlencoded` body.
    public static func parse(formBody: some Collection<UInt8>) throws(CallbackError) -> CallbackPayload {
        guard formBody.count <= maximumBodySize else {
            throw CallbackError(reason: .bodyTooLarge, field: nil, message: "the callback body is \(formBody.count) bytes; the limit is \(maximumBodySize)")
        }
        let fields = try parseFields(formBody)
        var payload = CallbackPayload(code: fields["code"], idToken: fields["id_token"], state: fields["state"], error: fields["error"])
        if let userJSON = fields["user"] {
            payload.user = try AppleUser.parse(json: userJSON)
        }
        return payload
    }

    /// Parses a query string (with or without the leading `?`).
    public static func parse(query: String) throws(CallbackError) -> CallbackPayload {
        var bytes = Substring(query).utf8[...]
        if bytes.first == UInt8(ascii: "?") { bytes = bytes.dropFirst() }
        return try parse(formBody: Array(bytes))
    }

    /// Splits and decodes fields, refusing duplicates, bad escapes, non-UTF-8 and oversized values.
    public static func parseFields(_ body: some Collection<UInt8>) throws(CallbackError) -> [String: String] {
        var fields: [String: String] = [:]
        let bytes = Array(body)
        for pair in bytes.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let nameBytes: ArraySlice<UInt8>
            let valueBytes: ArraySlice<UInt8>
            if let equals = pair.firstIndex(of: UInt8(ascii: "=")) {
                nameBytes = pair[pair.startIndex..<equals]
                valueBytes = pair[pair.index(after: equals)...]
            } else {
                nameBytes = pair[...]
                valueBytes = pair[pair.endIndex...]
            }
            let name = try decode(nameBytes, field: nil)
            let limit = fieldLimits[name] ?? defaultFieldLimit
            guard valueBytes.count <= limit * 3 else { throw tooLarge(name, limit) }
            let value = try decode(valueBytes, field: name)
            guard value.utf8.count <= limit else { throw tooLarge(name, limit) }
            guard fields.updateValue(value, forKey: name) == nil else {
                throw CallbackError(reason: .duplicateParameter, field: name, message: "the parameter \(name) appears more than once")
            }
        }
        return fields
    }

    private static func decode(_ bytes: some Collection<UInt8>, field: String?) throws(CallbackError) -> String {
        do {
            return try FormEncoding.decodeComponent(bytes)
        } catch .notUTF8 {
            throw CallbackError(reason: .notUTF8, field: field, message: "the field \(field ?? "name") is not UTF-8")
        } catch {
            throw CallbackError(reason: .badEncoding, field: field, message: "the field \(field ?? "name") has a malformed percent escape")
        }
    }

    private static func tooLarge(_ name: String, _ limit: Int) -> CallbackError {
        CallbackError(reason: .fieldTooLarge, field: name, message: "the field \(name) is longer than its limit of \(limit) bytes")
    }
}
