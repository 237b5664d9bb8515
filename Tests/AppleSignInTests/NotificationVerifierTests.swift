import AppleSignIn
import Foundation
import JOSE
import Testing

@Suite("Server-to-server notifications")
struct NotificationVerifierTests {
    let verifier = NotificationVerifier(
        keySet: AppleKeySet(source: .fixed(TestKeys.appleSet)),
        audiences: [try! ClientID(TestTokens.audience)],
        issuers: [TestTokens.issuer]
    )
    let now = TestTokens.now
    /// 2025-06-15 15:06:40.123 UTC in milliseconds, as Apple sends `event_time`.
    let eventTimeMilliseconds = 1_750_000_000_123

    private func event(type: String, email: Bool = false) -> TestJSON {
        var event: [String: TestJSON] = ["type": .string(type), "sub": "001234.abcdef.1234", "event_time": .int(eventTimeMilliseconds)]
        if email {
            event["email"] = "jane@privaterelay.appleid.com"
            event["is_private_email"] = "true"
        }
        return .object(event)
    }

    private func claims(events: TestJSON, aud: TestJSON = .string(TestTokens.audience), iat: Int? = nil, exp: Int? = nil) -> [String: TestJSON] {
        let issuedAt = iat ?? Int(now.timeIntervalSince1970)
        // Apple's notifications expire a day after they are issued.
        return [
            "iss": .string(TestTokens.issuer),
            "aud": aud,
            "iat": .int(issuedAt),
            "exp": .int(exp ?? issuedAt + 86_400),
            "jti": "jti-0001",
            "events": events,
        ]
    }

