import JOSE
import Crypto
import Foundation

/// Verifies Apple identity tokens exactly as the server does (APPLE.md §5), each failure naming its check.
public struct IdentityTokenVerifier: Sendable {
    private struct Claims: Decodable {
        var iss: String
        var aud: Audience
        var exp: NumericDate
        var iat: NumericDate
        var sub: String
        var nonce: String?
        var nonce_supported: FlexibleBool?
        var c_hash: String?
        var auth_time: NumericDate?
        var email: String?
        var email_verified: FlexibleBool?
        var is_private_email: FlexibleBool?
        var real_user_status: Int?
        var transfer_sub: String?
        var org_id: String?
    }

    private let jwt: SignedJWTVerifier
    /// Allowed clock skew for `exp` and `iat`.
    public let leeway: TimeInterval

    /// Creates a verifier accepting tokens for `audiences` from `issuers`, with keys from `keySet`.
    public init(keySet: AppleKeySet, audiences: [ClientID], issuers: [String], leeway: TimeInterval = 60) {
        jwt = SignedJWTVerifier(keySet: keySet, audiences: Set(audiences.map(\.rawValue)), issuers: Set(issuers))
        self.leeway = leeway
    }

    /// Verifies `token`. Give `nonce` when one was sent (raw; its SHA-256 hex is also accepted, as native apps
    /// send), and `code` when the token came with an authorization code (checks `c_hash`).
    public func verify(_ token: String, nonce expectedNonce: String? = nil, code: String? = nil, now: Date = Date()) async throws(IdentityTokenError) -> AppleIdentity {
        let payload = try await jwt.verifiedPayload(token)
        let claims = try SignedJWTVerifier.decodeClaims(Claims.self, from: payload)
        try jwt.checkIssuerAndAudience(iss: claims.iss, aud: claims.aud)

        let current = now.timeIntervalSince1970
        guard current <= claims.exp.secondsSince1970 + leeway else {
            throw IdentityTokenError(.expired, "the token expired at \(Int(claims.exp.secondsSince1970)), \(Int(current - claims.exp.secondsSince1970)) s ago")
        }
        guard claims.iat.secondsSince1970 <= current + leeway else {
            throw IdentityTokenError(.issuedInFuture, "iat \(Int(claims.iat.secondsSince1970)) is \(Int(claims.iat.secondsSince1970 - current)) s in the future (leeway \(Int(leeway)) s)")
        }
        guard !claims.sub.isEmpty else {
            throw IdentityTokenError(.claims, "the claim sub is empty")
        }

        if let expectedNonce {
            if let nonce = claims.nonce {
                guard nonce == expectedNonce || nonce == Self.sha256Hex(expectedNonce) else {
                    throw IdentityTokenError(.nonceMismatch, "the token's nonce is neither the nonce sent nor its SHA-256")
                }
            } else if claims.nonce_supported?.value != false {
                throw IdentityTokenError(.nonceMissing, "a nonce was sent but the token carries none")
            }
        }

        if let code {
            guard let cHash = claims.c_hash else {
                throw IdentityTokenError(.codeHash, "the token has no c_hash to bind it to the authorization code")
            }
            guard cHash == Self.codeHash(code) else {
                throw IdentityTokenError(.codeHash, "c_hash does not match the authorization code returned with the token")
            }
        }

        return AppleIdentity(
            subject: claims.sub,
            audience: claims.aud.values.first ?? "",
            issuer: claims.iss,
            issuedAt: Date(timeIntervalSince1970: claims.iat.secondsSince1970),
            expiresAt: Date(timeIntervalSince1970: claims.exp.secondsSince1970),
            authTime: claims.auth_time.map { Date(timeIntervalSince1970: $0.secondsSince1970) },
            email: claims.email,
            emailVerified: claims.email_verified?.value,
            isPrivateEmail: claims.is_private_email?.value,
            nonceSupported: claims.nonce_supported?.value,
            nonce: claims.nonce,
            realUserStatus: claims.real_user_status,
            transferSubject: claims.transfer_sub,
            organizationID: claims.org_id
        )
    }

    /// `c_hash`: base64url of the left half of SHA-256 of the code.
    public static func codeHash(_ code: String) -> String {
        let digest = Array(SHA256.hash(data: Data(code.utf8)))
        return Base64URL.encode(digest.prefix(digest.count / 2))
    }

    /// Lower-case hex SHA-256, the form native apps put in `nonce`.
    public static func sha256Hex(_ text: String) -> String {
        SHA256.hash(data: Data(text.utf8)).map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }
}
