/// An Apple developer Team ID: ten upper-case letters or digits, e.g. `A1B2C3D4E5`.
public struct TeamID: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The ten-character identifier.
    public let rawValue: String

    /// Parses a Team ID, refusing anything that is not ten upper-case letters or digits.
    public init(_ text: String, field: String = "team_id") throws(ConfigurationError) {
        guard Self.isTenCharacterID(text) else {
            throw ConfigurationError(
                field: field,
                "must be the 10-character Team ID shown at the top right of the Apple developer portal, e.g. A1B2C3D4E5 (got \(text.count) characters)"
            )
        }
        rawValue = text
    }

    public var description: String { rawValue }

    static func isTenCharacterID(_ text: String) -> Bool {
        text.utf8.count == 10
            && text.utf8.allSatisfy { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }
}

/// The Key ID naming a Sign in with Apple private key (`.p8`): ten upper-case letters or digits.
public struct KeyID: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The ten-character identifier.
    public let rawValue: String

    /// Parses a Key ID, refusing anything that is not ten upper-case letters or digits.
    public init(_ text: String, field: String = "key_id") throws(ConfigurationError) {
        guard TeamID.isTenCharacterID(text) else {
            throw ConfigurationError(
                field: field,
                "must be the 10-character Key ID of the Sign in with Apple key (Certificates, Identifiers & Profiles → Keys), e.g. ABC123DEFG; it is also in the .p8 file name AuthKey_ABC123DEFG.p8"
            )
        }
        rawValue = text
    }

    public var description: String { rawValue }
}

/// A `client_id`: a Services ID for the web or an app's bundle ID, both reverse-DNS, e.g. `com.example.web`.
public struct ClientID: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The identifier as registered with Apple.
    public let rawValue: String

    /// Parses a reverse-DNS identifier: at least two dot-separated parts of letters, digits and hyphens.
    public init(_ text: String, field: String = "services_id") throws(ConfigurationError) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        let valid = text.utf8.count <= 255 && parts.count >= 2
            && parts.allSatisfy { part in
                !part.isEmpty && part.utf8.allSatisfy { byte in
                    (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                        || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-")
                }
            }
        guard valid else {
            throw ConfigurationError(
                field: field,
                "must be a reverse-DNS identifier such as com.example.web (the Services ID for the web, or an app's bundle ID), got \"\(text)\""
            )
        }
        rawValue = text
    }

    public var description: String { rawValue }
}
