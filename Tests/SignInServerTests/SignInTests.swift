import AppleIDEmulator
import AppleSignIn
import Foundation
import Hummingbird
import HummingbirdTesting
import JOSE
import SignInServer
import Testing

@Suite("Signing in")
struct SignInTests {
    @Test("the button redirects to Apple with a server-side pending sign-in and a binding cookie")
    func start() async throws {
        try await withServer { h in
            let started = try await h.start(returnTo: "/account")
            let query = Fixtures.query(started.authorizeURL)
            #expect(started.authorizeURL.hasPrefix(h.emulatorURL + "/auth/authorize?"))
            #expect(query["client_id"] == EmulatorConfiguration.testServicesID)
            #expect(query["redirect_uri"] == Fixtures.localReturnURL)
            #expect(query["response_type"] == "code id_token")
            #expect(query["response_mode"] == "form_post")
            #expect(query["scope"] == "name email")
            // 256-bit random values, base64url without padding.
            #expect(query["state"]?.count == 43)
            #expect(query["nonce"]?.count == 43)
            #expect(query["state"] != query["nonce"])
            #expect(started.response.headers[.cacheControl] == "no-store")

            let cookie = try #require(started.response.setCookie("siwa_binding"))
            #expect(cookie.has("HttpOnly"))
            #expect(cookie["SameSite"] == "Lax")
            #expect(cookie["Path"] == "/")
            #expect(cookie["Max-Age"] == "600")
            #expect(cookie.value.count >= 43)
            // Kept server-side, keyed by state; the cookie's value itself is not stored.
            #expect(try h.database.pendingReturnPaths() == ["/account"])
            let stored = try h.database.read { try String.fetchOne($0, sql: "SELECT binding_hash FROM pending_authorizations") }
            #expect(stored == SignInFlow.hash(cookie.value))
        }
    }

    @Test("first sign-in (form_post): 303 to /session, a HttpOnly SameSite=Lax session cookie, the binding cookie cleared, and the session page says who")
    func firstSignIn() async throws {
        try await withServer { h in
            let signIn = try await h.signIn(user: Fixtures.ada)
            let response = signIn.response
            #expect(signIn.fields["user"] != nil, "the emulator sends user on the first authorization")
            #expect(response.status == .seeOther)
            #expect(response.location == "/session")

            let session = try #require(response.setCookie("siwa_session"))
            #expect(!session.value.isEmpty)
            #expect(session.has("HttpOnly"))
            #expect(session["SameSite"] == "Lax")
            #expect(session["Path"] == "/")
            #expect(!session.has("Secure"), "plain-HTTP local mode")
            #expect(session["Max-Age"] == String(Int(h.settings.sessionLifetime)))
            #expect(try #require(response.setCookie("siwa_binding")).isDeletion)

            // What is stored: the user with the first-time name, the refresh token, the session by hash only.
            let user = try #require(try h.database.user(Fixtures.ada))
            #expect(user["first_name"] as String? == "Ada")
            #expect(user["last_name"] as String? == "Lovelace")
            #expect(user["email"] as String? == Fixtures.adaEmail)
            #expect(user["is_private_email"] as Bool? == false)
            // The refresh token is stored sealed, not as Apple sent it.
            let sealed = try #require(try h.database.refreshToken(Fixtures.ada))
            #expect(sealed.range(of: LogTests.refreshTokenPattern, options: .regularExpression) == nil)
            #expect(try h.cipher.open(sealed).range(of: "^" + LogTests.refreshTokenPattern, options: .regularExpression) != nil)
            #expect(try h.database.sessionHashes() == [SignInFlow.hash(session.value)])
            #expect(try h.database.count("pending_authorizations") == 0)

            let page = try await h.sessionPage(session.value)
            #expect(page.status == .ok)
            #expect(page.heading == Fixtures.Heading.session)
            #expect(page.element("name") == "Ada Lovelace")
            #expect(page.text.contains(Fixtures.adaEmail))
            #expect(!page.text.contains(#"id="relay""#))
            #expect(page.element("sub")?.contains(Fixtures.ada) == true)
            #expect(page.headers[.cacheControl] == "no-store")
        }
    }

    @Test("hidden email: the relay address is shown with its marker and stored as private")
    func hiddenEmail() async throws {
        try await withServer { h in
            let signIn = try await h.signIn(user: Fixtures.ada, hide: true)
            #expect(signIn.response.status == .seeOther)
            let page = try await h.sessionPage(signIn.session)
            #expect(page.status == .ok)
            #expect(page.text.contains(Fixtures.adaRelay))
            #expect(!page.text.contains(Fixtures.adaEmail))
            #expect(page.element("relay") == "Private relay address (Hide My Email)")
            #expect(try h.database.user(Fixtures.ada)?["is_private_email"] as Bool? == true)
        }
    }

