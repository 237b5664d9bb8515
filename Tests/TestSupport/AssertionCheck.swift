import Crypto
import Foundation
import JOSE

/// What a test learns of an `X-Siwa-Assertion` checked against siwa's key set, the way an upstream checks it: the
/// header's algorithm, whether the signature verifies with the key its `kid` names, and the claims.
public struct AssertionCheck {
    /// The header's `alg`.
    public var algorithm: String?
    /// Whether a published key has the header's `kid` and the ES256 signature verifies with it.
    public var signatureVerifies: Bool
    /// The payload's claims.
    public var claims: [String: Any]

    /// Checks `token` against `keySet`, the JSON of `GET /.well-known/siwa/jwks.json`.
    public init(_ token: String, keySet: String) throws {
        let keys = (try JSONSerialization.jsonObject(with: Data(keySet.utf8)) as? [String: Any])?["keys"] as? [[String: String]] ?? []
        let jws = try CompactJWS(token)
        algorithm = jws.header.alg
        if let jwk = keys.first(where: { $0["kid"] == jws.header.kid }), let x = Base64URL.decode(jwk["x"] ?? ""), let y = Base64URL.decode(jwk["y"] ?? "") {
            let publicKey = try P256.Signing.PublicKey(rawRepresentation: x + y)
            let signature = try P256.Signing.ECDSASignature(rawRepresentation: jws.signature)
            signatureVerifies = publicKey.isValidSignature(signature, for: Data(Array(jws.signingInput)))
        } else {
            signatureVerifies = false
        }
        claims = try JSONSerialization.jsonObject(with: Data(jws.payload)) as? [String: Any] ?? [:]
    }

    /// `exp` - `iat`, when both are there.
    public var lifetime: Int? {
        guard let expires = claims["exp"] as? Int, let issued = claims["iat"] as? Int else { return nil }
        return expires - issued
    }
}
