import AppleIDEmulator
import Foundation
import Hummingbird
import Logging
import NIOCore
import Synchronization
import TestSupport
import Testing

extension BrowserSignInTests {
    /// Issue 28 with real parts: a session ended at siwa ends where the person is signed in through it. Apache httpd
    /// with Debian's mod_auth_openidc takes siwa's Logout Tokens at its back-channel endpoint and drops its own
    /// session; a client that is down gets its token once it is back; and a person sees their sessions in two
    /// Chromiums and signs the other one out, which nginx's auth_request then refuses. In the browser suite's
    /// Chromium, each with a siwa of its own (so no other test's sessions or tokens are in its store).
    @Suite("Sessions and back-channel logout with real parts")
    struct SessionsEndToEndTests {
        @Test("mod_auth_openidc registered with backchannel_logout_uri: Apple's account-delete notification ends the Apache session within 5 seconds; the next request to the protected page goes to siwa")
        func accountDeleteEndsTheApacheSession() async throws {
            let e2e = try EndToEnd.current()
            try await e2e.startClean()
            try await Self.withApacheSignedIn(e2e) { apache, site, signedIn in
                try await Visit.withClient { visit in
                    let sent = try await visit.send(
                        site.emulatorOrigin + "/emulator/admin/notify", method: .POST, headers: [("Content-Type", "application/json")],
                        body: #"{"type": "account-delete", "sub": "\#(signedIn.sub)"}"#
                    )
                    let deliveries = try JSONSerialization.jsonObject(with: Data(sent.body.readableBytesView)) as? [[String: Any]]
                    #expect(deliveries?.map { $0["status"] as? Int } == [200], "the emulator's delivery to siwa: \(sent.text)")
                    try await Self.expectApacheSendsToSiwa(apache, site: site, cookies: signedIn.cookies, within: .seconds(5), visit: visit)
                }
                // In the browser: Apache sends the person to siwa, who has no session for her either, so on to Apple.
                try await e2e.browser.open(apache.protectedURL)
                try await Self.waitForConsent(e2e.browser, at: site)
            }
            try await e2e.startClean()
        }

        @Test("mod_auth_openidc registered with backchannel_logout_uri: signing out at siwa (its sign-out page, CSRF token) ends the Apache session within 5 seconds; the next request to the protected page goes to siwa")
        func signOutAtSiwaEndsTheApacheSession() async throws {
            let e2e = try EndToEnd.current()
            let browser = e2e.browser
            try await e2e.startClean()
            try await Self.withApacheSignedIn(e2e) { apache, site, signedIn in
                try await browser.open(site.url("/auth/sign-out"))
                try await browser.element("#confirm-sign-out").click()
                try await browser.waitForPage(site.url("/"))
                try await Visit.withClient { visit in
                    try await Self.expectApacheSendsToSiwa(apache, site: site, cookies: signedIn.cookies, within: .seconds(5), visit: visit)
                }
                try await browser.open(apache.protectedURL)
                try await Self.waitForConsent(browser, at: site)
            }
            try await e2e.startClean()
        }

