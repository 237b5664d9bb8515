import AppleIDEmulator
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import SignInServer
import Testing

@Suite("Pages, headers, languages, modes")
struct PageTests {
    static func expectSecurityHeaders(_ response: TestResponse, hsts: String? = nil, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let csp = response.headers[.contentSecurityPolicy] ?? ""
        #expect(csp.contains("frame-ancestors 'none'"), "\(what): CSP \(csp)", sourceLocation: sourceLocation)
        #expect(csp.contains("default-src 'none'"), "\(what)", sourceLocation: sourceLocation)
        #expect(!csp.contains("unsafe-inline"), "\(what)", sourceLocation: sourceLocation)
        #expect(!csp.contains("unsafe-eval"), "\(what)", sourceLocation: sourceLocation)
        #expect(response.headers[.xContentTypeOptions] == "nosniff", "\(what)", sourceLocation: sourceLocation)
        #expect(response.headers[HTTPField.Name("Referrer-Policy")!] != nil, "\(what)", sourceLocation: sourceLocation)
        #expect(response.headers[.strictTransportSecurity] == hsts, "\(what): HSTS", sourceLocation: sourceLocation)
    }

    @Test("every response carries the security headers: pages, redirects, error pages, 404, static files")
    func securityHeaders() async throws {
        try await withServer { h in
            let signIn = try await h.signIn()
            let session = try #require(signIn.session)
            let responses: [(String, TestResponse)] = [
                ("sign-in page", try await h.get("/")),
                ("start redirect", try await h.get("/auth/apple")),
                ("callback redirect", signIn.response),
                ("session page", try await h.sessionPage(session)),
                ("signed-out page", try await h.sessionPage(nil)),
                ("malformed callback", try await h.post("/auth/apple/callback", form: "state=%ZZ")),
                ("query callback", try await h.get("/auth/apple/callback")),
                ("sign-out refused", try await h.post("/auth/signout", form: "", cookies: [h.sessionCookie: session])),
                ("404", try await h.get("/no/such/page")),
                ("405", try await h.request(.delete, "/session")),
                ("button.css", try await h.get("/button.css")),
                ("siwa.css", try await h.get("/siwa.css")),
                ("healthz", try await h.get("/healthz")),
            ]
            for (what, response) in responses {
                Self.expectSecurityHeaders(response, what)
            }
            // Forms may post only to this site and to Apple (the emulator here).
            #expect(try await h.get("/").headers[.contentSecurityPolicy]?.contains("form-action 'self' \(h.emulatorURL)") == true)
        }
    }

    @Test("pages have no inline script or style, so the CSP holds")
    func noInlineScript() async throws {
        try await withServer { h in
            let signIn = try await h.signIn()
            for page in [try await h.get("/"), try await h.sessionPage(signIn.session), try await h.get("/nope")] {
                #expect(!page.text.contains("<script>"))
                #expect(!page.text.contains("style=\""))
                #expect(!page.text.contains("<style"))
                #expect(page.text.range(of: #"\son[a-z]+\s*="#, options: .regularExpression) == nil, "no inline event handler")
            }
        }
    }

