import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import JOSE
import SignInServer
import Testing

/// Forward-auth (issue 17, part A): what nginx's `auth_request`, Traefik's `forwardAuth` and Caddy's
/// `forward_auth` get from siwa, the access policy, and the `rd` round trip of sign-in and sign-out.
@Suite("Forward-auth: /auth/check, /auth/forward, rd, access policy")
struct ForwardAuthTests {
    static let app = "http://app.localhost:3000"
    static func front(policy: AccessPolicy = AccessPolicy()) -> FrontSettings {
        FrontSettings(publicOrigin: "http://auth.localhost:8080/", redirects: RedirectPolicy(domains: ["app.localhost", ".example.com"]), policy: policy)
    }

    static func header(_ response: TestResponse, _ name: String) -> String? {
        HTTPField.Name(name).flatMap { response.headers[$0] }
    }

    @Test("/auth/check: 401 without a session, 202 with the identity headers with one; never a redirect or a body")
    func check() async throws {
        try await withServer(ServerOptions(front: Self.front())) { harness in
            for cookies in [[:], [harness.sessionCookie: "not-a-session"]] {
                let anonymous = try await harness.get("/auth/check", cookies: cookies)
                #expect(anonymous.status == .unauthorized)
                #expect(anonymous.location == nil && anonymous.body.readableBytes == 0)
            }
            let signIn = try await harness.signIn()
            let session = try #require(signIn.session)
            // A forged identity header on the request changes nothing: the answer comes from the session.
            let checked = try await harness.get("/auth/check", cookies: [harness.sessionCookie: session], headers: [HTTPField.Name("X-Auth-Request-User")!: "someone-else"])
            #expect(checked.status == .accepted)
            #expect(checked.body.readableBytes == 0)
            #expect(Self.header(checked, "X-Auth-Request-User") == Fixtures.ada)
            #expect(Self.header(checked, "X-Auth-Request-Email") == Fixtures.adaEmail)
            #expect(Self.header(checked, "X-Siwa-Private-Email") == "false")
            // No database write on this path: the session table is as it was.
            let before = try harness.database.count("sessions")
            _ = try await harness.get("/auth/check", cookies: [harness.sessionCookie: session])
            #expect(try harness.database.count("sessions") == before)
        }
    }

    @Test("a hidden email arrives as the relay address with X-Siwa-Private-Email: true; a Chinese name is percent-encoded")
    func privateEmailAndName() async throws {
        try await withServer(ServerOptions(front: Self.front())) { harness in
            let hidden = try #require(try await harness.signIn(user: Fixtures.lilei, hide: true, firstName: "李雷").session)
            let checked = try await harness.get("/auth/check", cookies: [harness.sessionCookie: hidden])
            #expect(checked.status == .accepted)
            #expect(Self.header(checked, "X-Siwa-Private-Email") == "true")
            #expect(Self.header(checked, "X-Auth-Request-Email")?.hasSuffix("@privaterelay.appleid.com") == true)
            let name = try #require(Self.header(checked, "X-Auth-Request-Preferred-Username"))
            #expect(name.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value < 0x7F })
            #expect(name.removingPercentEncoding?.contains("李雷") == true)
        }
    }

    @Test("the access policy: a person no rule names gets 403 from /auth/check and a page saying who they are from /auth/forward")
    func policy() async throws {
        let deny = Self.front(policy: AccessPolicy(emails: ["grace@example.com"]))
        try await withServer(ServerOptions(front: deny)) { harness in
            let session = try #require(try await harness.signIn().session)
            let checked = try await harness.get("/auth/check", cookies: [harness.sessionCookie: session])
            #expect(checked.status == .forbidden)
            #expect(Self.header(checked, "X-Auth-Request-User") == nil)
            let forwarded = try await harness.get("/auth/forward", cookies: [harness.sessionCookie: session], headers: [.accept: "text/html"])
            #expect(forwarded.status == .forbidden)
            #expect(forwarded.element("who")?.contains(Fixtures.adaEmail) == true)
            #expect(forwarded.text.contains("http://auth.localhost:8080/auth/sign-out"))
        }
        let domain = Self.front(policy: AccessPolicy(emailDomains: ["example.com"]))
        try await withServer(ServerOptions(front: domain)) { harness in
            let shared = try #require(try await harness.signIn().session)
            #expect(try await harness.get("/auth/check", cookies: [harness.sessionCookie: shared]).status == .accepted)
            // A relay address is on privaterelay.appleid.com, not on the listed domain.
            let hidden = try #require(try await harness.signIn(user: Fixtures.grace, hide: true).session)
            #expect(try await harness.get("/auth/check", cookies: [harness.sessionCookie: hidden]).status == .forbidden)
        }
    }

