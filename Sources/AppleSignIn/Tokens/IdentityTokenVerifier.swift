import JOSE
import Crypto
import Foundation

/// Verifies Apple identity tokens exactly as the server does (APPLE.md §5), each failure naming its check.
public struct IdentityTokenVerifier: Sendable {
    private let jwt: SignedJWTVerifier
    /// Allowed clock skew for `exp` and `iat`.
    public let leeway: TimeInterval

    /// Creates a verifier accepting tokens for `audiences` from `issuers`, with keys from `keySet`.
    public init(keySet: AppleKeySet, audiences: [ClientID], issuers: [String], leeway: TimeInterval = 60) {
        jwt = SignedJWTVerifier(keySet: keySet, audiences: audiences.map(\.rawValue), issuers: issuers)
        self.leeway = leeway
    }

    /// Verifies `token`. Give `nonce` when one was sent (raw; its SHA-256 hex is also accepted, as native apps
    /// send), and `code` when the token came with an authorization code (checks `c_hash`).
    public func verify(_ token: String, nonce expectedNonce: String? = nil, code: String? = nil, now: Date = Date()) async throws(IdentityTokenError) -> AppleIdentity {
        let payload = try await jwt.verifiedPayload(token)
        let claims = try ClaimSet(payload: payload)
        let iss = try claims.string("iss")
        let aud = try claims.audience()
        let exp = try claims.date("exp")
        let iat = try claims.date("iat")
        let sub = try claims.string("sub")
        let tokenNonce = try claims.optionalString("nonce")
        let nonceSupported = try claims.flexibleBool("nonce_supported")
        let cHashClaim = try claims.optionalString("c_hash")
        try jwt.checkIssuerAndAudience(iss: iss, aud: aud)

        try SignedJWTVerifier.checkLifetime(exp: exp, iat: iat, now: now, leeway: leeway)
        guard !sub.isEmpty else {
            throw IdentityTokenError(.claims, "the claim sub is empty")
        }

        if let expectedNonce {
            if let nonce = tokenNonce {
                guard nonce == expectedNonce || nonce == Self.sha256Hex(expectedNonce) else {
                    throw IdentityTokenError(.nonceMismatch, "the token's nonce is neither the nonce sent nor its SHA-256")
                }
            } else if nonceSupported != false {
                throw IdentityTokenError(.nonceMissing, "a nonce was sent but the token carries none")
            }
        }

        if let code {
            guard let cHash = cHashClaim else {
                throw IdentityTokenError(.codeHash, "the token has no c_hash to bind it to the authorization code")
            }
            guard Digests.matchesCodeHash(cHash, code: code) else {
                throw IdentityTokenError(.codeHash, "c_hash does not match the authorization code returned with the token")
            }
        }

        return AppleIdentity(
            subject: sub,
            audience: aud.values.first ?? "",
            issuer: iss,
            issuedAt: Date(timeIntervalSince1970: iat),
            expiresAt: Date(timeIntervalSince1970: exp),
            authTime: try claims.optionalDate("auth_time").map { Date(timeIntervalSince1970: $0) },
            email: try claims.optionalString("email"),
            emailVerified: try claims.flexibleBool("email_verified"),
            isPrivateEmail: try claims.flexibleBool("is_private_email"),
            nonceSupported: nonceSupported,
            nonce: tokenNonce,
            realUserStatus: try claims.optionalInt("real_user_status"),
            transferSubject: try claims.optionalString("transfer_sub"),
            organizationID: try claims.optionalString("org_id")
        )
    }

    /// `c_hash`: base64url of the left half of SHA-256 of the code.
    public static func codeHash(_ code: String) -> String { Digests.codeHash(code) }

    /// Lower-case hex SHA-256, the form native apps put in `nonce`.
    public static func sha256Hex(_ text: String) -> String { Digests.sha256Hex(text) }
}
