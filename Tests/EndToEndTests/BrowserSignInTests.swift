import AppleIDEmulator
import AsyncHTTPClient
import Foundation
import NIOCore
import TestSupport
import Testing

/// Sign in with Apple as a person does it, in a real headless Chromium against the site in local mode.
/// Each test picks the test user whose state it relies on (the emulator sends `user` only on a user's first
/// authorization), so the tests hold in any order.
@Suite("Sign in with Apple in headless Chromium", .serialized, .localSiteInChromium)
struct BrowserSignInTests {
    @Test("first sign-in: the consent page is the emulator's, and the session shows the edited name, the email and the sub")
    func firstSignIn() async throws {
        let e2e = try EndToEnd.current()
        let browser = e2e.browser
        let ada = e2e.site.user("Ada")
        try await e2e.startClean()

        #expect(try await browser.execute("return document.documentElement.lang").string == "en")
        #expect(try await browser.element("#siwa-button").text() == "Sign in with Apple")
        try await expectStrictMarkup(browser)
        let signInShot = try await Artifacts.screenshot(browser, named: "signin")

        try await browser.element("#siwa-button").click()
        try await waitForConsent(e2e)
        #expect(try await browser.title().contains("Apple ID emulator"))
        #expect(try await browser.element(".banner").text().contains("emulator"))
        try await browser.element(userRadio(ada)).click()
        let firstName = try await browser.element("#first_name")
        try await firstName.clear()
        try await firstName.type("Augusta")
        let consentShot = try await Artifacts.screenshot(browser, named: "consent")

        try await browser.element("#continue").click()
        try await browser.waitForPage(e2e.site.url("/session"))
        #expect(try await browser.element("#name").text() == "Augusta Lovelace")
        #expect(try await browser.element("#email").text() == ada.email)
        #expect(try await browser.elements("#relay").isEmpty)
        #expect(try await browser.element("#sub").text() == ada.sub)
        try await expectStrictMarkup(browser)
        let sessionShot = try await Artifacts.screenshot(browser, named: "session")

        for shot in [signInShot, consentShot, sessionShot] {
            expectPNG(shot)
        }
        try await expectNoCSPViolations(browser)
    }

    @Test("second sign-in after sign-out: Apple sends no name this time, and the first one is still shown")
    func secondSignInKeepsName() async throws {
        let e2e = try EndToEnd.current()
        let browser = e2e.browser
        let grace = e2e.site.user("Grace")
        try await e2e.startClean()

        try await signIn(e2e, as: grace, firstName: "Amazing")
        #expect(try await browser.element("#name").text() == "Amazing Hopper")
        try await browser.element("#sign-out").click()
        try await browser.waitForPage(e2e.site.url("/"))

        // What is typed now is not sent: Apple gives the name only on a user's first authorization.
        try await signIn(e2e, as: grace, firstName: "Ignored")
        #expect(try await browser.element("#name").text() == "Amazing Hopper")
        #expect(try await browser.element("#email").text() == grace.email)
        #expect(try await browser.element("#sub").text() == grace.sub)
        try await expectNoCSPViolations(browser)
    }

    @Test("hide my email: the session shows the private relay address with its marker")
    func hideMyEmail() async throws {
        let e2e = try EndToEnd.current()
        let browser = e2e.browser
        let lilei = e2e.site.user("李")
        try await e2e.startClean()

        try await signIn(e2e, as: lilei, hideEmail: true)
        let email = try await browser.element("#email").text()
        #expect(email.hasPrefix(lilei.relayEmail))
        #expect(email.contains("@privaterelay.appleid.com"))
        #expect(!email.contains(lilei.email))
        #expect(try await browser.element("#relay").text() == "Private relay address (Hide My Email)")
        #expect(try await browser.element("#sub").text() == lilei.sub)
        try await expectStrictMarkup(browser)
        try await expectNoCSPViolations(browser)
    }