    @Test("/auth/forward: an unauthenticated browser GET goes to the sign-in with the original URL as rd, from trusted proxies only; anything else is 401")
    func forward() async throws {
        let forwarded: HTTPFields = [
            HTTPField.Name("X-Forwarded-Method")!: "GET", HTTPField.Name("X-Forwarded-Proto")!: "http",
            HTTPField.Name("X-Forwarded-Host")!: "app.localhost:3000", HTTPField.Name("X-Forwarded-Uri")!: "/reports?year=2026",
            .accept: "text/html,application/xhtml+xml",
        ]
        try await withServer(ServerOptions(trustedProxies: ["127.0.0.1"], live: true, front: Self.front())) { harness in
            let browser = try await harness.get("/auth/forward", headers: forwarded)
            #expect(browser.status == .found)
            #expect(browser.location == "http://auth.localhost:8080/auth/apple?rd=" + FormEncoding.encode(Self.app + "/reports?year=2026"))
            var post = forwarded
            post[HTTPField.Name("X-Forwarded-Method")!] = "POST"
            #expect(try await harness.get("/auth/forward", headers: post).status == .unauthorized)
            var api = forwarded
            api[.accept] = "application/json"
            #expect(try await harness.get("/auth/forward", headers: api).status == .unauthorized)
            let session = try #require(try await harness.signIn().session)
            let allowed = try await harness.get("/auth/forward", cookies: [harness.sessionCookie: session], headers: forwarded)
            #expect(allowed.status == .ok)
            #expect(Self.header(allowed, "X-Auth-Request-User") == Fixtures.ada)
        }
        // From a peer that is not a trusted proxy the forwarded headers are ignored: no rd to the claimed URL.
        try await withServer(ServerOptions(live: true, front: Self.front())) { harness in
            let browser = try await harness.get("/auth/forward", headers: forwarded)
            #expect(browser.status == .found)
            #expect(browser.location == "http://auth.localhost:8080/auth/apple")
        }
    }

    @Test("rd: an allowed URL is where the sign-in lands; any other (unlisted host, http off loopback, a look-alike) lands on /")
    func redirectAfterSignIn() async throws {
        try await withServer(ServerOptions(front: Self.front())) { harness in
            let cases: [(String, String)] = [
                (Self.app + "/reports?year=2026", Self.app + "/reports?year=2026"),
                ("https://wiki.example.com/page", "https://wiki.example.com/page"),
                ("https://evil.com/", "/"),
                ("http://wiki.example.com/page", "/"),
                ("https://example.com.evil.com/", "/"),
                ("https://example.com/", "/"),
                ("//evil.com/", "/"),
                ("javascript:alert(1)", "/"),
            ]
            for (rd, expected) in cases {
                let started = try await harness.get("/auth/apple?rd=" + FormEncoding.encode(rd))
                let location = try #require(started.location)
                let binding = try #require(started.setCookie(harness.bindingCookie)?.value)
                let fields = try await harness.authorize(location)
                let returned = try await harness.callback(fields, binding: binding)
                #expect(returned.location == expected, "rd \(rd)")
            }
        }
    }

