import AppleSignIn
import Crypto
import CryptoExtras
import Foundation
import JOSE

/// The project's own paths: its public API where it has one (identity tokens, client secret signing, key set),
/// the JOSE module directly where the code is internal to a module (the emulator's client-secret check).
struct OwnImplementation {
    let verifier: IdentityTokenVerifier
    let signer: ClientSecretSigner
    let clientID: ClientID
    let clientSecretKey: P256.Signing.PublicKey

    init(fixtures: Fixtures) async throws {
        let keySet = try await Self.loadKeySet(fixtures.jwksData)
        clientID = try ClientID(Fixtures.clientID)
        verifier = IdentityTokenVerifier(keySet: keySet, audiences: [clientID], issuers: ["https://appleid.apple.com"])
        signer = ClientSecretSigner(
            teamID: try TeamID(Fixtures.teamID), keyID: try KeyID(Fixtures.clientSecretKeyID), key: SigningKey(fixtures.p256Key),
            lifetime: 86_400 * 180
        )
        clientSecretKey = fixtures.p256Key.publicKey
    }

    /// RS256: `IdentityTokenVerifier.verify` as the server calls it, every check (alg, kid, signature, iss, aud,
    /// exp, iat, sub, nonce, c_hash) and the typed `AppleIdentity`.
    func verifyIDToken(_ token: String, nonce: String, code: String) async throws -> AppleIdentity {
        try await verifier.verify(token, nonce: nonce, code: code)
    }

    /// ES256 verify: the emulator's `ClientSecretVerifier` (internal to AppleIDEmulator) step by step, with the
    /// public key parsed once instead of from PEM on every call.
    func verifyClientSecret(_ secret: String, now: Date) throws -> ClientSecretSigner.Claims {
        let jws = try CompactJWS(secret)
        guard jws.header.alg == "ES256", jws.header.kid == Fixtures.clientSecretKeyID else { throw BenchmarkFailure(description: "header") }
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: jws.signature)
        guard clientSecretKey.isValidSignature(signature, for: Data(jws.signingInput)) else { throw BenchmarkFailure(description: "signature") }
        let claims = try JSONDecoder().decode(ClientSecretSigner.Claims.self, from: Data(jws.payload))
        try checkClientSecretClaims(iss: claims.iss, sub: claims.sub, aud: claims.aud, iat: Double(claims.iat), exp: Double(claims.exp), now: now)
        return claims
    }

    /// ES256 sign: `ClientSecretSigner.signFresh`, the call the cache makes when a secret is due.
    func signClientSecret(now: Date) throws -> String {
        try signer.signFresh(for: clientID, now: now).secret
    }

    /// JWKS parse: what `AppleKeySet` does with a fetched body (decode `JSONWebKeySet`, build the RSA public keys),
    /// then every key looked up once, so the keys are known to be usable.
    static func loadKeySet(_ body: Data) async throws -> AppleKeySet {
        let set = try JSONDecoder().decode(JSONWebKeySet.self, from: body)
        let keySet = AppleKeySet(source: .fixed(set))
        for kid in Fixtures.keyIDs { _ = try await keySet.key(for: kid) }
        return keySet
    }
}

/// The emulator's client-secret claim checks, shared by both implementations so only the JOSE work differs.
func checkClientSecretClaims(iss: String, sub: String, aud: String, iat: Double, exp: Double, now: Date) throws {
    let current = now.timeIntervalSince1970
    guard iss == Fixtures.teamID, sub == Fixtures.clientID, aud == "https://appleid.apple.com", exp > current, iat <= current + 60,
        exp - iat <= 15_777_000
    else { throw BenchmarkFailure(description: "client secret claims") }
}
