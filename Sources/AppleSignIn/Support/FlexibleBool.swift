/// A claim Apple sends as a JSON boolean or as the string `"true"`/`"false"` (`email_verified`,
/// `is_private_email`, `nonce_supported`): decoded to a Bool either way.
struct FlexibleBool: Codable, Sendable, Hashable {
    var value: Bool

    init(_ value: Bool) { self.value = value }

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let bool = try? container.decode(Bool.self) {
            value = bool
            return
        }
        let text = try container.decode(String.self)
        switch text.lowercased() {
        case "true": value = true
        case "false": value = false
        default:
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected true or false, got \(text)")
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(value)
    }
}

/// A NumericDate that Apple may send as an integer or (rarely, in hand-made tokens) a fractional number.
struct NumericDate: Codable, Sendable, Hashable {
    var secondsSince1970: Double

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let integer = try? container.decode(Int64.self) {
            secondsSince1970 = Double(integer)
        } else {
            secondsSince1970 = try container.decode(Double.self)
        }
        // Beyond year 5138 a date is not a date (and would trap when shown as an integer in a message).
        guard secondsSince1970.isFinite, abs(secondsSince1970) <= 1e11 * 1000 else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a plausible date")
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(secondsSince1970)
    }
}