        @Test("a client whose back-channel logout endpoint is down when the session ends gets its Logout Token (the session's sid and the person's sub) once it is back up")
        func clientDownGetsItsTokenLater() async throws {
            let e2e = try EndToEnd.current()
            try await e2e.startClean()
            let receiverPort = try await FreePorts.reserve(1)[0]
            let receiver = LogoutReceiver()
            try await Self.withApacheSignedIn(e2e, backchannel: { _ in "http://127.0.0.1:\(receiverPort)/backchannel" }) { _, site, signedIn in
                try await e2e.browser.open(site.url("/auth/sign-out"))
                try await e2e.browser.element("#confirm-sign-out").click()
                try await e2e.browser.waitForPage(site.url("/"))
                // Nothing listens on the port: siwa's first try fails (when its 5 s request timeout is up, the HTTP
                // client trying to connect until then), and it keeps the delivery for later.
                try await Visit.withClient { visit in
                    try await e2e.browser.waitUntil("siwa to count a delivery to try again", timeout: .seconds(10)) {
                        try await visit.send(site.url("/metrics")).text.contains(#"siwa_backchannel_logouts_total{outcome="retried"} 1"#)
                    }
                }
                try await receiver.run(port: receiverPort) {
                    // The next try is due 5 s after the first began, so at the queue's next look.
                    let tokens = try await receiver.waitForTokens(within: .seconds(10))
                    try #require(tokens.count == 1, "tokens received: \(tokens.count)")
                    let header = try Self.jwtPart(tokens[0], 0)
                    let claims = try Self.jwtPart(tokens[0], 1)
                    #expect(header["typ"] as? String == "logout+jwt")
                    #expect(claims["iss"] as? String == site.origin)
                    #expect(claims["aud"] as? String == "apache")
                    #expect(claims["sid"] as? String == signedIn.sid)
                    #expect(claims["sub"] as? String == signedIn.sub)
                    #expect((claims["events"] as? [String: Any])?["http://schemas.openid.net/event/backchannel-logout"] != nil, "\(claims)")
                    #expect(claims["nonce"] == nil)
                }
                let metrics = try await Visit.withClient { visit in try await visit.send(site.url("/metrics")).text }
                #expect(metrics.contains(#"siwa_backchannel_logouts_total{outcome="delivered"} 1"#))
            }
            try await e2e.startClean()
        }

        @Test("two Chromiums signed in as one person: the sessions page lists both with their browsers (English and Chinese, 375 and 1280 px screenshots); sign out everywhere else, confirmed, ends the other one: nginx's auth_request sends it to the sign-in and /auth/check answers its cookie 401")
        func signOutEverywhereElse() async throws {
            let e2e = try EndToEnd.current()
            let desktop = e2e.browser
            try await e2e.startClean()
            try await withEchoUpstream { app in
                try await LocalSite.run { site in
                    let ada = site.user("Ada")
                    let block = try NginxFrontTests.readmeBlock(siwa: site.port, app: app)
                    try await withNginx(configuration: { port in NginxFrontTests.server(port: port, block) }) { nginx in
                        try await e2e.sessions.with(language: "zh-CN") { phone in
                            try await Self.signOutEverywhereElse(site: site, nginx: nginx, as: ada, desktop: desktop, phone: phone)
                        }
                    }
                }
            }
            try await e2e.startClean()
        }

        /// The phone (a second Chromium, in Chinese, saying it is Chrome on Android) signs Ada in through nginx, the
        /// desktop (the suite's Chromium, English) on siwa's page; both see both sessions; the desktop ends the other.
        private static func signOutEverywhereElse(
            site: LocalSite, nginx: RunningProxy, as ada: EmulatorConfiguration.User, desktop: Browser, phone: Browser
        ) async throws {
            try await phone.devTools("Emulation.setUserAgentOverride", ["userAgent": .string(androidChrome)])
            let page = nginx.url("/notes")
            try await phone.open(page)
            try await consent(as: ada, at: site, in: phone)
            try await phone.waitForPage(page)
            #expect(try EchoedRequest(json: ByteBuffer(string: try await phone.element("body").text())).values("x-auth-request-user") == [ada.sub])

            try await desktop.open(site.url("/"))
            try await desktop.element("#siwa-button").click()
            try await consent(as: ada, at: site, in: desktop)
            try await desktop.waitForPage(site.url("/session"))

            try await desktop.open(site.url("/auth/sessions"))
            #expect(try await desktop.execute("return document.documentElement.lang").string == "en")
            #expect(try await listed(desktop) == [
                Listed(device: "Chrome on Linux", current: true, network: "127.0.0.x", via: "the sign-in page"),
                Listed(device: "Chrome on Android", current: false, network: "127.0.0.x", via: "the sign-in page"),
            ])
            #expect(try await desktop.element("#current").text() == "this browser")
            #expect(try await desktop.element("#end-others").text() == "Sign out everywhere else")
            try await screenshots(desktop, named: "sessions-en")

            try await phone.open(site.url("/auth/sessions"))
            #expect(try await phone.execute("return document.documentElement.lang").string == "zh-Hans")
            #expect(try await phone.element("h1").text() == "你在哪些地方已登录")
            #expect(try await listed(phone).map { [$0.device: $0.current] } == [["Chrome on Android": true], ["Chrome on Linux": false]])
            #expect(try await phone.element("#current").text() == "当前浏览器")
            #expect(try await phone.element("#end-others").text() == "退出其他所有地方的登录")
            try await screenshots(phone, named: "sessions-zh-Hans")