    @Test("cancel on Apple's page: a page says the sign-in was cancelled, and no one is signed in")
    func cancel() async throws {
        let e2e = try EndToEnd.current()
        let browser = e2e.browser
        try await e2e.startClean()

        try await browser.element("#siwa-button").click()
        try await waitForConsent(e2e)
        try await browser.element("#cancel").click()
        try await browser.waitForPage(e2e.site.url("/auth/apple/callback"))
        #expect(try await browser.element("#error-title").text() == "Sign-in cancelled")
        #expect(try await browser.element("#error-message").text().contains("Nothing was shared"))
        #expect(try await browser.element("#error-action").attribute("href") == "/")
        try await expectStrictMarkup(browser)

        try await browser.open(e2e.site.url("/session"))
        #expect(try await browser.element("#error-title").text() == "You are not signed in")
        #expect(try await browser.elements("#sub").isEmpty)
        #expect(try await browser.elements("#sign-out").isEmpty)
        try await expectNoCSPViolations(browser)
    }

    @Test("sign-out: back on the sign-in page, and the session page no longer shows the user")
    func signOut() async throws {
        let e2e = try EndToEnd.current()
        let browser = e2e.browser
        let lilei = e2e.site.user("李")
        try await e2e.startClean()

        try await signIn(e2e, as: lilei)
        #expect(try await browser.element("#sub").text() == lilei.sub)
        try await browser.open(e2e.site.url("/"))
        #expect(try await browser.element("main").text().contains("You are already signed in."))

        try await browser.open(e2e.site.url("/session"))
        try await browser.element("#sign-out").click()
        try await browser.waitForPage(e2e.site.url("/"))
        #expect(try await browser.element("#siwa-button").text() == "Sign in with Apple")
        #expect(try await !browser.element("main").text().contains("You are already signed in."))

        try await browser.open(e2e.site.url("/session"))
        #expect(try await browser.element("#error-title").text() == "You are not signed in")
        #expect(try await browser.elements("#sub").isEmpty)
        try await expectNoCSPViolations(browser)
    }

    @Test("popup sign-in: Apple's page opens in a popup, its result comes back by postMessage, and the opener shows the session")
    func popupSignIn() async throws {
        let e2e = try EndToEnd.current()
        let browser = e2e.browser
        let grace = e2e.site.user("Grace")
        try await e2e.startClean()

        let popup = try await openPopupConsent(e2e)
        try await browser.element(userRadio(grace)).click()
        #expect(try await browser.element(userRadio(grace)).isSelected())
        // The same first name as secondSignInKeepsName types: whichever of the two is Grace's first
        // authorization, the name stored is "Amazing Hopper" (Apple sends it only that once).
        let firstName = try await browser.element("#first_name")
        try await firstName.clear()
        try await firstName.type("Amazing")
        try await browser.element("#continue").click()

        // The emulator's web_message page posts the result to the opener and closes itself.
        let opener = try await backToOpener(e2e, from: popup)
        try await browser.switchToWindow(opener)
        try await browser.waitForPage(e2e.site.url("/session"))
        #expect(try await browser.element("#name").text() == "Amazing Hopper")
        #expect(try await browser.element("#email").text() == grace.email)
        #expect(try await browser.element("#sub").text() == grace.sub)
        try await expectStrictMarkup(browser)
        try await expectNoCSPViolations(browser)
    }

    @Test("popup sign-in cancelled: the popup closes, the sign-in page says so, and no one is signed in")
    func popupCancel() async throws {
        let e2e = try EndToEnd.current()
        let browser = e2e.browser
        try await e2e.startClean()

        let popup = try await openPopupConsent(e2e)
        try await browser.element("#cancel").click()
        let opener = try await backToOpener(e2e, from: popup)
        try await browser.switchToWindow(opener)
        try await browser.waitUntil("the popup status to report the cancellation") {
            try await browser.element("#siwa-popup-status").text().contains("Sign-in cancelled")
        }
        #expect(try await browser.currentURL() == e2e.site.url("/"))

        try await browser.open(e2e.site.url("/session"))
        #expect(try await browser.element("#error-title").text() == "You are not signed in")
        #expect(try await browser.elements("#sub").isEmpty)
        try await expectNoCSPViolations(browser)
    }

