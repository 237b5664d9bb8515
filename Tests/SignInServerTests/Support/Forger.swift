import Crypto
import CryptoExtras
import Foundation
import JOSE

/// An attacker's (or a test's) RSA key that signs identity tokens with any claims.
struct Forger: Sendable {
    let kid: String
    let key: _RSA.Signing.PrivateKey

    init(kid: String = "forger-" + UUID().uuidString.prefix(8).lowercased()) throws {
        self.kid = kid
        key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
    }

    /// Its public key as a JWKS entry.
    var jwk: [String: String] {
        let primitives = try! key.publicKey.getKeyPrimitives()
        return ["kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": Base64URL.encode(primitives.modulus), "e": Base64URL.encode(primitives.publicExponent)]
    }

    /// Signs `claims` with this key, naming `kid` (its own unless told otherwise) and `alg`.
    func sign(_ claims: [String: Any], kid: String? = nil, alg: String = "RS256") -> String {
        let header = try! JSONSerialization.data(withJSONObject: ["alg": alg, "kid": kid ?? self.kid], options: [.sortedKeys])
        let payload = try! JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys, .withoutEscapingSlashes])
        let input = Base64URL.encode(header) + "." + Base64URL.encode(payload)
        let signature = try! key.signature(for: SHA256.hash(data: Data(input.utf8)), padding: .insecurePKCS1v1_5)
        return input + "." + Base64URL.encode(signature.rawRepresentation)
    }

    /// Re-signs the claims of `token` with this key, after `change`.
    func resign(_ token: String, kid: String? = nil, _ change: (inout [String: Any]) -> Void = { _ in }) -> String {
        var claims = JWT.claims(token)
        change(&claims)
        return sign(claims, kid: kid)
    }
}

/// Reading compact JWS without verifying.
enum JWT {
    static func header(_ token: String) -> [String: Any] { part(token, 0) }
    static func claims(_ token: String) -> [String: Any] { part(token, 1) }

    private static func part(_ token: String, _ index: Int) -> [String: Any] {
        let data = Base64URL.decode(token.split(separator: ".", omittingEmptySubsequences: false)[index])!
        return try! JSONSerialization.jsonObject(with: data) as! [String: Any]
    }

    /// `token` with its claims replaced but its original header and signature kept (a tampered token).
    static func tampered(_ token: String, _ change: (inout [String: Any]) -> Void) -> String {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        var claims = self.claims(token)
        change(&claims)
        let payload = try! JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys, .withoutEscapingSlashes])
        return String(parts[0]) + "." + Base64URL.encode(payload) + "." + String(parts[2])
    }
}