            try await Visit.withClient { visit in
                // Before: both sessions pass the forward-auth check.
                let phoneCookies = try await phone.cookies()
                let desktopCookies = try await desktop.cookies()
                #expect(try await visit.send(site.url("/auth/check"), cookies: phoneCookies).status == 202)

                try await desktop.element("#end-others").click()
                try await desktop.waitForPage(site.url("/auth/sessions/end"))
                #expect(try await desktop.element("h1").text() == "Sign out everywhere else?")
                #expect(try await desktop.element("#what").text().contains("(1)"))
                try await desktop.element("#confirm-end").click()
                try await desktop.waitForPage(site.url("/auth/sessions"))
                #expect(try await listed(desktop).map(\.device) == ["Chrome on Linux"])
                #expect(try await desktop.elements("#end-others").isEmpty)

                // After: the phone's cookie is refused, the desktop's still passes.
                #expect(try await visit.send(site.url("/auth/check"), cookies: phoneCookies).status == 401)
                #expect(try await visit.send(site.url("/auth/check"), cookies: desktopCookies).status == 202)
            }
            // The phone's next page behind nginx: no app, the way to Apple's sign-in.
            try await phone.open(page)
            try await waitForConsent(phone, at: site)
        }

        // MARK: steps

        /// What a relying party knows of its signed-in person: Apache's cookies in the browser, and the id_token's
        /// `sid` and `sub` it was given.
        struct SignedIn {
            var cookies: [String: String]
            var sid: String
            var sub: String
        }

        /// Starts Apache with mod_auth_openidc and a siwa of its own that knows it as client `apache` with
        /// `backchannel_logout_uri` (by default Apache's own: its `OIDCRedirectURI` with `?logout=backchannel`), signs
        /// Ada in through Apache's protected page in the suite's Chromium, and runs `body` with what Apache holds.
        /// Debian's mod_auth_openidc 2.4.12 needs no directive for it: its default sessions (`OIDCSessionType
        /// server-cache`, `OIDCCacheType shm`) keep the id_token's `sid` mapped to the session, which a Logout Token
        /// with that `sid` then removes (with client-cookie sessions it could not).
        private static func withApacheSignedIn(
            _ e2e: EndToEnd, backchannel: (RunningApacheOIDC) -> String = { $0.redirectURI + "?logout=backchannel" },
            _ body: (RunningApacheOIDC, LocalSite, SignedIn) async throws -> Void
        ) async throws {
            let browser = e2e.browser
            let siwaPort = try await FreePorts.reserve(1)[0]
            let secret = "apache-" + UUID().uuidString
            try await withApacheOIDC(provider: "http://127.0.0.1:\(siwaPort)", clientID: "apache", clientSecret: secret) { apache in
                let client: [String: Any] = [
                    "client_id": "apache", "client_secret": secret, "redirect_uris": [apache.redirectURI], "backchannel_logout_uri": backchannel(apache), "iss_in_errors": false,
                ]
                let clients = String(decoding: try JSONSerialization.data(withJSONObject: [client]), as: UTF8.self)
                try await LocalSite.run(settings: ["port": String(siwaPort), "oidc_clients": clients]) { site in
                    let ada = site.user("Ada")
                    try await browser.open(apache.protectedURL)
                    try await consent(as: ada, at: site, in: browser)
                    try await browser.waitForPage(apache.protectedURL)
                    let echoed = try EchoedRequest(json: ByteBuffer(string: try await browser.element("body").text()))
                    #expect(echoed.values("oidc_claim_sub") == [ada.sub], "\(apache.logs())")
                    let sid = try #require(echoed.values("oidc_claim_sid").first, "the id_token carries no sid: \(echoed.values("oidc_id_token_payload"))")
                    let signedIn = SignedIn(cookies: try await browser.cookies(), sid: sid, sub: ada.sub)
                    // Apache lets the person in as long as its own session lives.
                    try await Visit.withClient { visit in
                        let page = try await protectedPage(apache, cookies: signedIn.cookies, visit: visit)
                        #expect(page.status == 200)
                        #expect(try page.echoed().values("oidc_claim_sub") == [ada.sub])
                    }
                    try await body(apache, site, signedIn)
                }
            }
        }

