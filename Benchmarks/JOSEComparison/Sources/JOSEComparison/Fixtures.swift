import AppleSignIn
import Crypto
import CryptoExtras
import Foundation
import JOSE

/// Why the benchmark could not start or a loop saw a failure.
struct BenchmarkFailure: Error, CustomStringConvertible {
    var description: String
}

/// The claims of an Apple id_token from a web sign-in with the email scope (APPLE.md §10, 2025 shape: booleans as
/// JSON booleans, `exp` − `iat` = 86400, `c_hash` on front-channel tokens).
struct AppleIDTokenClaims: Encodable {
    var iss = "https://appleid.apple.com"
    var aud = Fixtures.clientID
    var exp: Int
    var iat: Int
    var sub = "001234.0a1b2c3d4e5f67890a1b2c3d4e5f6789.1234"
    var c_hash: String
    var email = "jane@privaterelay.appleid.com"
    var email_verified = true
    var is_private_email = true
    var auth_time: Int
    var nonce: String
    var nonce_supported = true
}

/// Keys and tokens, generated once; both implementations are fed exactly these bytes.
struct Fixtures {
    static let clientID = "com.example.web"
    static let teamID = "A1B2C3D4E5"
    static let clientSecretKeyID = "ABC123DEFG"
    /// Key ids shaped like Apple's; the id_token is signed with the first.
    static let keyIDs = ["W6WcOKB", "86D88Kf", "eXaunmL"]
    /// The nonce the sign-in sent and the authorization code that came with the token (Apple's shapes).
    static let nonce = "qVh1Wk4xYx0n1vXkz5yVnL1cVb7oVd5o0mZl2yJX5fQ"
    static let code = "c37e98af176a14ca1949c2482c646454c.0.nwqv.rLqViV0PdM01Z1cTXMNuRA"

    let rsaKeys: [_RSA.Signing.PrivateKey]
    /// Apple's `/auth/keys` document with three RSA-2048 keys, as bytes and as text.
    let jwksData: Data
    let jwksText: String
    let idToken: String
    let idTokenPayloadJSON: String

    let p256Key: P256.Signing.PrivateKey
    /// A client secret signed by the project's `ClientSecretSigner` (ES256, kid, iss, iat, exp, aud, sub).
    let clientSecret: String

    init(now: Date) throws {
        rsaKeys = try (0..<3).map { _ in try _RSA.Signing.PrivateKey(keySize: .bits2048) }
        let jwks = JSONWebKeySet(keys: try zip(Self.keyIDs, rsaKeys).map { kid, key in
            let primitives = try key.publicKey.getKeyPrimitives()
            return JSONWebKeySet.Key(
                kty: "RSA", kid: kid, use: "sig", alg: "RS256",
                n: Base64URL.encode(primitives.modulus), e: Base64URL.encode(primitives.publicExponent)
            )
        })
        jwksData = try JSONEncoder().encode(jwks)
        jwksText = String(decoding: jwksData, as: UTF8.self)

        let issuedAt = Int(now.timeIntervalSince1970)
        let claims = AppleIDTokenClaims(exp: issuedAt + 86_400, iat: issuedAt, c_hash: Digests.codeHash(Self.code), auth_time: issuedAt, nonce: Self.nonce)
        idToken = try JWTSigning.rs256(header: ["alg": "RS256", "kid": Self.keyIDs[0]], claims: claims, key: rsaKeys[0])
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        idTokenPayloadJSON = String(decoding: try encoder.encode(claims), as: UTF8.self)

        p256Key = P256.Signing.PrivateKey()
        let signer = ClientSecretSigner(
            teamID: try TeamID(Self.teamID), keyID: try KeyID(Self.clientSecretKeyID), key: SigningKey(p256Key), lifetime: 86_400 * 180
        )
        clientSecret = try signer.signFresh(for: try ClientID(Self.clientID), now: now).secret
    }

    /// Signs any header and payload text with RS256: the probes need JSON that no encoder would write.
    static func signRS256(header: String, payload: String, key: _RSA.Signing.PrivateKey) throws -> String {
        let input = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(payload.utf8))
        let signature = try key.signature(for: SHA256.hash(data: Data(input.utf8)), padding: .insecurePKCS1v1_5)
        return input + "." + Base64URL.encode(signature.rawRepresentation)
    }
}