    @Test("pages rendered once per shape still show each person their own details, HTML-escaped")
    func cachedPagesPerPerson() async throws {
        try await withServer { h in
            let hostile = #"<b>"Ada" & 'Co'</b>"#
            let ada = try await h.signIn(user: Fixtures.ada, firstName: hostile)
            let grace = try await h.signIn(user: Fixtures.grace, hide: true, firstName: "Grace")
            let adaPage = try await h.sessionPage(try #require(ada.session))
            let gracePage = try await h.sessionPage(try #require(grace.session))
            #expect(adaPage.element("name")?.hasPrefix(hostile) == true, "ada's page: \(adaPage.element("name") ?? "no name")")
            #expect(adaPage.text.contains("&lt;b&gt;&quot;Ada&quot; &amp; &#39;Co&#39;&lt;/b&gt;"))
            #expect(!adaPage.text.contains(hostile))
            #expect(adaPage.element("sub")?.contains(Fixtures.ada) == true)
            #expect(gracePage.element("name")?.hasPrefix("Grace") == true)
            #expect(gracePage.element("sub")?.contains(Fixtures.grace) == true)
            #expect(!gracePage.text.contains(Fixtures.ada) && !gracePage.text.contains("Ada"))
            #expect(adaPage.csrfToken != gracePage.csrfToken)
            // The sign-in page carries each browser's own CSRF token and return path.
            let first = try await h.get("/?return_to=%2Fsession%3Fa%3D1")
            let second = try await h.get("/")
            let firstToken = first.setCookie(h.csrfCookie)?.value
            let csrfCookie = try #require(first.setCookie(h.csrfCookie))
            #expect(csrfCookie.has("HttpOnly") && csrfCookie["SameSite"] == "Strict" && csrfCookie["Path"] == "/" && csrfCookie["Max-Age"] == "86400")
            #expect(!csrfCookie.has("Secure"), "plain-HTTP local mode")
            #expect(firstToken != nil && first.text.contains(#"data-csrf="\#(firstToken ?? "-")""#))
            #expect(!second.text.contains(firstToken ?? "-"))
            #expect(first.text.contains("return_to=%2Fsession%3Fa%3D1"))
            #expect(!second.text.contains("%3Fa%3D1"))
        }
    }

    @Test("an unknown path shows the not-found page, 404")
    func notFound() async throws {
        try await withServer { h in
            let response = try await h.get("/no/such/page")
            #expect(response.status == .notFound)
            #expect(response.errorTitle == Fixtures.Heading.notFound)
            #expect(response.headers[.contentType]?.hasPrefix("text/html") == true)
        }
    }

    @Test("English by default: the sign-in page with the Apple button")
    func english() async throws {
        try await withServer { h in
            for language in [nil, "en-US,en;q=0.9", "fr-FR,fr;q=0.9", "de, zh;q=0"] {
                let headers: HTTPFields = language.map { [.acceptLanguage: $0] } ?? [:]
                let page = try await h.get("/", headers: headers)
                #expect(page.status == .ok)
                #expect(page.text.contains(#"<html lang="en">"#), "Accept-Language: \(language ?? "none")")
                #expect(page.heading == Fixtures.Heading.signIn)
                #expect(page.text.contains("<span>Sign in with Apple</span>"))
                #expect(!page.text.contains("通过 Apple 登录"))
            }
        }
    }

    @Test("Simplified Chinese for Accept-Language: zh-CN,zh;q=0.9, on the sign-in page and the error pages")
    func chinese() async throws {
        try await withServer { h in
            let headers: HTTPFields = [.acceptLanguage: "zh-CN,zh;q=0.9"]
            let page = try await h.get("/", headers: headers)
            #expect(page.status == .ok)
            #expect(page.text.contains(#"<html lang="zh-Hans">"#))
            #expect(page.text.contains("<span>通过 Apple 登录</span>"))
            #expect(!page.text.contains("Sign in with Apple"))

            #expect(try await h.get("/", headers: [.acceptLanguage: "en;q=0.5, zh-Hans;q=0.8"]).text.contains("通过 Apple 登录"))
            #expect(try await h.get("/nope", headers: headers).errorTitle == "找不到页面")

            let started = try await h.start()
            let fields = try await h.authorize(started.authorizeURL, action: "cancel")
            let cancelled = try await h.callback(fields, binding: started.binding, headers: headers)
            #expect(cancelled.errorTitle == "已取消登录")
        }
    }

    @Test("the pop-up button's title and accessible name are a HIG title; that it opens a pop-up is a separate hint", arguments: [
        ("en-US", ["Sign in with Apple", "Continue with Apple", "Sign up with Apple"], "pop-up"),
        ("zh-CN", ["通过 Apple 登录", "通过 Apple 继续", "通过 Apple 注册"], "弹出窗口"),
    ])
    func popupButtonTitle(language: String, titles: [String], hintWord: String) async throws {
        try await withServer { h in
            let page = try await h.get("/", headers: [.acceptLanguage: language]).text
            let button = try #require(page.firstMatch(of: /<button[^>]*id="siwa-popup"[^>]*>([\s\S]*?)<\/button>/), "no pop-up button")
            let tag = String(button.0.prefix { $0 != ">" })
            // The visible text (the logo is aria-hidden) is the accessible name, as no aria-label overrides it.
            let text = String(button.1).replacing(/<svg[\s\S]*?<\/svg>/, with: "").replacing(/<[^>]+>/, with: "").trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(titles.contains(text), "pop-up button title \(text)")
            #expect(!tag.contains("aria-label"))
            let hintID = try #require(tag.firstMatch(of: /aria-describedby="([^"]+)"/)?.1, "the button names no hint")
            let hint = try #require(page.firstMatch(of: Regex(#"id="\#(hintID)"[^>]*>([^<]*)<"#)), "no element \(hintID)")
            #expect((hint.output[1].substring.map(String.init) ?? "").contains(hintWord))
        }
    }

    @Test("local mode says that Apple is emulated")
    func localModeNotice() async throws {
        try await withServer { h in
            let page = try await h.get("/")
            #expect(page.text.contains("Local mode: Apple is emulated on this machine."))
        }
    }

    @Test("local mode: a request on another host is first moved to the return URL's host, so the binding cookie comes back")
    func localModeHostRedirect() async throws {
        let returnURL = "http://127.0.0.1:8080/auth/apple/callback"
        try await withServer(ServerOptions(returnURL: returnURL)) { h in
            // app.test(.router) requests have the authority "localhost".
            let response = try await h.get("/auth/apple?return_to=%2Faccount")
            #expect(response.status == .found)
            #expect(response.location == "http://127.0.0.1:8080/auth/apple?return_to=%2Faccount&moved=1")
            #expect(response.setCookie("siwa_binding") == nil)
            #expect(try h.database.count("pending_authorizations") == 0)

            let evil = try await h.get("/auth/apple?return_to=https%3A%2F%2Fevil.example")
            #expect(evil.location == "http://127.0.0.1:8080/auth/apple?return_to=%2Fsession&moved=1")

            // Still on another host after the move (a proxy that does not pass the browser's host): no second hop,
            // which would be a loop; the sign-in starts.
            let moved = try await h.get("/auth/apple?return_to=%2Faccount&moved=1")
            #expect(moved.status == .found)
            #expect(moved.location?.hasPrefix("http://127.0.0.1:8080/auth/apple") == false, "\(moved.location ?? "")")
            #expect(moved.setCookie("siwa_binding") != nil)
            #expect(try h.database.count("pending_authorizations") == 1)
        }
    }

    @Test("cookie_domain over HTTPS: the session cookie is __Secure-siwa_session for the parent domain, and sign-out deletes it there; binding and CSRF cookies stay on siwa's host")
    func cookieDomainSessionCookie() async throws {
        try await withServer(ServerOptions(mode: .apple, returnURL: Fixtures.secureReturnURL, cookieDomain: "example.com")) { h in
            let start = try await h.get("/auth/apple")
            let binding = try #require(start.setCookie("__Host-siwa_binding"))
            #expect(binding["Domain"] == nil)

            let signIn = try await h.signIn()
            #expect(signIn.response.setCookie("__Host-siwa_session") == nil)
            let session = try #require(signIn.response.setCookie("__Secure-siwa_session"))
            #expect(session["Domain"] == "example.com")
            #expect(session.has("Secure") && session.has("HttpOnly") && session["SameSite"] == "Lax" && session["Path"] == "/")

            let page = try await h.sessionPage(session.value)
            #expect(page.status == .ok)
            let out = try await h.post("/auth/signout", form: "csrf_token=" + (page.csrfToken ?? ""), cookies: [h.sessionCookie: session.value])
            #expect(out.status == .seeOther)
            // A cookie set for a domain is only deleted by a Set-Cookie naming the same domain.
            let deleted = try #require(out.setCookie("__Secure-siwa_session"))
            #expect(deleted.isDeletion)
            #expect(deleted["Domain"] == "example.com")
            #expect(try await h.sessionPage(session.value).status == .unauthorized)
        }
    }

    @Test("over HTTPS: __Host- cookies, Secure, the binding cookie SameSite=None to survive Apple's cross-site POST, HSTS as hsts_max_age says (none by default), no local-mode notice")
    func secureCookies() async throws {
        try await withServer(ServerOptions(mode: .apple, returnURL: Fixtures.secureReturnURL)) { h in
            Self.expectSecurityHeaders(try await h.get("/auth/apple"), "start over HTTPS without hsts_max_age")
        }
        var options = ServerOptions(mode: .apple, returnURL: Fixtures.secureReturnURL)
        options.hstsMaxAge = 31_536_000
        try await withServer(options) { h in
            let start = try await h.get("/auth/apple")
            Self.expectSecurityHeaders(start, hsts: "max-age=31536000", "start over HTTPS")
            let binding = try #require(start.setCookie("__Host-siwa_binding"))
            #expect(binding.has("Secure"))
            #expect(binding.has("HttpOnly"))
            #expect(binding["SameSite"] == "None")
            #expect(binding["Path"] == "/")
            #expect(binding["Domain"] == nil)

            let signIn = try await h.signIn()
            #expect(signIn.response.status == .seeOther)
            let session = try #require(signIn.response.setCookie("__Host-siwa_session"))
            #expect(session.has("Secure"))
            #expect(session.has("HttpOnly"))
            #expect(session["SameSite"] == "Lax")
            #expect(session["Path"] == "/")
            #expect(session["Domain"] == nil)
            let cleared = try #require(signIn.response.setCookie("__Host-siwa_binding"))
            #expect(cleared.isDeletion)
            #expect(cleared.has("Secure"), "a __Host- cookie is only accepted (and so only deleted) with Secure")

            let page = try await h.sessionPage(session.value)
            #expect(page.status == .ok)
            Self.expectSecurityHeaders(page, hsts: "max-age=31536000", "session page over HTTPS")
            #expect(!page.text.contains("Local mode"))

            let csrf = try #require(try await h.get("/").setCookie("__Host-siwa_csrf"))
            #expect(csrf.has("Secure") && csrf.has("HttpOnly") && csrf["SameSite"] == "Strict" && csrf["Path"] == "/" && csrf["Domain"] == nil)
        }
    }
}