    @Test("a browser asking for Chinese (zh-CN) gets the sign-in page in Simplified Chinese")
    func chinesePage() async throws {
        let e2e = try EndToEnd.current()
        try await e2e.sessions.with(language: "zh-CN") { browser in
            try await browser.open(e2e.site.url("/"))
            #expect(try await browser.execute("return document.documentElement.lang").string == "zh-Hans")
            #expect(try await browser.element("#siwa-button").text() == "通过 Apple 登录")
            #expect(try await browser.element("h1").text() == "登录")
            try await expectStrictMarkup(browser)
            expectPNG(try await Artifacts.screenshot(browser, named: "signin-zh-Hans"))
            try await expectNoCSPViolations(browser)
        }
    }

    @Test("the CSP checks can fail: the site's policy is enforced, and a violation reaches the browser log")
    func cspViolationIsSeen() async throws {
        let e2e = try EndToEnd.current()
        let browser = e2e.browser
        try await e2e.startClean()

        try await browser.execute("document.body.setAttribute('style', 'outline: 3px solid red');")
        var log: [Browser.LogEntry] = []
        try await browser.waitUntil("a CSP violation in the browser log") {
            log += try await browser.browserLog()
            return log.contains(where: \.isCSPViolation)
        }
        #expect(try await browser.execute("return document.querySelectorAll('[style]').length").number == 1)
    }

    @Test("nginx auth_request in front of an app: a protected URL goes through Apple's consent and lands back on itself; the app sees who signed in")
    func nginxForwardAuth() async throws {
        let e2e = try EndToEnd.current()
        let browser = e2e.browser
        let lilei = e2e.site.user("李")
        try await e2e.startClean()
        let siwa = try #require(URL(string: e2e.site.origin)?.port)
        try await withEchoUpstream { app in
            // The README's nginx block, as a reader copies it.
            let block = try NginxFrontTests.readmeBlock(siwa: siwa, app: app)
            try await withNginx(configuration: { port in NginxFrontTests.server(port: port, block) }) { nginx in
                // Without a session a forged identity header gets nowhere: the answer is the way to the sign-in.
                let echoed = try await signInThroughProxy(e2e, to: nginx.url("/reports"), query: "?year=2026", as: lilei, hideEmail: true, forging: "X-Auth-Request-User")
                #expect(echoed.path == "/reports?year=2026")
                #expect(echoed.values("x-auth-request-user") == [lilei.sub])
                #expect(echoed.values("x-siwa-private-email") == ["true"])
                #expect(echoed.values("x-auth-request-email") == [lilei.relayEmail])
                let claims = try await Self.verifiedWithPyJWT(echoed, site: e2e.site, audience: nginx.origin)
                #expect(claims?["sub"] as? String == lilei.sub)
                #expect(claims?["is_private_email"] as? Bool == true)
            }
        }
    }

    @Test("Traefik forwardAuth and Caddy forward_auth to /auth/forward: the browser goes to the sign-in and back to the URL it asked for; the app sees who signed in, never a forged header")
    func traefikAndCaddyForwardAuth() async throws {
        let e2e = try EndToEnd.current()
        let grace = e2e.site.user("Grace")
        let siwa = try #require(URL(string: e2e.site.origin)?.port)
        try await withEchoUpstream { app in
            try await e2e.startClean()
            try await withTraefik(staticArguments: [], dynamicConfiguration: { _ in
                """
                http:
                  routers:
                    app: {rule: "PathPrefix(`/`)", middlewares: [siwa], service: app}
                  middlewares:
                    siwa:
                      forwardAuth:
                        address: "http://127.0.0.1:\(siwa)/auth/forward"
                        authResponseHeaders: [X-Auth-Request-User, X-Auth-Request-Email, X-Auth-Request-Preferred-Username, X-Siwa-Private-Email, X-Siwa-Assertion]
                  services:
                    app: {loadBalancer: {servers: [{url: "http://127.0.0.1:\(app)"}]}}
                """
            }) { traefik in
                let echoed = try await signInThroughProxy(e2e, to: traefik.url("/wiki/page"), query: "?rev=3", as: grace, forging: "X-Auth-Request-User")
                #expect(echoed.path == "/wiki/page?rev=3")
                #expect(echoed.values("x-auth-request-user") == [grace.sub])
                #expect(echoed.values("x-auth-request-email") == [grace.email])
                #expect(echoed.values("x-siwa-private-email") == ["false"])
                // The upstream verifies the signed assertion with a third-party JWT library against siwa's key set.
                let claims = try await Self.verifiedWithPyJWT(echoed, site: e2e.site, audience: traefik.origin)
                #expect(claims?["sub"] as? String == grace.sub)
                #expect(claims?["email"] as? String == grace.email)
                #expect((claims?["exp"] as? Int).map { $0 - ((claims?["iat"] as? Int) ?? 0) } == 60)
            }
            try await e2e.startClean()
            try await withCaddy(configuration: { port in
                """
                http://127.0.0.1:\(port) {
                    forward_auth 127.0.0.1:\(siwa) {
                        uri /auth/forward
                        copy_headers X-Auth-Request-User X-Auth-Request-Email X-Auth-Request-Preferred-Username X-Siwa-Private-Email X-Siwa-Assertion
                    }
                    reverse_proxy 127.0.0.1:\(app)
                }
                """
            }) { caddy in
                let echoed = try await signInThroughProxy(e2e, to: caddy.url("/docs"), query: "", as: grace, forging: "X-Auth-Request-User")
                #expect(echoed.path == "/docs")
                #expect(echoed.values("x-auth-request-user") == [grace.sub])
                // The name from Grace's first sign-in on this shared site (another test may have edited her first name).
                #expect(echoed.values("x-auth-request-preferred-username").first?.hasSuffix(" Hopper") == true, "\(echoed.values("x-auth-request-preferred-username"))")
                let claims = try await Self.verifiedWithPyJWT(echoed, site: e2e.site, audience: caddy.origin)
                #expect(claims?["sub"] as? String == grace.sub)
            }
        }
    }

