import Crypto
import Foundation

/// The digests Sign in with Apple puts in tokens, and their text forms; one implementation for the core,
/// the emulator and the server.
public enum Digests {
    /// Lower-case hex of bytes.
    public static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let input = Array(bytes)
        return String(unsafeUninitializedCapacity: input.count * 2) { output in
            for (index, byte) in input.enumerated() {
                output[2 * index] = digit(byte >> 4)
                output[2 * index + 1] = digit(byte & 0x0F)
            }
            return input.count * 2
        }
    }

    @inline(__always) private static func digit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") + value - 10
    }

    /// Whether `claim` is the `c_hash` of `code`: compared as bytes, without encoding the digest.
    public static func matchesCodeHash(_ claim: String, code: String) -> Bool {
        var claim = claim
        let claimed = claim.withUTF8 { Base64URL.decodeToArray(bytes: $0) }
        guard let claimed, claimed.count == 16 else { return false }
        var code = code
        let digest = code.withUTF8 { SHA256.hash(data: UnsafeRawBufferPointer($0)) }
        return digest.withUnsafeBytes { digestBytes in claimed.elementsEqual(digestBytes.prefix(16)) }
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
