import AppleIDEmulator
import AppleSignIn
import Crypto
import CryptoExtras
import Foundation
import JOSE
@testable import SignInServer
import Testing

/// Apple's server-to-server notifications, delivered by the emulator to the running site.
@Suite("Notifications over HTTP")
struct NotificationEndpointTests {
    @Test("the same notification delivered twice is applied once")
    func duplicateDeliveryAppliedOnce() async throws {
        try await SQLiteSite.with { site in
            let session = try await site.instance.signIn(Site.ada)
            #expect(try await site.instance.sessionPage(session).capture(#"id="(forwarding-disabled)""#) == nil)

            let delivery = try await site.world.notify("email-disabled", sub: Site.ada, to: site.notificationURL, copies: 2)
            #expect(delivery.statuses == [200, 200])
            #expect(try await site.sql.count("notifications", where: "jti = \(Support.literal(delivery.jti))") == 1)
            #expect(try await site.sql.count("notifications") == 1)
            #expect(try await site.instance.notificationCount(type: "email-disabled", outcome: "applied") == 1)
            #expect(try await site.instance.notificationCount(type: "email-disabled", outcome: "duplicate") == 1)
            // The person sees the notice on their session page.
            #expect(try await site.instance.sessionPage(session).capture(#"id="(forwarding-disabled)""#) != nil)
        }
    }

    @Test("a forged or malformed notification is refused with 400 and changes nothing")
    func forgedNotificationRefused() async throws {
        try await SQLiteSite.with { site in
            let session = try await site.instance.signIn(Site.ada)
            let realKid = try #require((try await site.world.admin(.GET, "keys").json["kids"] as? [String])?.last)
            let forger = try _RSA.Signing.PrivateKey(keySize: .bits2048)
            func forged(kid: String, type: String) throws -> String {
                struct Claims: Encodable {
                    var iss: String
                    var aud: String
                    var iat: Int
                    var jti: String
                    var events: String
                }
                let events = #"{"type":"\#(type)","sub":"\#(Site.ada)","event_time":\#(Int(Date().timeIntervalSince1970 * 1000))}"#
                let claims = Claims(iss: site.world.emulatorURL, aud: EmulatorConfiguration.testServicesID, iat: Int(Date().timeIntervalSince1970), jti: "forged-" + Support.randomHex(), events: events)
                let jws = try JWTSigning.rs256(header: ["alg": "RS256", "kid": kid], claims: claims, key: forger)
                return String(decoding: try JSONSerialization.data(withJSONObject: ["payload": jws]), as: UTF8.self)
            }
            let bodies = [
                try forged(kid: "attacker-key", type: "account-delete"),
                try forged(kid: realKid, type: "consent-revoked"),
                #"{"payload": "not.a.jws"}"#,
                #"{"events": "no payload"}"#,
                "payload=form-encoded",
            ]
            for body in bodies {
                let answer = try await site.world.send(.POST, site.notificationURL, body: body, contentType: "application/json")
                #expect(answer.status == 400, "accepted: \(body.prefix(60))")
            }
            #expect(try await site.instance.sessionPage(session).status == 200)
            #expect(try await site.sql.count("notifications") == 0)
            #expect(try await site.sql.count("users", where: "sub = \(Support.literal(Site.ada)) AND link_revoked_at IS NULL") == 1)
            #expect(try await site.sql.count("refresh_tokens", sub: Site.ada) == 1)
            #expect(try await site.sql.count("tombstones") == 0)
        }
    }

    @Test("a genuinely signed notification whose exp has passed is refused with 400 and changes nothing")
    func expiredNotificationRefused() async throws {
        try await SQLiteSite.with { site in
            let session = try await site.instance.signIn(Site.ada)
            // Signed by the emulator's real key two days ago: exp (iat + one day) has passed.
            let stale = try await site.world.emulator.signNotification(
                type: "account-delete", subject: Site.ada, clientID: EmulatorConfiguration.testServicesID, now: Date().addingTimeInterval(-2 * 86_400)
            )
            let body = String(decoding: try JSONSerialization.data(withJSONObject: ["payload": stale.jws]), as: UTF8.self)
            let answer = try await site.world.send(.POST, site.notificationURL, body: body, contentType: "application/json")
            #expect(answer.status == 400)
            #expect(try await site.instance.sessionPage(session).status == 200)
            #expect(try await site.sql.count("notifications") == 0)
            #expect(try await site.sql.count("users", sub: Site.ada) == 1)
            #expect(try await site.sql.count("tombstones") == 0)
            // The same event signed now is applied: only the expiry made the difference.
            let fresh = try await site.world.notify("account-delete", sub: Site.ada, to: site.notificationURL)
            #expect(fresh.statuses == [200])
            #expect(try await site.sql.count("users", sub: Site.ada) == 0)
        }
    }

    @Test("consent-revoked ends every session of the user and forgets the refresh token")
    func consentRevokedEndsSessions() async throws {
        try await SQLiteSite.with { site in
            let first = try await site.instance.signIn(Site.ada)
            let second = try await site.instance.signIn(Site.ada)
            let other = try await site.instance.signIn(Site.lilei)
            let delivery = try await site.world.notify("consent-revoked", sub: Site.ada, to: site.notificationURL)
            #expect(delivery.statuses == [200])
            for session in [first, second] {
                let page = try await site.instance.sessionPage(session)
                #expect(page.status == 401)
                #expect(page.heading == "You are not signed in")
            }
            #expect(try await site.instance.sessionPage(other).status == 200)
            #expect(try await site.sql.count("refresh_tokens", sub: Site.ada) == 0)
            #expect(try await site.sql.count("users", where: "sub = \(Support.literal(Site.ada)) AND link_revoked_at IS NOT NULL") == 1)
        }
    }

    @Test("account-delete removes the user's data, keeping only a tombstone")
    func accountDeleteRemovesData() async throws {
        try await SQLiteSite.with { site in
            let session = try await site.instance.signIn(Site.ada)
            let delivery = try await site.world.notify("account-delete", sub: Site.ada, to: site.notificationURL)
            #expect(delivery.statuses == [200])
            #expect(try await site.instance.sessionPage(session).status == 401)
            for table in ["users", "sessions", "refresh_tokens"] {
                #expect(try await site.sql.count(table, sub: Site.ada) == 0, "\(table) still holds the deleted user")
            }
            #expect(try await site.sql.count("tombstones", sub: Site.ada) == 1)
            #expect(try await site.sql.count("users", where: "email LIKE '%ada%'") == 0)
        }
    }
}