    @Test("siwa serve --upstream in Chromium: a protected URL goes through Apple's consent and lands back on itself; the app sees who signed in and an assertion PyJWT verifies; signed out with rd back to the app, the next visit goes to the sign-in")
    func builtInProxyInChromium() async throws {
        let e2e = try EndToEnd.current()
        let browser = e2e.browser
        try await e2e.startClean()
        try await withEchoUpstream { app in
            try await LocalSite.run(settings: ["upstream": "http://127.0.0.1:\(app)", "trusted_proxies": nil]) { site in
                let ada = site.user("Ada")
                let path = site.url("/reports/2026")
                let page = path + "?view=full&tag=a%20b"
                try await browser.open(page)
                try await browser.waitForPage(site.emulatorOrigin + "/auth/authorize")
                try await browser.element(userRadio(ada)).click()
                try await browser.element("#continue").click()
                try await browser.waitForPage(path)
                #expect(try await browser.currentURL() == page, "back on the very URL asked for")
                let echoed = try EchoedRequest(json: ByteBuffer(string: try await browser.element("body").text()))
                #expect(echoed.path == "/reports/2026?view=full&tag=a%20b")
                #expect(echoed.values("x-auth-request-user") == [ada.sub])
                #expect(echoed.values("x-auth-request-email") == [ada.email])
                let claims = try await Self.verifiedWithPyJWT(echoed, site: site, audience: "http://127.0.0.1:\(app)")
                #expect(claims?["sub"] as? String == ada.sub)

                try await browser.open(site.url("/auth/sign-out?rd=") + (page.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""))
                try await browser.element("#confirm-sign-out").click()
                // Back to the app's URL, which, signed out, sends the browser to the sign-in again.
                try await browser.waitForPage(site.emulatorOrigin + "/auth/authorize")
            }
        }
        try await e2e.startClean()
    }

    /// The claims of the `X-Siwa-Assertion` the app behind a proxy received, once PyJWT (a third-party JWT library,
    /// as an upstream would use) has verified it against siwa's key set for `audience` with docs/front.md's block;
    /// nil when it did not.
    static func verifiedWithPyJWT(_ echoed: EchoedRequest, site: LocalSite, audience: String, sourceLocation: SourceLocation = #_sourceLocation) async throws -> [String: Any]? {
        let assertion = try #require(echoed.values("x-siwa-assertion").first, "the app received no assertion", sourceLocation: sourceLocation)
        let run = try await DocSnippetsTests.runPyJWTBlock(assertion, keySet: site.url("/.well-known/siwa/jwks.json"), issuer: site.origin, audience: audience)
        #expect(run.status == 0, "PyJWT refused the assertion:\n\(run.stderr)", sourceLocation: sourceLocation)
        guard run.status == 0 else { return nil }
        return try JSONSerialization.jsonObject(with: Data((run.stdout.split(separator: "\n").last ?? "").utf8)) as? [String: Any]
    }

