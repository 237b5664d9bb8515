import AppleSignIn
import Foundation
@testable import SignInServer

/// Builds the values the stores take, with sensible defaults.
enum Records {
    static let webClient = "com.example.siwa.web"

    /// A pending authorization created at `at`, usable for `lifetime` seconds.
    static func pending(state: String = "st-" + Support.randomHex(), at: Date, lifetime: TimeInterval = 600) -> PendingAuthorization {
        PendingAuthorization(
            state: state, nonce: "n-" + Support.randomHex(), returnTo: "/after/" + Support.randomHex(4),
            bindingHash: SignInFlow.hash("binding-" + state), createdAt: at, expiresAt: at.addingTimeInterval(lifetime)
        )
    }

    /// A sign-in of `subject` at `at`; its session id (the cookie value) is `sessionID`.
    static func signIn(
        _ subject: String,
        at: Date,
        sessionID: String = "sid-" + Support.randomHex(),
        sessionLifetime: TimeInterval = 86_400,
        email: String? = nil,
        firstName: String? = nil,
        lastName: String? = nil,
        refreshToken: String? = nil,
        transferSubject: String? = nil
    ) -> CompletedSignIn {
        CompletedSignIn(
            subject: subject, email: email, isPrivateEmail: email?.hasSuffix("@privaterelay.appleid.com") ?? false,
            firstName: firstName, lastName: lastName, refreshToken: refreshToken, clientID: webClient, transferSubject: transferSubject,
            session: SessionRecord(idHash: SignInFlow.hash(sessionID), subject: subject, csrfToken: "csrf-" + Support.randomHex(), createdAt: at, expiresAt: at.addingTimeInterval(sessionLifetime)),
            at: at
        )
    }

    /// A verified notification, as `NotificationVerifier` would hand it to the store.
    static func notification(_ type: String, sub: String, jti: String = "jti-" + Support.randomHex(), at: Date = Date()) throws -> AppleNotification {
        let json: [String: Any] = [
            "jti": jti, "aud": webClient, "iat": at.timeIntervalSinceReferenceDate,
            "events": ["type": type, "sub": sub, "event_time": at.timeIntervalSinceReferenceDate],
        ]
        return try JSONDecoder().decode(AppleNotification.self, from: try JSONSerialization.data(withJSONObject: json))
    }

    /// A random Apple-like user id.
    static func subject() -> String {
        "000" + String(Int.random(in: 100...999)) + "." + Support.randomHex(16) + "." + String(Int.random(in: 1000...9999))
    }
}
