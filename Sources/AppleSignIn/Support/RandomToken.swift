import JOSE

/// Unguessable values for `state`, `nonce`, session ids and CSRF tokens.
public enum RandomToken {
    /// 256 bits from the system CSPRNG (`getrandom` on Linux), base64url without padding (43 characters).
    public static func generate(byteCount: Int = 32) -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes = [UInt8](repeating: 0, count: byteCount)
        for index in bytes.indices { bytes[index] = generator.next() }
        return Base64URL.encode(bytes)
    }
}
