import JOSE
import Foundation

/// Verifies Apple's server-to-server notification bodies: `{"payload": "<JWS>"}` signed with Apple's key set.
public struct NotificationVerifier: Sendable {
    private struct Body: Decodable {
        var payload: String
    }

    private struct Claims: Decodable {
        var iss: String
        var aud: Audience
        var iat: NumericDate
        var exp: NumericDate
        var jti: String
        var events: EventsClaim
    }

    /// `events` arrives as a JSON-encoded string (as Apple sends) or as an object.
    private struct EventsClaim: Decodable {
        var event: RawEvent

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let text = try? container.decode(String.self) {
                event = try JSONDecoder().decode(RawEvent.self, from: Data(text.utf8))
            } else {
                event = try container.decode(RawEvent.self)
            }
        }
    }

    private struct RawEvent: Decodable {
        var type: String
        var sub: String
        var event_time: NumericDate
        var email: String?
        var is_private_email: FlexibleBool?
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
        let bytes = try await jwt.verifiedPayload(payload)
        let claims = try SignedJWTVerifier.decodeClaims(Claims.self, from: bytes)
        try jwt.checkIssuerAndAudience(iss: claims.iss, aud: claims.aud)
        try SignedJWTVerifier.checkLifetime(exp: claims.exp.secondsSince1970, iat: claims.iat.secondsSince1970, now: now, leeway: leeway)
        guard !claims.jti.isEmpty, !claims.events.event.sub.isEmpty else {
            throw IdentityTokenError(.claims, "jti and events.sub must not be empty")
        }
        let raw = claims.events.event
        return AppleNotification(
            id: claims.jti,
            audience: claims.aud.values.first ?? "",
            issuedAt: Date(timeIntervalSince1970: claims.iat.secondsSince1970),
            event: .init(
                type: .init(rawValue: raw.type),
                subject: raw.sub,
                eventTime: Date(timeIntervalSince1970: raw.event_time.secondsSince1970 / 1000),
                email: raw.email,
                isPrivateEmail: raw.is_private_email?.value
            )
        )
    }
}
