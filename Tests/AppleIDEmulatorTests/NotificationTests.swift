import AppleIDEmulator
import AppleSignIn
import Foundation
import TestSupport
import Testing

/// Server-to-server notifications sent through `POST /emulator/admin/notify`, received by a real HTTP
/// endpoint and verified by AppleSignIn's `NotificationVerifier`.
@Suite("Server-to-server notifications")
struct NotificationTests {
    static func verifier(_ emulator: EmulatorHarness) throws -> NotificationVerifier {
        NotificationVerifier(
            keySet: emulator.keySet(),
            audiences: [try ClientID(EmulatorConfiguration.testServicesID)],
            issuers: [emulator.emulator.issuer]
        )
    }

    static func notifyJSON(type: String, sub: String = Fixtures.ada, url: String, copies: Int = 1) -> String {
        #"{"type":"\#(type)","sub":"\#(sub)","client_id":"\#(EmulatorConfiguration.testServicesID)","url":"\#(url)","copies":\#(copies)}"#
    }

    @Test("consent-revoked with copies 2 arrives twice, identical, in Apple's format, and verifies")
    func consentRevokedTwice() async throws {
        try await withEmulator { emulator async throws in
            let receiver = NotificationReceiver()
            try await receiver.run { receiverURL async throws in
                let sentAt = Date()
                let answer = try await emulator.admin(.POST, "notify", json: Self.notifyJSON(type: "consent-revoked", url: receiverURL + "/notifications", copies: 2))
                #expect(answer.status == 200)
                let results = answer.jsonArray
                #expect(results.count == 2)
                #expect(results.allSatisfy { $0["status"] as? Int == 200 })

                let bodies = receiver.bodies
                #expect(bodies.count == 2)
                #expect(bodies.first == bodies.last, "a repeated delivery is byte-identical")
                let body = try #require(bodies.first)
                let object = Decode.json(body)
                #expect(Array(object.keys) == ["payload"])
                let jws = try #require(object["payload"] as? String)

                // events is a JSON-encoded string with event_time in milliseconds.
                let claims = Decode.jwtClaims(jws)
                let eventsText = try #require(claims["events"] as? String)
                let event = Decode.json(eventsText)
                #expect(event["type"] as? String == "consent-revoked")
                let eventTime = try #require(event["event_time"] as? Int)
                #expect(abs(Double(eventTime) - sentAt.timeIntervalSince1970 * 1000) < 30_000)
                #expect(Decode.jwtHeader(jws)["alg"] as? String == "RS256")

                let notification = try await Self.verifier(emulator).verify(body: Array(body.utf8))
                #expect(notification.event.type == .consentRevoked)
                #expect(notification.event.subject == Fixtures.ada)
                #expect(notification.audience == EmulatorConfiguration.testServicesID)
                #expect(abs(notification.event.eventTime.timeIntervalSince(sentAt)) < 30)
                #expect(notification.id == results.first?["id"] as? String)
                #expect(notification.id == results.last?["id"] as? String, "copies share the jti")
            }
        }
    }

    @Test("each event type is signed, delivered and verified with its own type", arguments: [
        ("email-disabled", AppleNotification.EventType.emailDisabled),
        ("email-enabled", .emailEnabled),
        ("consent-revoked", .consentRevoked),
        ("account-delete", .accountDelete),
        ("some-future-event", .unknown("some-future-event")),
    ])
    func eventTypes(type: String, expected: AppleNotification.EventType) async throws {
        try await withEmulator { emulator async throws in
            let receiver = NotificationReceiver()
            try await receiver.run { receiverURL async throws in
                let answer = try await emulator.admin(.POST, "notify", json: Self.notifyJSON(type: type, url: receiverURL + "/notifications"))
                #expect(answer.status == 200)
                let body = try #require(receiver.bodies.first)
                #expect(receiver.bodies.count == 1)
                let notification = try await Self.verifier(emulator).verify(body: Array(body.utf8))
                #expect(notification.event.type == expected)
                #expect(notification.event.subject == Fixtures.ada)
                if type.hasPrefix("email-") {
                    #expect(notification.event.email == Fixtures.adaRelay)
                    #expect(notification.event.isPrivateEmail == true)
                } else {
                    #expect(notification.event.email == nil)
                }
            }
        }
    }

