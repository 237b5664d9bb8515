import Crypto
import Foundation
import JOSE

/// Encrypts refresh tokens at rest with AES-256-GCM. Several keys may be configured: the first encrypts,
/// all decrypt (key rotation). A sealed value names its key: `k<index-free id>:<base64(nonce|ciphertext|tag)>`.
public struct TokenCipher: Sendable {
    private let keys: [(id: String, key: SymmetricKey)]

    /// Why a value could not be decrypted.
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// Creates a cipher from base64 32-byte keys, newest first.
    public init(base64Keys: [String]) throws {
        guard !base64Keys.isEmpty else { throw Failure(description: "data_key: at least one key is required") }
        keys = try base64Keys.map { text in
            guard let data = Data(base64Encoded: text.trimmingCharacters(in: .whitespacesAndNewlines)), data.count == 32 else {
                throw Failure(description: "data_key: each key must be 32 random bytes in base64 (e.g. from `openssl rand -base64 32`)")
            }
            let id = Digests.hex(SHA256.hash(data: data).prefix(4))
            return (id, SymmetricKey(data: data))
        }
    }

    /// Encrypts with the newest key.
    public func seal(_ plaintext: String) throws -> String {
        let (id, key) = keys[0]
        let box = try AES.GCM.seal(Data(plaintext.utf8), using: key, authenticating: Data(id.utf8))
        guard let combined = box.combined else { throw Failure(description: "AES-GCM produced no combined representation") }
        return id + ":" + combined.base64EncodedString()
    }

    /// Decrypts with whichever configured key sealed it.
    public func open(_ sealed: String) throws -> String {
        let parts = sealed.split(separator: ":", maxSplits: 1)
        guard parts.count == 2, let data = Data(base64Encoded: String(parts[1])) else {
            throw Failure(description: "stored token is not in the sealed format")
        }
        let id = String(parts[0])
        guard let key = keys.first(where: { $0.id == id })?.key else {
            throw Failure(description: "stored token was sealed with key \(id), which is not configured any more")
        }
        let box = try AES.GCM.SealedBox(combined: data)
        return String(decoding: try AES.GCM.open(box, using: key, authenticating: Data(id.utf8)), as: UTF8.self)
    }

    /// `open`, or nil when no configured key opens it (sealed with a key since removed, or damaged): such a
    /// token can never be used again, and must not stop a deletion or a batch of other users' checks.
    public func openIfReadable(_ sealed: String) -> String? {
        try? open(sealed)
    }

    /// A new random key in base64.
    public static func generateKey() -> String {
        SymmetricKey(size: .bits256).withUnsafeBytes { Data($0).base64EncodedString() }
    }
}
