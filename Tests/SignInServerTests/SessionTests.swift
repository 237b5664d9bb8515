import Foundation
import Hummingbird
import HummingbirdTesting
import AppleSignIn
import JOSE
import SignInServer
import Testing

@Suite("Session and sign-out")
struct SessionTests {
    @Test("the session page without a session says you are not signed in, 401")
    func notSignedIn() async throws {
        try await withServer { h in
            for cookie in [nil, "", RandomToken.generate()] {
                let page = try await h.sessionPage(cookie)
                #expect(page.status == .unauthorized)
                #expect(page.errorTitle == Fixtures.Heading.signedOut)
                #expect(page.element("error-action") == "Go to the sign-in page")
            }
        }
    }

    @Test("a session past its lifetime is over: the cookie's Max-Age says so and the server refuses it")
    func sessionExpires() async throws {
        // 15 s: the session must still be live for the first look, which under the full suite's load came more than
        // 4 s after the sign-in (CI's run of 57b92e6).
        try await withServer(ServerOptions(sessionLifetime: 15)) { h in
            let signIn = try await h.signIn()
            #expect(signIn.response.setCookie(h.sessionCookie)?["Max-Age"] == "15")
            let session = try #require(signIn.session)
            #expect(try await h.sessionPage(session).status == .ok)
            try await Task.sleep(for: .milliseconds(15_500))
            let page = try await h.sessionPage(session)
            #expect(page.status == .unauthorized)
            #expect(page.errorTitle == Fixtures.Heading.signedOut)
        }
    }

    @Test("session pages served from memory: this server's changes show at once, another process's within check_cache_seconds (5 s)")
    func sessionCache() async throws {
        try await withServer { h in
            let ada = try #require(try await h.signIn(user: Fixtures.ada).session)
            let grace = try #require(try await h.signIn(user: Fixtures.grace).session)
            for _ in 0..<3 { #expect(try await h.sessionPage(ada).status == .ok) }
            #expect(try await h.sessionPage(grace).status == .ok)

            // (A notification changing a cached page is in NotificationEndpointTests.duplicateDeliveryAppliedOnce.)
            // Sign-out on this server: the very next view is refused.
            let page = try await h.sessionPage(ada)
            let signOut = try await h.post("/auth/signout", form: "csrf_token=" + (page.csrfToken ?? ""), cookies: [h.sessionCookie: ada])
            #expect(signOut.status == .seeOther)
            #expect(try await h.sessionPage(ada).status == .unauthorized)

            // Another process deletes grace's session behind the server's back: seen within the cache's 5 s.
            let deleted = try h.database.write { db in
                try db.execute(sql: "DELETE FROM sessions WHERE sub = ?", arguments: [Fixtures.grace])
                return db.changesCount
            }
            #expect(deleted == 1)
            let clock = ContinuousClock()
            let start = clock.now
            var status = try await h.sessionPage(grace).status
            while status == .ok, clock.now - start < .seconds(20) {
                try await Task.sleep(for: .milliseconds(100))
                status = try await h.sessionPage(grace).status
            }
            #expect(status == .unauthorized)
            // 5 s of cache lifetime, plus room for a loaded CI machine; without the bound it would never be seen.
            #expect(clock.now - start < .seconds(12), "seen after \(clock.now - start)")
        }
    }

    @Test("the sign-in page knows when you are already signed in")
    func alreadySignedIn() async throws {
        try await withServer { h in
            let signIn = try await h.signIn()
            let page = try await h.get("/", cookies: [h.sessionCookie: try #require(signIn.session)])
            #expect(page.text.contains("You are already signed in."))
            #expect(!(try await h.get("/")).text.contains("You are already signed in."))
        }
    }

    @Test("sign-out without the CSRF token, or with a wrong one: 403 form-expired page, the session still valid")
    func signOutWithoutCSRF() async throws {
        try await withServer { h in
            let session = try #require(try await h.signIn().session)
            for form in ["", "csrf_token=", "csrf_token=" + RandomToken.generate(), "csrf_token=a&csrf_token=b"] {
                let response = try await h.post("/auth/signout", form: form, cookies: [h.sessionCookie: session])
                #expect(response.status == .forbidden, "form: \(form)")
                #expect(response.errorTitle == Fixtures.Heading.csrf)
                #expect(response.setCookie(h.sessionCookie) == nil)
            }
            #expect(try await h.sessionPage(session).status == .ok)
            #expect(try h.database.count("sessions") == 1)
        }
    }

    @Test("another session's CSRF token does not sign you out")
    func csrfOfAnotherSession() async throws {
        try await withServer { h in
            let mine = try #require(try await h.signIn(user: Fixtures.ada).session)
            let theirs = try #require(try await h.signIn(user: Fixtures.grace).session)
            let theirToken = try #require(try await h.sessionPage(theirs).csrfToken)
            let response = try await h.post("/auth/signout", form: "csrf_token=" + FormEncoding.encode(theirToken), cookies: [h.sessionCookie: mine])
            #expect(response.status == .forbidden)
            #expect(try await h.sessionPage(mine).status == .ok)
        }
    }

    @Test("sign-out with the page's CSRF token: 303 to /, the session deleted server-side, the old cookie useless")
    func signOut() async throws {
        try await withServer { h in
            let signIn = try await h.signIn()
            let session = try #require(signIn.session)
            let page = try await h.sessionPage(session)
            let token = try #require(page.csrfToken)
            #expect(token.count >= 43)

            let response = try await h.post("/auth/signout", form: "csrf_token=" + FormEncoding.encode(token), cookies: [h.sessionCookie: session])
            #expect(response.status == .seeOther)
            #expect(response.location == "/")
            #expect(try #require(response.setCookie(h.sessionCookie)).isDeletion)
            #expect(try h.database.count("sessions") == 0)
            // The user stays known (their name is kept for the next sign-in).
            #expect(try h.database.count("users") == 1)

            let after = try await h.sessionPage(session)
            #expect(after.status == .unauthorized)
            #expect(after.errorTitle == Fixtures.Heading.signedOut)
            // Signing out again with the old cookie changes nothing and does not fail.
            let again = try await h.post("/auth/signout", form: "csrf_token=" + FormEncoding.encode(token), cookies: [h.sessionCookie: session])
            #expect(again.status == .seeOther)
            #expect(again.location == "/")
        }
    }

    @Test("signing in again while holding a session: a new session id, and the old session ended in the store at once")
    func signInAgainEndsTheOldSession() async throws {
        try await withServer { h in
            let first = try #require(try await h.signIn().session)
            let start = try await h.get("/auth/apple", cookies: [h.sessionCookie: first])
            let binding = try #require(start.setCookie(h.bindingCookie)?.value)
            #expect(!binding.contains(first), "the binding cookie names the old session by its hash, never by its id")
            let fields = try await h.authorize(try #require(start.location))
            // Apple's return is cross-site: it carries the binding cookie, not the session cookie (SameSite=Lax).
            let back = try await h.callback(fields, binding: binding)
            let second = try #require(back.setCookie(h.sessionCookie)?.value)
            #expect(second != first)
            #expect(try await h.sessionPage(first).status == .unauthorized, "the old session still works")
            #expect(try await h.sessionPage(second).status == .ok)
            #expect(try h.database.count("sessions") == 1)
        }
    }

    @Test("sign-out without a session cookie just goes home")
    func signOutWithoutSession() async throws {
        try await withServer { h in
            let response = try await h.post("/auth/signout", form: "")
            #expect(response.status == .seeOther)
            #expect(response.location == "/")
        }
    }
}