    @Test("second sign-in (no user field): the name is kept and the session id is new")
    func secondSignIn() async throws {
        try await withServer { h in
            let first = try await h.signIn(user: Fixtures.grace)
            let second = try await h.signIn(user: Fixtures.grace)
            #expect(second.fields["user"] == nil, "Apple sends user only the first time")
            #expect(second.response.status == .seeOther)
            let firstSession = try #require(first.session)
            let secondSession = try #require(second.session)
            #expect(firstSession != secondSession)

            let page = try await h.sessionPage(secondSession)
            #expect(page.status == .ok)
            #expect(page.element("name") == "Grace Hopper")
            #expect(page.text.contains("grace@example.org"))
            let user = try #require(try h.database.user(Fixtures.grace))
            #expect(user["first_name"] as String? == "Grace")
            #expect(user["last_name"] as String? == "Hopper")
            #expect(try h.database.count("users") == 1)
            #expect(try h.database.count("sessions") == 2)
        }
    }

    @Test("a sign-in started nine minutes ago still completes")
    func nineMinutesOld() async throws {
        try await withServer { h in
            let flow = try await h.flow()
            let started = try await flow.start(returnTo: "/session", now: Date().addingTimeInterval(-540))
            let fields = try await h.authorize(started.authorizeURL.absoluteString)
            let response = try await h.callback(fields, binding: started.bindingToken)
            #expect(response.status == .seeOther)
            #expect(response.location == "/session")
        }
    }

    /// `GET /auth/apple` always starts form_post; query mode exists in `SignInFlow` and `GET /auth/apple/callback`.
    @Test("query mode: a sign-in started with response_mode=query completes at GET /auth/apple/callback")
    func queryMode() async throws {
        try await withServer { h in
            let flow = try await h.flow()
            let started = try await flow.start(returnTo: "/session", responseMode: .query)
            let query = Fixtures.query(started.authorizeURL.absoluteString)
            #expect(query["response_mode"] == "query")
            #expect(query["scope"] == nil, "Apple allows no scope outside form_post")

            let fields = try await h.authorize(started.authorizeURL.absoluteString, user: Fixtures.lilei)
            #expect(fields["id_token"] == nil)
            let code = try #require(fields["code"])
            let state = try #require(fields["state"])
            let response = try await h.get(
                "/auth/apple/callback?code=\(FormEncoding.encode(code))&state=\(FormEncoding.encode(state))",
                cookies: [h.bindingCookie: started.bindingToken]
            )
            #expect(response.status == .seeOther)
            #expect(response.location == "/session")
            let session = try #require(response.setCookie("siwa_session"))
            let page = try await h.sessionPage(session.value)
            #expect(page.status == .ok)
            #expect(page.element("sub")?.contains(Fixtures.lilei) == true)
            #expect(page.element("name") == "Not shared")

            // The same answer again is a replay.
            let replay = try await h.get(
                "/auth/apple/callback?code=\(FormEncoding.encode(code))&state=\(FormEncoding.encode(state))",
                cookies: [h.bindingCookie: started.bindingToken]
            )
            #expect(replay.status == .badRequest)
            #expect(replay.errorTitle == Fixtures.Heading.expired)
        }
    }

    @Test("return_to keeps a relative path on this site")
    func relativeReturnTo() async throws {
        try await withServer { h in
            let signIn = try await h.signIn(returnTo: "/account?tab=profile")
            #expect(signIn.response.status == .seeOther)
            #expect(signIn.response.location == "/account?tab=profile")
        }
    }

    @Test(
        "return_to never leads off-site",
        arguments: ["https://evil.example", "//evil.example", "/\\evil.example", "\\\\evil.example", "https:evil.example", "/\r\nLocation: https://evil.example", "evil.example", ""]
    )
    func openRedirect(returnTo: String) async throws {
        try await withServer { h in
            let page = try await h.get("/?return_to=" + FormEncoding.encode(returnTo))
            #expect(page.text.contains(#"href="/auth/apple?return_to=%2Fsession""#))
            let started = try await h.start(returnTo: returnTo)
            #expect(try h.database.pendingReturnPaths() == ["/session"])
            let response = try await h.callback(try await h.authorize(started.authorizeURL), binding: started.binding)
            #expect(response.status == .seeOther)
            #expect(response.location == "/session")
        }
    }
}