        /// Polls Apache's protected page with the browser's cookies until Apache, its session gone, answers with the
        /// way to siwa's authorization endpoint; fails when that takes longer than `limit` or Apache never took a
        /// Logout Token.
        private static func expectApacheSendsToSiwa(
            _ apache: RunningApacheOIDC, site: LocalSite, cookies: [String: String], within limit: Duration, visit: Visit,
            sourceLocation: SourceLocation = #_sourceLocation
        ) async throws {
            let started = ContinuousClock.now
            var answer = try await protectedPage(apache, cookies: cookies, visit: visit)
            while answer.status == 200, ContinuousClock.now - started < limit + .seconds(5) {
                try await Task.sleep(for: .milliseconds(100))
                answer = try await protectedPage(apache, cookies: cookies, visit: visit)
            }
            let took = ContinuousClock.now - started
            #expect(answer.status == 302, "Apache still lets the person in after \(took):\n\(apache.logs())", sourceLocation: sourceLocation)
            #expect(answer.location?.hasPrefix(site.url("/oauth2/authorize?")) == true, "\(answer.location ?? "no Location")", sourceLocation: sourceLocation)
            #expect(took < limit, "the Apache session ended after \(took)", sourceLocation: sourceLocation)
            // Apache writes a request's log line after its answer: the logout's line may come a moment after the
            // session it ended already sent the next request on (seen under the full suite's load).
            let backchannel = "\"POST /protected/redirect_uri?logout=backchannel HTTP/1.1\" 200 "
            func log() -> String { (try? String(contentsOf: apache.server.directory.appendingPathComponent("access.log"), encoding: .utf8)) ?? "" }
            let logged = ContinuousClock.now
            while !log().contains(backchannel), ContinuousClock.now - logged < .seconds(10) { try await Task.sleep(for: .milliseconds(100)) }
            #expect(log().contains(backchannel), "Apache's access log:\n\(log())", sourceLocation: sourceLocation)
        }

        /// Apache's answer to a browser's navigation to the protected page with `cookies`, redirects not followed.
        private static func protectedPage(_ apache: RunningApacheOIDC, cookies: [String: String], visit: Visit) async throws -> Visit.Answer {
            try await visit.send(apache.protectedURL, headers: [("Accept", "text/html,application/xhtml+xml"), ("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Dest", "document")], cookies: cookies)
        }

        /// Picks `user` on the emulator's consent page and continues.
        private static func consent(as user: EmulatorConfiguration.User, at site: LocalSite, in browser: Browser) async throws {
            try await waitForConsent(browser, at: site)
            try await browser.element("input[name=emulator_user][value=\"\(user.sub)\"]").click()
            try await browser.element("#continue").click()
        }

        /// Waits for Apple's (the emulator's) consent page: the person is sent to sign in.
        private static func waitForConsent(_ browser: Browser, at site: LocalSite) async throws {
            try await browser.waitForPage(site.emulatorOrigin + "/auth/authorize")
            _ = try await browser.element("#continue")
        }

        /// Chrome on an Android phone, as it names itself (the reduced User-Agent).
        static let androidChrome = "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Mobile Safari/537.36"

        // MARK: checks

        /// One row of the sessions page.
        struct Listed: Equatable, CustomStringConvertible {
            var device: String
            var current: Bool
            var network: String
            var via: String
            var description: String { "\(device)\(current ? " (current)" : ""), \(network), via \(via)" }
        }

        /// The rows of the sessions page the browser shows, in order.
        private static func listed(_ browser: Browser) async throws -> [Listed] {
            let rows = try await browser.execute("""
                return Array.from(document.querySelectorAll('#sessions li.session')).map(function (li) {
                    return [li.querySelector('.device').textContent, li.querySelector('#current') !== null ? 'yes' : 'no',
                            li.querySelector('.network').textContent, li.querySelector('.via').textContent];
                });
                """)
            return (rows.array ?? []).map { row in
                let cells = (row.array ?? []).map { $0.string ?? "" }
                return Listed(device: cells[0], current: cells[1] == "yes", network: cells[2], via: cells[3])
            }
        }

