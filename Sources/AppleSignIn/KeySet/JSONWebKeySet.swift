import JOSE
import CryptoExtras
import Foundation

/// A JSON Web Key Set as Apple publishes it at `/auth/keys`.
public struct JSONWebKeySet: Codable, Sendable, Hashable {
    /// One key of the set.
    public struct Key: Codable, Sendable, Hashable {
        /// Key type; only `RSA` is used.
        public var kty: String
        /// Key id, matched against the token header.
        public var kid: String?
        /// Intended use; `sig` or absent.
        public var use: String?
        /// Algorithm; `RS256` or absent.
        public var alg: String?
        /// RSA modulus, base64url.
        public var n: String?
        /// RSA exponent, base64url.
        public var e: String?

        /// Creates a key entry.
        public init(kty: String, kid: String?, use: String?, alg: String?, n: String?, e: String?) {
            self.kty = kty
            self.kid = kid
            self.use = use
            self.alg = alg
            self.n = n
            self.e = e
        }
    }

    /// The keys.
    public var keys: [Key]

    /// Creates a set.
    public init(keys: [Key]) { self.keys = keys }

    /// The RSA signing keys by `kid`; keys of other types, uses or algorithms, and unparsable keys, are left out.
    func rsaSigningKeys() -> [String: _RSA.Signing.PublicKey] {
        var result: [String: _RSA.Signing.PublicKey] = [:]
        for key in keys where key.kty == "RSA" && (key.use ?? "sig") == "sig" && (key.alg ?? "RS256") == "RS256" {
            guard let kid = key.kid, let n = key.n.flatMap(Base64URL.decode), let e = key.e.flatMap(Base64URL.decode),
                let publicKey = try? _RSA.Signing.PublicKey(n: n, e: e), publicKey.keySizeInBits >= 2048
            else { continue }
            result[kid] = publicKey
        }
        return result
    }
}
