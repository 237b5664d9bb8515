import JOSE

/// Unguessable tokens: state, nonce, session ids, binding and CSRF tokens.
public enum RandomToken {
    /// 256 bits from the system CSPRNG, base64url without padding (43 characters).
    public static func generate(byteCount: Int = 32) -> String {
        Base64URL.encode(SecureRandom.bytes(byteCount))
    }
}