    @Test("cookie_domain: a session made on auth.siwa.localhost is seen by app1 and app2 behind nginx; sign-out there ends it for both; a host outside the domain is not signed in")
    func cookieDomainSharesTheSessionWithSiblingHosts() async throws {
        let e2e = try EndToEnd.current()
        let browser = e2e.browser
        try await e2e.startClean()
        // siwa reached as auth.siwa.localhost (Chromium sends every *.localhost name to loopback, RFC 6761), the
        // session cookie for siwa.localhost, sites on app1. and app2. behind one nginx.
        try await LocalSite.run(settings: [
            "public_url": "http://auth.siwa.localhost:{port}", "cookie_domain": ".siwa.localhost", "allowed_redirect_domains": ".siwa.localhost",
        ]) { site in
            let siwa = try #require(URL(string: site.origin)?.port)
            #expect(site.origin == "http://auth.siwa.localhost:\(siwa)")
            let ada = site.user("Ada")
            try await withEchoUpstream { app in
                let block = try NginxFrontTests.readmeBlock(siwa: siwa, app: app)
                try await withNginx(configuration: { port in NginxFrontTests.server(port: port, block) }) { nginx in
                    let app1 = "http://app1.siwa.localhost:\(nginx.port)/one"
                    try await browser.open(app1)
                    try await browser.waitForPage(site.emulatorOrigin + "/auth/authorize")
                    try await browser.element(userRadio(ada)).click()
                    try await browser.element("#continue").click()
                    try await browser.waitForPage(app1)
                    #expect(try EchoedRequest(json: ByteBuffer(string: try await browser.element("body").text())).values("x-auth-request-user") == [ada.sub])

                    // The sibling host: no trip to the sign-in, the same person.
                    let app2 = "http://app2.siwa.localhost:\(nginx.port)/two"
                    try await browser.open(app2)
                    #expect(try await browser.currentURL() == app2)
                    #expect(try EchoedRequest(json: ByteBuffer(string: try await browser.element("body").text())).values("x-auth-request-user") == [ada.sub])

                    // 127.0.0.1 is outside the cookie's domain: not signed in there, so sent to the sign-in.
                    try await browser.open("http://127.0.0.1:\(nginx.port)/three")
                    try await browser.waitForPage(site.emulatorOrigin + "/auth/authorize")

                    // Signing out on siwa's host, with rd back to app2, ends the session for every sibling.
                    try await browser.open(site.url("/auth/sign-out?rd=") + (app2.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""))
                    try await browser.element("#confirm-sign-out").click()
                    try await browser.waitForPage(site.emulatorOrigin + "/auth/authorize")
                    try await browser.open(app1)
                    try await browser.waitForPage(site.emulatorOrigin + "/auth/authorize")
                }
            }
        }
        try await e2e.startClean()
    }

