import AppleSignIn

/// How a session cookie's value names its session in the store: by its SHA-256, never by the value itself.
enum SessionCookie {
    /// The SHA-256 of a session cookie's value; nil for an empty one.
    static func hash(_ value: String) -> String? {
        value.isEmpty ? nil : digest(value)
    }

    /// The lowercase hex SHA-256 of `secret`: how the store keeps every secret it must find again (session ids,
    /// codes, tokens).
    static func digest(_ secret: String) -> String {
        IdentityTokenVerifier.sha256Hex(secret)
    }
}