    /// `siwa_front_fast_path_total{request="…"}` from `/metrics`: the requests answered on the event loop.
    static func fastPathCount(_ harness: Harness, _ request: String) async throws -> Int {
        let prefix = "siwa_front_fast_path_total{request=\"\(request)\"} "
        let line = try await harness.get("/metrics").text.split(separator: "\n").first { $0.hasPrefix(prefix) }
        return Int(try #require(line).dropFirst(prefix.count)) ?? -1
    }

    @Test("a check from a session in memory is answered on the event loop with exactly the handlers' answer; a sign-out is seen by it at once")
    func checkAnsweredFromMemory() async throws {
        let forwarded: HTTPFields = [HTTPField.Name("X-Forwarded-Proto")!: "https", HTTPField.Name("X-Forwarded-Host")!: "app.localhost:3000"]
        // Sessions stay in memory for the whole test: under the suite's load, 5 s passed between two of its checks, and
        // the second rightly went to the handlers.
        try await withServer(ServerOptions(trustedProxies: ["127.0.0.1"], cacheSeconds: 600, live: true, front: Self.front())) { harness in
            let session = try #require(try await harness.signIn(firstName: "Ada").session)
            let cookies = [harness.sessionCookie: session]
            #expect(try await Self.fastPathCount(harness, "check") == 0)
            // The first check signs the assertion for this audience: the handlers answer it.
            let first = try await harness.get("/auth/check", cookies: cookies, headers: forwarded)
            #expect(first.status == .accepted)
            #expect(try await Self.fastPathCount(harness, "check") == 0)
            // The next ones find the session and the assertion in memory.
            let second = try await harness.get("/auth/check", cookies: cookies, headers: forwarded)
            #expect(try await Self.fastPathCount(harness, "check") == 1)
            #expect(second.status == .accepted)
            #expect(second.body.readableBytes == 0)
            func fields(_ response: TestResponse) -> [String] {
                response.headers.filter { $0.name != .date }.map { "\($0.name.canonicalName): \($0.value)" }.sorted()
            }
            #expect(fields(second) == fields(first))
            #expect(Self.header(second, "X-Auth-Request-User") == Fixtures.ada)
            #expect(Self.header(second, "X-Siwa-Assertion") != nil)
            #expect(second.headers[.date] != nil)
            // Without a forwarded origin there is no assertion, from memory too.
            let plain = try await harness.get("/auth/check", cookies: cookies)
            #expect(try await Self.fastPathCount(harness, "check") == 2)
            #expect(Self.header(plain, "X-Siwa-Assertion") == nil)
            #expect(Self.header(plain, "X-Auth-Request-User") == Fixtures.ada)
            // The same for Traefik's and Caddy's /auth/forward (200): the first for a new origin signs, the next is from memory.
            let traefik: HTTPFields = [
                HTTPField.Name("X-Forwarded-Proto")!: "https", HTTPField.Name("X-Forwarded-Host")!: "wiki.example.com",
                HTTPField.Name("X-Forwarded-Method")!: "GET", HTTPField.Name("X-Forwarded-Uri")!: "/page", .accept: "text/html",
            ]
            let forwardFirst = try await harness.get("/auth/forward", cookies: cookies, headers: traefik)
            #expect(try await Self.fastPathCount(harness, "forward") == 0)
            let forwardSecond = try await harness.get("/auth/forward", cookies: cookies, headers: traefik)
            #expect(try await Self.fastPathCount(harness, "forward") == 1)
            #expect(forwardFirst.status == .ok && forwardSecond.status == .ok)
            #expect(fields(forwardSecond) == fields(forwardFirst))
            // Only the proxy reads an answer that passes: none of a page's headers, never cached, by both paths; a refusal,
            // which Traefik shows the browser, has them.
            for (what, passed) in [("handlers' 202", first), ("memory's 202", second), ("handlers' 200", forwardFirst), ("memory's 200", forwardSecond), ("no assertion", plain)] {
                for name in ["Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options", "Referrer-Policy", "Strict-Transport-Security", "X-Siwa-Read-By-Proxy-Only"] {
                    #expect(Self.header(passed, name) == nil, "\(what): \(name)")
                }
                #expect(passed.headers[.cacheControl] == "no-store", "\(what)")
            }
            PageTests.expectSecurityHeaders(try await harness.get("/auth/forward", headers: traefik), "a refusal of /auth/forward")
            #expect(Self.header(forwardSecond, "X-Siwa-Assertion") != Self.header(second, "X-Siwa-Assertion"), "addressed to another origin")
            // Anything else is the handlers' (no session, an unknown one).
            #expect(try await harness.get("/auth/check").status == .unauthorized)
            #expect(try await harness.get("/auth/check", cookies: [harness.sessionCookie: "not-a-session"]).status == .unauthorized)
            #expect(try await Self.fastPathCount(harness, "check") == 2)

            // Signed out: the very next check is refused, though the session was in memory.
            let page = try await harness.get("/auth/sign-out", cookies: cookies)
            let token = try #require(page.csrfToken)
            _ = try await harness.post("/auth/sign-out", form: "csrf_token=\(token)", cookies: cookies)
            #expect(try await harness.get("/auth/check", cookies: cookies, headers: forwarded).status == .unauthorized)
            #expect(try await Self.fastPathCount(harness, "check") == 2)
        }
    }

    @Test("from a peer that is not a trusted proxy, X-Forwarded-* are not believed on the event loop either: no assertion for the claimed origin")
    func untrustedForwardedFromMemory() async throws {
        let forwarded: HTTPFields = [HTTPField.Name("X-Forwarded-Proto")!: "https", HTTPField.Name("X-Forwarded-Host")!: "evil.example"]
        // The test client comes from 127.0.0.1, outside the trusted range.
        try await withServer(ServerOptions(trustedProxies: ["10.0.0.0/8"], live: true, front: Self.front())) { harness in
            let session = try #require(try await harness.signIn(firstName: "Ada").session)
            let cookies = [harness.sessionCookie: session]
            let first = try await harness.get("/auth/check", cookies: cookies, headers: forwarded)
            let second = try await harness.get("/auth/check", cookies: cookies, headers: forwarded)
            #expect(try await Self.fastPathCount(harness, "check") == 1, "the second check was answered from memory")
            for answer in [first, second] {
                #expect(answer.status == .accepted)
                #expect(Self.header(answer, "X-Auth-Request-User") == Fixtures.ada)
                #expect(Self.header(answer, "X-Siwa-Assertion") == nil, "no audience is taken from a peer that is not trusted")
            }
        }
    }

    @Test("sign-out with rd: the GET only asks; the POST with the CSRF token ends the session and returns to the allowed rd")
    func signOutWithRedirect() async throws {
        try await withServer(ServerOptions(front: Self.front())) { harness in
            let session = try #require(try await harness.signIn().session)
            let cookies = [harness.sessionCookie: session]
            let rd = Self.app + "/"
            let page = try await harness.get("/auth/sign-out?rd=" + FormEncoding.encode(rd), cookies: cookies)
            #expect(page.status == .ok)
            #expect(page.element("who")?.isEmpty == false)
            #expect(try await harness.get("/auth/check", cookies: cookies).status == .accepted)
            let token = try #require(page.csrfToken)
            let wrong = try await harness.post("/auth/sign-out", form: "csrf_token=wrong&rd=" + FormEncoding.encode(rd), cookies: cookies)
            #expect(wrong.status == .forbidden)
            #expect(try await harness.get("/auth/check", cookies: cookies).status == .accepted)
            let done = try await harness.post("/auth/sign-out", form: "csrf_token=\(token)&rd=" + FormEncoding.encode(rd), cookies: cookies)
            #expect(done.location == rd)
            #expect(done.setCookie(harness.sessionCookie)?.isDeletion == true)
            #expect(try await harness.get("/auth/check", cookies: cookies).status == .unauthorized)
            // Signed out already: the GET goes straight on; an unlisted rd is never followed.
            let again = try await harness.get("/auth/sign-out?rd=" + FormEncoding.encode("https://evil.com/"), cookies: cookies)
            #expect(again.location == "/")
        }
    }

    @Test("X-Siwa-Assertion: ES256 by a key published at /.well-known/siwa/jwks.json, iss = public_url, aud = the forwarded origin, exp = iat + 60; none without a forwarded origin")
    func assertion() async throws {
        let forwarded: HTTPFields = [HTTPField.Name("X-Forwarded-Proto")!: "http", HTTPField.Name("X-Forwarded-Host")!: "app.localhost:3000"]
        try await withServer(ServerOptions(trustedProxies: ["127.0.0.1"], live: true, front: Self.front())) { harness in
            let session = try #require(try await harness.signIn().session)
            let checked = try await harness.get("/auth/check", cookies: [harness.sessionCookie: session], headers: forwarded)
            let token = try #require(Self.header(checked, "X-Siwa-Assertion"))
            let keySet = try await harness.get("/.well-known/siwa/jwks.json")
            #expect(keySet.headers[.cacheControl]?.contains("max-age=") == true)
            let keys = try #require((try JSONSerialization.jsonObject(with: Data(keySet.text.utf8)) as? [String: Any])?["keys"] as? [[String: String]])
            let jws = try CompactJWS(token)
            #expect(jws.header.alg == "ES256")
            let jwk = try #require(keys.first { $0["kid"] == jws.header.kid })
            let x = try #require(Base64URL.decode(jwk["x"] ?? "")), y = try #require(Base64URL.decode(jwk["y"] ?? ""))
            let publicKey = try P256.Signing.PublicKey(rawRepresentation: x + y)
            let signature = try P256.Signing.ECDSASignature(rawRepresentation: jws.signature)
            #expect(publicKey.isValidSignature(signature, for: Data(Array(jws.signingInput))))
            let claims = try #require(try JSONSerialization.jsonObject(with: Data(jws.payload)) as? [String: Any])
            #expect(claims["iss"] as? String == "http://auth.localhost:8080")
            #expect(claims["aud"] as? String == Self.app)
            #expect(claims["sub"] as? String == Fixtures.ada)
            #expect(claims["email"] as? String == Fixtures.adaEmail)
            #expect((claims["exp"] as? Int).map { $0 - ((claims["iat"] as? Int) ?? 0) } == 60)
            // Without a forwarded origin there is no audience to address, so no assertion.
            let bare = try await harness.get("/auth/check", cookies: [harness.sessionCookie: session])
            #expect(bare.status == .accepted)
            #expect(Self.header(bare, "X-Siwa-Assertion") == nil)
        }
    }
}