    @Test("deliveries are recorded with the receiver's status")
    func deliveriesRecorded() async throws {
        try await withEmulator { emulator async throws in
            let receiver = NotificationReceiver()
            try await receiver.run { receiverURL async throws in
                _ = try await emulator.admin(.POST, "notify", json: Self.notifyJSON(type: "email-disabled", url: receiverURL + "/notifications", copies: 2))
                _ = try await emulator.admin(.POST, "notify", json: Self.notifyJSON(type: "account-delete", url: receiverURL + "/failing"))
                let deliveries = try await emulator.admin(.GET, "deliveries").jsonArray
                #expect(deliveries.count == 3)
                #expect(deliveries.map { $0["type"] as? String } == ["email-disabled", "email-disabled", "account-delete"])
                #expect(deliveries.map { $0["status"] as? Int } == [200, 200, 500])
                #expect(deliveries.allSatisfy { $0["subject"] as? String == Fixtures.ada })
                #expect(deliveries[2]["url"] as? String == receiverURL + "/failing")
            }
        }
    }

    @Test("a delivery to an unreachable endpoint records the error")
    func unreachableRecorded() async throws {
        try await withEmulator { emulator async throws in
            try await withClosedLoopbackPort { port async throws in
                let url = "http://127.0.0.1:\(port)/notifications"
                let answer = try await emulator.admin(.POST, "notify", json: Self.notifyJSON(type: "consent-revoked", url: url))
                #expect(answer.status == 200)
                let delivery = try #require(try await emulator.admin(.GET, "deliveries").jsonArray.first)
                #expect(delivery["status"] == nil)
                #expect((delivery["error"] as? String)?.isEmpty == false)
                #expect(delivery["url"] as? String == url)
            }
        }
    }

    @Test("consent-revoked and account-delete forget consent and revoke the user's refresh tokens", arguments: ["consent-revoked", "account-delete"])
    func revokingEventsForget(type: String) async throws {
        try await withEmulator { emulator async throws in
            let receiver = NotificationReceiver()
            try await receiver.run { receiverURL async throws in
                let code = try await emulator.authorize(user: Fixtures.ada)["code"]!
                let tokens = try await emulator.appleClient().exchange(code: code, redirectURI: URL(string: Fixtures.redirectURI))
                #expect(try await emulator.authorize(user: Fixtures.ada)["user"] == nil)

                _ = try await emulator.admin(.POST, "notify", json: Self.notifyJSON(type: type, url: receiverURL + "/notifications"))
                #expect(try await emulator.authorize(user: Fixtures.ada)["user"] != nil)
                let error = await appleIDClientError { _ = try await emulator.appleClient().refresh(refreshToken: tokens.refreshToken!) }
                #expect(error?.kind == .invalidGrant)
            }
        }
    }

    @Test("email events leave consent and tokens alone")
    func emailEventsKeepConsent() async throws {
        try await withEmulator { emulator async throws in
            let receiver = NotificationReceiver()
            try await receiver.run { receiverURL async throws in
                let code = try await emulator.authorize(user: Fixtures.ada)["code"]!
                let tokens = try await emulator.appleClient().exchange(code: code, redirectURI: URL(string: Fixtures.redirectURI))
                _ = try await emulator.admin(.POST, "notify", json: Self.notifyJSON(type: "email-disabled", url: receiverURL + "/notifications"))
                #expect(try await emulator.authorize(user: Fixtures.ada)["user"] == nil)
                _ = try await emulator.appleClient().refresh(refreshToken: tokens.refreshToken!)
            }
        }
    }

    @Test("notify for an unknown client_id is refused and nothing is sent")
    func unknownClient() async throws {
        try await withEmulator { emulator async throws in
            let receiver = NotificationReceiver()
            try await receiver.run { receiverURL async throws in
                let json = #"{"type":"consent-revoked","sub":"\#(Fixtures.ada)","client_id":"com.example.unknown","url":"\#(receiverURL)/notifications"}"#
                let answer = try await emulator.admin(.POST, "notify", json: json)
                #expect(answer.status == 400)
                #expect(receiver.bodies.isEmpty)
                #expect(try await emulator.admin(.GET, "deliveries").jsonArray.isEmpty)
            }
        }
    }

    @Test("without url the client's registered notification URL is used")
    func registeredURL() async throws {
        let receiver = NotificationReceiver()
        try await receiver.run { receiverURL async throws in
            let configuration = Fixtures.configuration { configuration in
                configuration.clients[0].notificationURL = receiverURL + "/notifications"
            }
            try await withEmulator(configuration) { emulator async throws in
                let answer = try await emulator.admin(.POST, "notify", json: #"{"type":"account-delete","sub":"\#(Fixtures.grace)"}"#)
                #expect(answer.status == 200)
                let body = try #require(receiver.bodies.first)
                let notification = try await Self.verifier(emulator).verify(body: Array(body.utf8))
                #expect(notification.event.type == .accountDelete)
                #expect(notification.event.subject == Fixtures.grace)
            }
        }
    }
}