    /// Opens `url + query` behind a proxy, consents at the emulator as `user`, and returns what the app behind
    /// the proxy received once the browser is back on that URL. With `forging`, first checks that a request
    /// without a session but with that identity header set by the client gets no page of the app.
    private func signInThroughProxy(
        _ e2e: EndToEnd, to url: String, query: String, as user: EmulatorConfiguration.User, hideEmail: Bool = false, forging: String? = nil
    ) async throws -> EchoedRequest {
        let browser = e2e.browser
        if let forging {
            var forged = HTTPClientRequest(url: url + query)
            forged.headers.add(name: forging, value: user.sub)
            forged.headers.add(name: "Accept", value: "text/html")
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(redirectConfiguration: .disallow))
            let refused: HTTPClientResponse
            do {
                refused = try await client.execute(forged, timeout: .seconds(10))
                try await client.shutdown()
            } catch {
                try await client.shutdown()
                throw error
            }
            #expect(refused.status == .found)
            #expect(refused.headers.first(name: "location")?.hasPrefix(e2e.site.url("/auth/apple?rd=")) == true)
        }
        try await browser.open(url + query)
        try await waitForConsent(e2e)
        try await browser.element(userRadio(user)).click()
        if hideEmail { try await browser.element("input[name=emulator_email][value=hide]").click() }
        try await browser.element("#continue").click()
        try await browser.waitForPage(url)
        #expect(try await browser.currentURL() == url + query)
        return try EchoedRequest(json: ByteBuffer(string: try await browser.element("body").text()))
    }

    // MARK: steps

    /// From the sign-in page through the emulator's consent page to the session page.
    private func signIn(_ e2e: EndToEnd, as user: EmulatorConfiguration.User, firstName: String? = nil, hideEmail: Bool = false) async throws {
        let browser = e2e.browser
        try await browser.open(e2e.site.url("/"))
        try await browser.element("#siwa-button").click()
        try await waitForConsent(e2e)
        try await browser.element(userRadio(user)).click()
        #expect(try await browser.element(userRadio(user)).isSelected())
        if let firstName {
            let field = try await browser.element("#first_name")
            try await field.clear()
            try await field.type(firstName)
        }
        if hideEmail {
            try await browser.element("input[name=emulator_email][value=hide]").click()
        }
        try await browser.element("#continue").click()
        try await browser.waitForPage(e2e.site.url("/session"))
    }

    /// Clicks the popup button on the sign-in page, switches to the popup it opens and waits there for the
    /// emulator's consent page; returns the popup's handle and the opener's.
    private func openPopupConsent(_ e2e: EndToEnd) async throws -> (popup: String, opener: String) {
        let browser = e2e.browser
        let opener = try await browser.windowHandle()
        let before = try await browser.windowHandles()
        try await browser.element("#siwa-popup").click()
        let popup = try await browser.waitForNewWindow(besides: before)
        try await browser.switchToWindow(popup)
        try await waitForConsent(e2e)
        #expect(try await browser.execute("return window.name").string == "siwa-popup")
        #expect(try await browser.execute("return window.opener !== null").bool == true)
        return (popup, opener)
    }

    /// Waits for the popup to close itself after answering and returns the opener's handle.
    private func backToOpener(_ e2e: EndToEnd, from windows: (popup: String, opener: String)) async throws -> String {
        try await e2e.browser.waitForWindowToClose(windows.popup)
        #expect(try await e2e.browser.windowHandles() == [windows.opener])
        return windows.opener
    }

    private func waitForConsent(_ e2e: EndToEnd) async throws {
        try await e2e.browser.waitForPage(e2e.site.emulatorOrigin + "/auth/authorize")
        _ = try await e2e.browser.element("#continue")
    }

    func userRadio(_ user: EmulatorConfiguration.User) -> String {
        "input[name=emulator_user][value=\"\(user.sub)\"]"
    }

    // MARK: checks

    /// The page needs nothing a strict Content-Security-Policy forbids: no style attributes, no inline scripts.
    private func expectStrictMarkup(_ browser: Browser, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let found = try await browser.execute("""
            return {
                styled: document.querySelectorAll('[style]').length,
                inlineScripts: Array.from(document.scripts).filter(function (s) { return !s.src; }).length,
                url: location.href
            };
            """)
        #expect(found["styled"]?.number == 0, "elements with a style attribute on \(found["url"]?.string ?? "?")", sourceLocation: sourceLocation)
        #expect(found["inlineScripts"]?.number == 0, "inline scripts on \(found["url"]?.string ?? "?")", sourceLocation: sourceLocation)
    }

    /// No page seen since the last look at the log made the browser refuse something under the site's CSP.
    private func expectNoCSPViolations(_ browser: Browser, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let violations = try await browser.browserLog().filter(\.isCSPViolation)
        #expect(violations.isEmpty, "CSP violations: \(violations)", sourceLocation: sourceLocation)
    }

    private func expectPNG(_ file: URL, sourceLocation: SourceLocation = #_sourceLocation) {
        let data = FileManager.default.contents(atPath: file.path) ?? Data()
        #expect(data.count > 1000, "\(file.path) is \(data.count) bytes", sourceLocation: sourceLocation)
        #expect(Array(data.prefix(8)) == Artifacts.pngSignature, "\(file.path) is not a PNG", sourceLocation: sourceLocation)
    }
}