    /// `{"payload": "<JWS>"}`, the body Apple posts.
    private func body(_ token: String) -> [UInt8] {
        Array(#"{"payload":"\#(token)"}"#.utf8)
    }

    private func refused(_ body: [UInt8], check: IdentityTokenError.Check, sourceLocation: SourceLocation = #_sourceLocation) async {
        do {
            let notification = try await verifier.verify(body: body, now: now)
            Issue.record("expected the \(check) check to fail, got \(notification.event.type)", sourceLocation: sourceLocation)
        } catch {
            #expect(error.check == check, "\(error)", sourceLocation: sourceLocation)
        }
    }

    @Test("events as a JSON-encoded string (as Apple sends) are decoded, event_time in milliseconds")
    func eventsAsString() async throws {
        let token = TestTokens.rs256(claims(events: .string(event(type: "email-disabled", email: true).jsonText)))
        let notification = try await verifier.verify(body: body(token), now: now)
        #expect(notification.id == "jti-0001")
        #expect(notification.audience == TestTokens.audience)
        #expect(notification.issuedAt == now)
        #expect(notification.event.type == .emailDisabled)
        #expect(notification.event.subject == "001234.abcdef.1234")
        #expect(notification.event.eventTime == Date(timeIntervalSince1970: 1_750_000_000.123))
        #expect(notification.event.email == "jane@privaterelay.appleid.com")
        #expect(notification.event.isPrivateEmail == true)
    }

    @Test("events as a JSON object are decoded the same way")
    func eventsAsObject() async throws {
        let token = TestTokens.rs256(claims(events: event(type: "email-enabled", email: true)))
        let notification = try await verifier.verify(body: body(token), now: now)
        #expect(notification.event.type == .emailEnabled)
        #expect(notification.event.eventTime == Date(timeIntervalSince1970: 1_750_000_000.123))
        #expect(notification.event.isPrivateEmail == true)
    }

    @Test(
        "each event type is typed, and an unknown type is kept as sent",
        arguments: [
            ("email-disabled", AppleNotification.EventType.emailDisabled),
            ("email-enabled", .emailEnabled),
            ("consent-revoked", .consentRevoked),
            ("account-delete", .accountDelete),
            ("account-paused", .unknown("account-paused")),
        ]
    )
    func eventTypes(raw: String, expected: AppleNotification.EventType) async throws {
        let token = TestTokens.rs256(claims(events: .string(event(type: raw).jsonText)))
        let notification = try await verifier.verify(body: body(token), now: now)
        #expect(notification.event.type == expected)
        #expect(notification.event.type.rawValue == raw)
        #expect(notification.event.email == nil)
    }

    @Test("the JWS can be verified directly, as the CLI does")
    func payloadDirectly() async throws {
        let token = TestTokens.rs256(claims(events: .string(event(type: "consent-revoked").jsonText)))
        #expect(try await verifier.verify(payload: token, now: now).event.type == .consentRevoked)
    }

    @Test("a notification signed by another key is refused")
    func forged() async {
        let token = TestTokens.rs256(claims(events: .string(event(type: "account-delete").jsonText)), key: TestKeys.other)
        await refused(body(token), check: .signature)
    }

    @Test("a notification for another client_id is refused")
    func wrongAudience() async {
        let token = TestTokens.rs256(claims(events: .string(event(type: "account-delete").jsonText), aud: "com.other.web"))
        await refused(body(token), check: .audience)
    }

    @Test("a notification from another issuer is refused")
    func wrongIssuer() async {
        var claims = claims(events: .string(event(type: "account-delete").jsonText))
        claims["iss"] = "https://evil.example"
        await refused(body(TestTokens.rs256(claims)), check: .issuer)
    }

    @Test("a notification issued in the future beyond the leeway is refused")
    func issuedInFuture() async {
        let token = TestTokens.rs256(claims(events: .string(event(type: "account-delete").jsonText), iat: Int(now.timeIntervalSince1970) + 120))
        await refused(body(token), check: .issuedInFuture)
    }

    @Test("a notification whose exp has passed (beyond the leeway) is refused by the exp check")
    func expired() async throws {
        let issued = Int(now.timeIntervalSince1970) - 2 * 86_400
        await refused(body(TestTokens.rs256(claims(events: .string(event(type: "account-delete").jsonText), iat: issued))), check: .expired)
        // Within the 60 s leeway it is still accepted.
        let justExpired = TestTokens.rs256(claims(events: .string(event(type: "account-delete").jsonText), iat: issued, exp: Int(now.timeIntervalSince1970) - 30))
        #expect(try await verifier.verify(body: body(justExpired), now: now).event.type == .accountDelete)
    }

    @Test("a notification without exp is refused as a claim error")
    func withoutExp() async {
        var unbounded = claims(events: .string(event(type: "account-delete").jsonText))
        unbounded["exp"] = nil
        await refused(body(TestTokens.rs256(unbounded)), check: .claims)
    }

    @Test("an HS256 notification is refused")
    func wrongAlgorithm() async {
        let token = TestTokens.unsigned(header: ["alg": "HS256", "kid": TestKeys.appleKID], claims: claims(events: .string(event(type: "account-delete").jsonText)), signature: "c2ln")
        await refused(body(token), check: .algorithm)
    }

    @Test(
        "a body that is not {\"payload\": \"<JWS>\"} is refused",
        arguments: ["", "{}", "[]", #"{"payload":42}"#, #"{"signedPayload":"a.b.c"}"#, "payload=a.b.c", "not json"]
    )
    func malformedBody(text: String) async {
        await refused(Array(text.utf8), check: .malformed)
    }

    @Test("events that are missing, not JSON or lack a type are refused as claim errors", arguments: [nil, .string("{not json"), .object(["sub": "x", "event_time": 1])] as [TestJSON?])
    func malformedEvents(events: TestJSON?) async {
        var claims = claims(events: "")
        claims["events"] = events
        await refused(body(TestTokens.rs256(claims)), check: .claims)
    }

    @Test("a body larger than any notification Apple sends is refused")
    func tooLarge() async {
        await refused(Array(#"{"payload":"\#(String(repeating: "a", count: 20_000))"}"#.utf8), check: .tooLarge)
    }
}
