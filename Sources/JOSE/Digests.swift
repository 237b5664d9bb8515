import Crypto
import Foundation

/// The digests Sign in with Apple puts in tokens, and their text forms; one implementation for the core,
/// the emulator and the server.
public enum Digests {
    /// Lower-case hex of bytes.
    public static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var output: [UInt8] = []
        for byte in bytes {
            output.append(digits[Int(byte >> 4)])
            output.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Lower-case hex SHA-256 of a text (how native apps send the nonce, how session ids are stored).
    public static func sha256Hex(_ text: String) -> String {
        hex(SHA256.hash(data: Data(text.utf8)))
    }

    /// `c_hash`: base64url of the left half of SHA-256 of the authorization code.
    public static func codeHash(_ code: String) -> String {
        let digest = Array(SHA256.hash(data: Data(code.utf8)))
        return Base64URL.encode(digest.prefix(digest.count / 2))
    }
}
