import AppleIDEmulator
import AppleSignIn
import Foundation
@testable import SignInServer
import Testing

/// Account deletion from the session page, and the daily refresh checks, against a running emulator.
@Suite("Account lifecycle over HTTP")
struct AccountLifecycleTests {
    @Test("deleting the account from the session page revokes the token at Apple and removes the data")
    func deletionFromSessionPage() async throws {
        try await SQLiteSite.with { site in
            let session = try await site.instance.signIn(Site.ada)
            let before = try await site.world.counters()["revocations"] ?? -1

            let confirm = try await site.instance.get("/account/delete", session: session)
            #expect(confirm.status == 200)
            let csrf = try #require(confirm.csrfToken)
            // Without the confirmation, or with another token, nothing is deleted.
            let unconfirmed = try await site.instance.post("/account/delete", form: [("csrf_token", csrf)], cookies: [Site.sessionCookie: session])
            #expect(unconfirmed.status == 403)
            let forged = try await site.instance.post("/account/delete", form: [("csrf_token", "not-the-token"), ("confirm", "yes")], cookies: [Site.sessionCookie: session])
            #expect(forged.status == 403)
            #expect(try await site.sql.count("users", sub: Site.ada) == 1)

            let deleted = try await site.instance.post("/account/delete", form: [("csrf_token", csrf), ("confirm", "yes")], cookies: [Site.sessionCookie: session])
            #expect(deleted.status == 200)
            #expect(deleted.heading == "Your account has been deleted")
            #expect(deleted.capture(#"id="deleted-message">([^<]*)<"#) == "Your data is gone and Apple has been told. You can sign in again at any time as a new user.")
            #expect(deleted.cookie(Site.sessionCookie) == "")
            #expect(try await site.world.counters()["revocations"] == before + 1)
            for table in ["users", "sessions", "refresh_tokens", "revocations"] {
                #expect(try await site.sql.count(table) == 0, "\(table) is not empty")
            }
            #expect(try await site.instance.sessionPage(session).status == 401)
        }
    }

    @Test("with Apple's revoke endpoint down, deletion completes, the page says Apple will be told, and the queue tells it later")
    func deletionWithAppleDown() async throws {
        try await SQLiteSite.with { site in
            let session = try await site.instance.signIn(Site.ada)
            let before = try await site.world.counters()["revocations"] ?? -1
            _ = try await site.world.admin(.PUT, "faults/revoke", json: #"{"status":503}"#)

            let csrf = try #require(try await site.instance.get("/account/delete", session: session).csrfToken)
            let deleted = try await site.instance.post("/account/delete", form: [("csrf_token", csrf), ("confirm", "yes")], cookies: [Site.sessionCookie: session])
            #expect(deleted.status == 200)
            #expect(deleted.capture(#"id="deleted-message">([^<]*)<"#) == "Your data is gone. Apple could not be reached just now; we will tell Apple automatically as soon as it answers.")
            for table in ["users", "sessions", "refresh_tokens"] {
                #expect(try await site.sql.count(table) == 0, "\(table) is not empty")
            }
            #expect(try await site.sql.count("revocations") == 1)
            #expect(try await site.world.counters()["revocations"] == before)

            let lifecycle = try await site.lifecycle()
            // Still down: the revocation stays queued.
            #expect(try await lifecycle.runRevocationQueue(now: Date(), logger: Support.logger("test")) == 0)
            #expect(try await site.sql.count("revocations") == 1)

            _ = try await site.world.admin(.DELETE, "faults")
            #expect(try await lifecycle.runRevocationQueue(now: Date().addingTimeInterval(301), logger: Support.logger("test")) == 1)
            #expect(try await site.world.counters()["revocations"] == before + 1)
            #expect(try await site.sql.count("revocations") == 0)
        }
    }

    @Test("refresh checks call Apple once a day per user, also across a restart, and a revoked token ends the sessions")
    func dailyRefreshChecks() async throws {
        try await SQLiteSite.with { site in
            let signedInAt = Date()
            let session = try await site.instance.signIn(Site.ada)
            let logger = Support.logger("test")
            let lifecycle = try await site.lifecycle()
            let refreshes = try await site.world.counters()["refreshes"] ?? -1

            // Not due on the day of the sign-in.
            #expect(try await lifecycle.runRefreshChecks(now: signedInAt.addingTimeInterval(3_600), logger: logger) == 0)
            let dayOne = signedInAt.addingTimeInterval(86_400 + 3_600)
            #expect(try await lifecycle.runRefreshChecks(now: dayOne, logger: logger) == 1)
            #expect(try await site.world.counters()["refreshes"] == refreshes + 1)
            #expect(try await lifecycle.runRefreshChecks(now: dayOne.addingTimeInterval(3_600), logger: logger) == 0)
            #expect(try await site.world.counters()["refreshes"] == refreshes + 1)

            // A restart: a new store over the same file, new components. Still nothing to do today.
            let restarted = try makeStore(settings: site.settings, logger: logger)
            #expect((restarted as? SessionCachedStore)?.backend is SQLiteStore)
            let afterRestart = try await site.lifecycle(store: restarted)
            #expect(try await afterRestart.runRefreshChecks(now: dayOne.addingTimeInterval(2 * 3_600), logger: logger) == 0)
            #expect(try await site.world.counters()["refreshes"] == refreshes + 1)
            #expect(try await site.instance.sessionPage(session).status == 200)

            // The user's token is revoked at Apple; the next day's check finds out and signs them out.
            let sealed = try #require(try await site.sql.texts("SELECT token FROM refresh_tokens WHERE sub = \(Support.literal(Site.ada))").first ?? nil)
            let token = try TokenCipher(base64Keys: site.settings.dataKeys).open(sealed)
            let apple = AppleIDClient(configuration: site.settings.apple, httpClient: .shared, secrets: ClientSecretSigner(configuration: site.settings.apple), timeout: .seconds(60))
            try await apple.revoke(token: token)
            let dayTwo = signedInAt.addingTimeInterval(2 * 86_400 + 3 * 3_600)
            #expect(try await afterRestart.runRefreshChecks(now: dayTwo, logger: logger) == 1)
            #expect(try await site.instance.sessionPage(session).status == 401)
            #expect(try await site.sql.count("refresh_tokens", sub: Site.ada) == 0)
            #expect(try await site.sql.count("users", where: "sub = \(Support.literal(Site.ada)) AND link_revoked_at IS NOT NULL") == 1)
        }
    }

    @Test("a transient failure of a refresh check leaves the user signed in")
    func transientRefreshFailureKeepsSession() async throws {
        try await SQLiteSite.with { site in
            let signedInAt = Date()
            let session = try await site.instance.signIn(Site.ada)
            _ = try await site.world.admin(.PUT, "faults/token", json: #"{"status":503}"#)
            let lifecycle = try await site.lifecycle()
            #expect(try await lifecycle.runRefreshChecks(now: signedInAt.addingTimeInterval(86_400 + 3_600), logger: Support.logger("test")) == 1)
            #expect(try await site.instance.sessionPage(session).status == 200)
            #expect(try await site.sql.count("refresh_tokens", sub: Site.ada) == 1)
            #expect(try await site.sql.count("users", where: "link_revoked_at IS NOT NULL") == 0)
        }
    }
}