        /// Screenshots of the page at a phone's width (375 px) and a desktop's (1280 px), as `<name>-375.png` and
        /// `<name>-1280.png`; at each width the page fits, with nothing to scroll sideways.
        private static func screenshots(_ browser: Browser, named name: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
            for (width, height, mobile) in [(375, 812, true), (1280, 900, false)] {
                try await browser.devTools("Emulation.setDeviceMetricsOverride", [
                    "width": .number(Double(width)), "height": .number(Double(height)), "deviceScaleFactor": 1, "mobile": .bool(mobile),
                ])
                let widths = try await browser.execute("return [window.innerWidth, document.documentElement.scrollWidth, document.documentElement.clientWidth]").array?.compactMap(\.number) ?? []
                #expect(widths.first == Double(width), "the viewport is \(widths) px wide", sourceLocation: sourceLocation)
                // The page is no wider than what shows of it (clientWidth: the viewport less a scrollbar).
                #expect(widths.count == 3 && widths[1] <= widths[2], "page and visible widths at \(width) px: \(widths)", sourceLocation: sourceLocation)
                let file = try await Artifacts.screenshot(browser, named: "\(name)-\(width)")
                let png = FileManager.default.contents(atPath: file.path) ?? Data()
                #expect(Array(png.prefix(8)) == Artifacts.pngSignature, "\(file.path) is not a PNG", sourceLocation: sourceLocation)
                // IHDR's width, big-endian, at bytes 16–19.
                let pixels = png.count >= 24 ? png[16..<20].reduce(0) { $0 << 8 | Int($1) } : 0
                #expect(pixels == width, "\(file.path) is \(pixels) px wide", sourceLocation: sourceLocation)
            }
            try await browser.devTools("Emulation.clearDeviceMetricsOverride")
        }

        /// Part `index` of a compact JWS (0 the header, 1 the claims) as a JSON object.
        private static func jwtPart(_ token: String, _ index: Int) throws -> [String: Any] {
            let parts = token.split(separator: ".", omittingEmptySubsequences: false)
            var base64 = String(try #require(parts.count == 3 ? parts[index] : nil, "not a compact JWS: \(token.prefix(80))"))
                .replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
            let data = try #require(Data(base64Encoded: base64), "part \(index) is not base64url")
            return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any], "part \(index) is not a JSON object")
        }
    }
}

/// A client's back-channel logout endpoint that a test brings up on a port of its choosing, when it chooses: keeps the
/// `logout_token` of every POST to `/backchannel` and answers 200.
private final class LogoutReceiver: Sendable {
    private let received = Mutex<[String]>([])

    /// The tokens received so far.
    var tokens: [String] { received.withLock { $0 } }

    /// Listens on 127.0.0.1:`port` while `body` runs.
    func run<T: Sendable>(port: Int, _ body: () async throws -> T) async throws -> T {
        var logger = Logger(label: "logout-receiver")
        logger.logLevel = .critical
        let router = Router()
        router.post("/backchannel") { request, _ -> Response in
            var request = request
            let form = String(buffer: try await request.collectBody(upTo: 65536))
            for pair in form.split(separator: "&") where pair.hasPrefix("logout_token=") {
                let token = String(pair.dropFirst("logout_token=".count)).removingPercentEncoding ?? ""
                self.received.withLock { $0.append(token) }
            }
            return Response(status: .ok)
        }
        return try await withLiveApplication({ onRunning in
            Application(
                router: router, configuration: .init(address: .hostname("127.0.0.1", port: port)),
                onServerRunning: { await onRunning($0.localAddress?.port ?? 0) }, logger: logger
            )
        }) { _ in try await body() }
    }

    /// The tokens received, waiting up to `limit` for the first.
    func waitForTokens(within limit: Duration) async throws -> [String] {
        let deadline = ContinuousClock.now + limit
        while tokens.isEmpty, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        return tokens
    }
}

extension Browser {
    /// The cookies the page shown would send, by name.
    fileprivate func cookies() async throws -> [String: String] {
        let value = try await connection.command(.GET, "/session/\(id)/cookie")
        var cookies: [String: String] = [:]
        for cookie in value.array ?? [] {
            if let name = cookie["name"]?.string, let value = cookie["value"]?.string { cookies[name] = value }
        }
        return cookies
    }

    /// Runs a Chrome DevTools Protocol command in this browser's page (chromedriver's `goog/cdp/execute`): to set a
    /// viewport size or the `User-Agent` a person's other device would send.
    fileprivate func devTools(_ command: String, _ parameters: [String: TestJSON] = [:]) async throws {
        try await connection.command(.POST, "/session/\(id)/goog/cdp/execute", ["cmd": .string(command), "params": .object(parameters)])
    }
}
