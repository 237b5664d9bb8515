import JOSE
import Foundation

/// Verifies Apple's server-to-server notification bodies: `{"payload": "<JWS>"}` signed with Apple's key set.
public struct NotificationVerifier: Sendable {
    private struct Body: Decodable {
        var payload: String
    }

    private let jwt: SignedJWTVerifier
    /// Allowed clock skew for `exp` and `iat`.
    public let leeway: TimeInterval

    /// Creates a verifier for notifications addressed to `audiences`.
    public init(keySet: AppleKeySet, audiences: [ClientID], issuers: [String], leeway: TimeInterval = 60) {
        jwt = SignedJWTVerifier(keySet: keySet, audiences: audiences.map(\.rawValue), issuers: issuers)
        self.leeway = leeway
    }

    /// Verifies a request body as Apple posts it.
    public func verify(body: some Collection<UInt8>, now: Date = Date()) async throws(IdentityTokenError) -> AppleNotification {
        guard body.count <= CompactJWS.maximumSize + 64 else {
            throw IdentityTokenError(.tooLarge, "the notification body is \(body.count) bytes")
        }
        let payload: String
        do {
            payload = try JSONDecoder().decode(Body.self, from: Data(body)).payload
        } catch {
            throw IdentityTokenError(.malformed, "the body is not {\"payload\": \"<JWS>\"}")
        }
        return try await verify(payload: payload, now: now)
    }

    /// Verifies the JWS itself (the CLI's `verify-notification` takes it directly).
    public func verify(payload: String, now: Date = Date()) async throws(IdentityTokenError) -> AppleNotification {
        let claims = try ClaimSet(payload: try await jwt.verifiedPayload(payload))
        let aud = try claims.audience()
        try jwt.checkIssuerAndAudience(iss: try claims.string("iss"), aud: aud)
        let iat = try claims.date("iat")
        try SignedJWTVerifier.checkLifetime(exp: try claims.date("exp"), iat: iat, now: now, leeway: leeway)
        let jti = try claims.string("jti")
        let event = try claims.nested("events")
        let subject = try event.string("sub")
        guard !jti.isEmpty, !subject.isEmpty else {
            throw IdentityTokenError(.claims, "jti and events.sub must not be empty")
        }
        return AppleNotification(
            id: jti,
            audience: aud.values.first ?? "",
            issuedAt: Date(timeIntervalSince1970: iat),
            event: .init(
                type: .init(rawValue: try event.string("type")),
                subject: subject,
                eventTime: Date(timeIntervalSince1970: try event.milliseconds("event_time")),
                email: try event.optionalString("email"),
                isPrivateEmail: try event.flexibleBool("is_private_email")
            )
        )
    }
}
