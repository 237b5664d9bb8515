import Foundation
import JOSE
import JWTKit

/// The id_token claims as a jwt-kit payload: the same claims `IdentityTokenVerifier` reads, with the same checks
/// (iss, exp and iat with 60 s leeway, sub not empty); `aud` goes through jwt-kit's `expectedAudience`.
/// jwt-kit's own `AppleIdentityToken` is not used: it has no `c_hash`, `auth_time` or `transfer_sub`, and no leeway.
struct JWTKitIDToken: JWTIdentityToken {
    enum CodingKeys: String, CodingKey {
        case issuer = "iss", audience = "aud", expires = "exp", issuedAt = "iat", subject = "sub", authTime = "auth_time"
        case email, emailVerified = "email_verified", isPrivateEmail = "is_private_email", nonceSupported = "nonce_supported"
        case nonce, codeHash = "c_hash", realUserStatus = "real_user_status", transferSubject = "transfer_sub", organizationID = "org_id"
    }

    var issuer: IssuerClaim
    var audience: AudienceClaim
    var expires: ExpirationClaim
    var issuedAt: IssuedAtClaim
    var subject: SubjectClaim
    var authTime: Date?
    var email: String?
    var emailVerified: BoolClaim?
    var isPrivateEmail: BoolClaim?
    var nonceSupported: BoolClaim?
    var nonce: String?
    var codeHash: String?
    var realUserStatus: Int?
    var transferSubject: String?
    var organizationID: String?

    func verify(using _: some JWTAlgorithm) async throws {
        let now = Date()
        guard issuer.value == "https://appleid.apple.com" else {
            throw JWTError.claimVerificationFailure(failedClaim: issuer, reason: "not Apple")
        }
        try expires.verifyNotExpired(currentDate: now.addingTimeInterval(-60))
        guard issuedAt.value <= now.addingTimeInterval(60) else {
            throw JWTError.claimVerificationFailure(failedClaim: issuedAt, reason: "in the future")
        }
        guard !subject.value.isEmpty else {
            throw JWTError.claimVerificationFailure(failedClaim: subject, reason: "empty")
        }
    }
}

/// The Apple client secret as a jwt-kit payload.
struct JWTKitClientSecret: JWTPayload {
    var iss: IssuerClaim
    var iat: IssuedAtClaim
    var exp: ExpirationClaim
    var aud: AudienceClaim
    var sub: SubjectClaim

    /// The claim checks are made by the caller (`checkClientSecretClaims`), as for the project's path.
    func verify(using _: some JWTAlgorithm) async throws {}
}

/// The jwt-kit 5 paths on the same inputs: one `JWTKeyCollection` per use, as an application would hold them.
struct JWTKitImplementation {
    let idTokenKeys: JWTKeyCollection
    let clientSecretVerifyKeys: JWTKeyCollection
    let clientSecretSignKeys: JWTKeyCollection

    init(fixtures: Fixtures) async throws {
        idTokenKeys = try await Self.loadKeySet(fixtures.jwksText)
        let kid = JWKIdentifier(string: Fixtures.clientSecretKeyID)
        let publicKey = try ES256PublicKey(backing: fixtures.p256Key.publicKey)
        let privateKey = try ES256PrivateKey(backing: fixtures.p256Key)
        clientSecretVerifyKeys = JWTKeyCollection()
        await clientSecretVerifyKeys.add(ecdsa: publicKey, kid: kid)
        clientSecretSignKeys = JWTKeyCollection()
        await clientSecretSignKeys.add(ecdsa: privateKey, kid: kid)
    }

    /// RS256: `verify(_:as:expectedAudience:)` into the typed payload, then the two checks jwt-kit does not know
    /// (nonce, c_hash) with the same code the project uses, so they cost the same on both sides.
    func verifyIDToken(_ token: String, nonce: String, code: String) async throws -> JWTKitIDToken {
        let payload = try await idTokenKeys.verify(token, as: JWTKitIDToken.self, expectedAudience: Fixtures.clientID)
        guard let tokenNonce = payload.nonce, tokenNonce == nonce || tokenNonce == Digests.sha256Hex(nonce) else {
            throw BenchmarkFailure(description: "nonce")
        }
        guard let codeHash = payload.codeHash, Digests.matchesCodeHash(codeHash, code: code) else {
            throw BenchmarkFailure(description: "c_hash")
        }
        return payload
    }

    /// ES256 verify into the typed payload, then the same claim checks as the project's path.
    func verifyClientSecret(_ secret: String, now: Date) async throws -> JWTKitClientSecret {
        let claims = try await clientSecretVerifyKeys.verify(secret, as: JWTKitClientSecret.self)
        try checkClientSecretClaims(
            iss: claims.iss.value, sub: claims.sub.value, aud: claims.aud.value.first ?? "",
            iat: claims.iat.value.timeIntervalSince1970, exp: claims.exp.value.timeIntervalSince1970, now: now
        )
        return claims
    }

    /// ES256 sign: the client secret with whole-second `iat`/`exp`, header `alg`, `kid` (jwt-kit adds `typ`).
    func signClientSecret(now: Date) async throws -> String {
        let issuedAt = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        let claims = JWTKitClientSecret(
            iss: IssuerClaim(value: Fixtures.teamID), iat: IssuedAtClaim(value: issuedAt),
            exp: ExpirationClaim(value: issuedAt.addingTimeInterval(86_400 * 180)), aud: AudienceClaim(value: ["https://appleid.apple.com"]),
            sub: SubjectClaim(value: Fixtures.clientID)
        )
        return try await clientSecretSignKeys.sign(claims, kid: JWKIdentifier(string: Fixtures.clientSecretKeyID))
    }

    /// JWKS parse: `add(jwksJSON:)` on a new collection (it builds each key's signer as it adds it), then every key
    /// looked up once.
    static func loadKeySet(_ json: String) async throws -> JWTKeyCollection {
        let keys = JWTKeyCollection()
        try await keys.add(jwksJSON: json)
        for kid in Fixtures.keyIDs { _ = try await keys.getKey(for: JWKIdentifier(string: kid), alg: "RS256") }
        return keys
    }
}
