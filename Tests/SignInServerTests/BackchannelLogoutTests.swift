import AppleSignIn
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import JOSE
@testable import SignInServer
import Synchronization
import Testing
import TestSupport

/// OpenID Connect Back-Channel Logout 1.0 (issue 28, part C): a session's end reaches the clients that issued tokens
/// in it, by a signed Logout Token posted to each, durably and with retries.
@Suite("Back-channel logout")
struct BackchannelLogoutTests {
    /// A client's back-channel logout endpoint: keeps every `logout_token` it is sent; answers 503 to the first
    /// `failures` posts.
    final class Receiver: Sendable {
        let tokens = Mutex<[String]>([])
        let refusals = Mutex<Int>(0)
        /// When each post arrived, refused or taken.
        let arrivals = Mutex<[ContinuousClock.Instant]>([])
        /// How long it holds each answer after keeping the token (a slow client), unless `release` ends the hold.
        let hold: Duration
        let released = Mutex<Bool>(false)

        /// Ends the hold of every answer, held now or later.
        func release() { released.withLock { $0 = true } }

        init(failures: Int = 0, hold: Duration = .zero) {
            refusals.withLock { $0 = failures }
            self.hold = hold
        }

        func application(onRunning: @escaping @Sendable (Int) async -> Void) -> some ApplicationProtocol {
            let router = Router()
            router.post("/backchannel") { request, _ -> Response in
                self.arrivals.withLock { $0.append(.now) }
                var request = request
                let body = try await request.collectBody(upTo: 65536)
                let refuse = self.refusals.withLock { count -> Bool in
                    defer { count = max(0, count - 1) }
                    return count > 0
                }
                if refuse { return Response(status: .serviceUnavailable) }
                let fields = try CallbackPayload.parseFields(body.readableBytesView)
                if let token = fields["logout_token"] { self.tokens.withLock { $0.append(token) } }
                let until = ContinuousClock.now + self.hold
                while ContinuousClock.now < until, !self.released.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(20)) }
                return Response(status: .ok)
            }
            return Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)), onServerRunning: { await onRunning($0.localAddress?.port ?? 0) })
        }

        /// The tokens received, waiting up to `seconds` for `count` of them.
        func received(_ count: Int, within seconds: Double) async throws -> [String] {
            let deadline = Date().addingTimeInterval(seconds)
            while Date() < deadline {
                let tokens = self.tokens.withLock { $0 }
                if tokens.count >= count { return tokens }
                try await Task.sleep(for: .milliseconds(50))
            }
            return tokens.withLock { $0 }
        }
    }

    /// Waits up to ten seconds for the queue to be empty (a delivery is removed once its answer has come back); at once
    /// when it is.
    static func queueEmpties(_ h: Harness) async throws -> Bool {
        for _ in 0..<200 {
            if try h.database.count("logout_deliveries") == 0 { return true }
            try await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    static func options(backchannel port: Int) -> ServerOptions {
        var options = ProviderTests.options
        options.live = true
        options.providerClients[0].backchannelLogoutURI = "http://127.0.0.1:\(port)/backchannel"
        return options
    }

    @Test("signing out at siwa sends the client a Logout Token: typ logout+jwt, signed as its id_tokens, the id_token's sub and sid, the event, no nonce; discovery says so")
    func signOutReachesTheClient() async throws {
        // The client holds its answer longer than siwa waits for one (`BackchannelLogout.requestTimeout`, 5 s): a
        // sign-out that waited for the delivery would take those 5 s. A bound of 0.5 s, and then of 3 s with a 3 s hold,
        // failed under the full suite's load (3.55 s) with nothing waiting; the hold ends once the sign-out is back.
        let receiver = Receiver(hold: .seconds(8))
        try await withLiveApplication({ receiver.application(onRunning: $0) }) { port in
            try await withServer(Self.options(backchannel: port)) { h in
                let discovery = try ProviderTests.json(try await h.get("/.well-known/openid-configuration"))
                #expect(discovery["backchannel_logout_supported"] as? Bool == true)
                #expect(discovery["backchannel_logout_session_supported"] as? Bool == true)
                let ada = try #require(try await h.signIn().session)
                let tokens = try ProviderTests.json(try await ProviderTests.exchange(h, code: try await ProviderTests.code(h, session: ada, extra: [("nonce", "n-1")])))
                let idClaims = try await ProviderTests.verifiedClaims(h, try #require(tokens["id_token"] as? String))
                let sid = try #require(idClaims["sid"] as? String)
                #expect(!sid.contains(ada) && sid != SignInFlow.hash(ada))
                // The other client, with tokens from another session, is not told.
                let page = try await h.get("/session", cookies: [h.sessionCookie: ada])
                let started = Date()
                let out = try await h.post("/auth/signout", form: "csrf_token=" + FormEncoding.encode(try #require(page.csrfToken)), cookies: [h.sessionCookie: ada])
                #expect(out.status == .seeOther)
                // The person's sign-out does not wait for the delivery, which the client holds.
                #expect(Date().timeIntervalSince(started) < BackchannelLogout.requestTimeoutSeconds)
                receiver.release()
                let received = try await receiver.received(1, within: 5)
                #expect(received.count == 1)
                let token = try #require(received.first)
                let header = try #require(try JSONSerialization.jsonObject(with: Base64URL.decode(String(token.split(separator: ".")[0])) ?? Data()) as? [String: Any])
                #expect(header["typ"] as? String == "logout+jwt" && header["alg"] as? String == "RS256")
                let claims = try await ProviderTests.verifiedClaims(h, token)
                #expect(claims["iss"] as? String == h.settings.provider.issuer && claims["aud"] as? String == "app")
                #expect(claims["sub"] as? String == idClaims["sub"] as? String && claims["sid"] as? String == sid)
                #expect((claims["events"] as? [String: Any])?["http://schemas.openid.net/event/backchannel-logout"] != nil)
                #expect(claims["nonce"] == nil && claims["jti"] is String && claims["iat"] is Int && claims["exp"] is Int)
                // The delivery is done once the client has answered.
                #expect(try await Self.queueEmpties(h))
                // Nothing more: one delivery per client and session.
                try await Task.sleep(for: .milliseconds(1500))
                #expect(receiver.tokens.withLock { $0.count } == 1)
            }
        }
    }

    @Test("Apple's account-delete ends every session of the person and reaches the client; a client that refuses is tried again until it takes it, no sooner than the pause")
    func accountDeleteAndRetry() async throws {
        let receiver = Receiver(failures: 1)
        try await withLiveApplication({ receiver.application(onRunning: $0) }) { port in
            try await withServer(Self.options(backchannel: port)) { h in
                let ada = try #require(try await h.signIn().session)
                _ = try await ProviderTests.exchange(h, code: try await ProviderTests.code(h, session: ada))
                let deleted = ContinuousClock.now
                _ = try await h.store.deleteUser(subject: Fixtures.ada, tombstone: false, at: Date())
                // The first post is refused (503): the delivery stays queued and comes back after its pause (5 s). The
                // bound is what the user is promised, that it comes back, with room for the full suite's load, under
                // which 9 s once passed with nothing received; what this test holds to exactly is the pause.
                let received = try await receiver.received(1, within: 30)
                let arrivals = receiver.arrivals.withLock { $0 }
                let timeline = arrivals.map { "\(($0 - deleted).components.seconds) s" }.joined(separator: ", ")
                #expect(received.count == 1, "posts arrived after the deletion at: \(timeline)")
                #expect(arrivals.count == 2, "posts arrived after the deletion at: \(timeline)")
                if arrivals.count == 2 {
                    #expect(arrivals[1] - arrivals[0] >= .seconds(BackchannelLogout.pause(after: 1)) - .milliseconds(100), "the retry came sooner than its pause: \(timeline)")
                }
                #expect(receiver.refusals.withLock { $0 } == 0)
                #expect(try await Self.queueEmpties(h))
                let metrics = try await h.get("/metrics").text
                #expect(metrics.contains("siwa_backchannel_logouts_total{outcome=\"retried\"} 1"))
                #expect(metrics.contains("siwa_backchannel_logouts_total{outcome=\"delivered\"} 1"))
            }
        }
    }
}
