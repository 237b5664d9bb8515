import AppleIDEmulator
import AsyncHTTPClient
import Foundation
import NIOCore
@testable import SignInServer
import Testing
import TestSupport

/// Issue 35 in a real browser: a page's script and a person's navigation get different answers from one URL, a page
/// of another origin calls an API behind siwa with the app's token (its CORS preflight passing without one), and a
/// command line's device flow is approved by a person in Chromium.
extension BrowserSignInTests {
    /// An API that answers CORS as an app would: its preflight for `PUT /api/items` and the PUT itself.
    static let corsAPI: [String: (bytes: String, close: Bool)] = {
        let cors = "Access-Control-Allow-Origin: *\r\nAccess-Control-Allow-Methods: PUT\r\nAccess-Control-Allow-Headers: authorization, content-type\r\n"
        return [
            "OPTIONS /api/items": ("HTTP/1.1 204 No Content\r\n" + cors + "\r\n", false),
            "PUT /api/items": ("HTTP/1.1 200 OK\r\n" + cors + "Content-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}", false),
        ]
    }()

    /// A page's script: `PUT` JSON to `arguments[0]` with the bearer token `arguments[1]` (a preflight first, from
    /// another origin); its status and content type, or `failed: …` when the browser let the page read nothing.
    static let putWithToken =
        "return fetch(arguments[0], {method: 'PUT', headers: {'Authorization': 'Bearer ' + arguments[1], 'Content-Type': 'application/json'}, body: '{}'}).then(r => r.status + ' ' + r.headers.get('content-type'), e => 'failed: ' + e)"
    /// The same without a token: `failed` when siwa's 401 (no CORS headers) could not be read.
    static let putWithoutToken = "return fetch(arguments[0], {method: 'PUT', headers: {'Content-Type': 'application/json'}, body: '{}'}).then(r => String(r.status), e => 'failed')"

    @Test("one URL behind --upstream: Chromium's navigation is sent to sign in; the page's fetch() gets 401 problem details with WWW-Authenticate it can read; a page of another origin PUTs to the API with the app's bearer token, its preflight passing without one")
    func scriptsAndPreflightsInChromium() async throws {
        let e2e = try EndToEnd.current()
        let browser = e2e.browser
        try await e2e.startClean()
        try await ScriptedUpstream.run(extra: Self.corsAPI) { upstream in
            let settings: [String: String?] = ["upstream": "http://127.0.0.1:\(upstream.port)", "trusted_proxies": nil, "access_rules": BearerUpstreamTests.rules]
            try await LocalSite.run(settings: settings) { site in
                let token = try await Visit.withClient { visit in try await BearerUpstreamTests.nativeToken(site, visit, sub: site.user("Ada").sub) }
                // A page of siwa's origin (its health page) is where the app's scripts would run.
                try await browser.open(site.url("/healthz"))
                let fetched = try await browser.execute(
                    "return fetch('/api/reports', {headers: {'Accept': 'text/html'}}).then(r => r.text().then(t => [String(r.status), r.headers.get('www-authenticate') || '', r.headers.get('content-type') || '', t].join('\\n')))"
                ).string ?? ""
                let lines = fetched.split(separator: "\n", maxSplits: 3).map(String.init)
                #expect(lines.first == "401", "\(fetched)")
                #expect(lines.count > 2 && lines[1] == "Bearer realm=\"siwa\"" && lines[2] == "application/problem+json", "\(fetched)")
                #expect(lines.last?.contains("\"status\":401") == true)

                // Another origin (the emulator's page): Chromium sends the preflight, then the PUT with the token.
                try await browser.open(site.emulatorOrigin + "/emulator/admin/counters")
                let put = try await browser.execute(
                    Self.putWithToken,
                    [.string(site.url("/api/items")), .string(token)]
                ).string
                #expect(put == "200 application/json", "\(put ?? "nil")")
                // Without the token the PUT is siwa's 401, which carries no CORS headers: the page cannot read it.
                let anonymous = try await browser.execute(
                    Self.putWithoutToken,
                    [.string(site.url("/api/items"))]
                ).string
                #expect(anonymous == "failed")

                // The person's navigation to the same URL goes to Apple's consent.
                try await browser.open(site.url("/api/reports"))
                try await browser.waitForPage(site.emulatorOrigin + "/auth/authorize")
            }
        }
        try await e2e.startClean()
    }

    @Test("behind nginx configured as docs/front.md shows: a page of another origin in Chromium PUTs to the API with the app's bearer token, nginx's auth_request letting the CORS preflight through without one (its original method passed to siwa) and the PUT as the app's person")
    func preflightThroughNginxInChromium() async throws {
        let e2e = try EndToEnd.current()
        let browser = e2e.browser
        try await e2e.startClean()
        try await ScriptedUpstream.run(extra: Self.corsAPI) { upstream in
            try await LocalSite.run(settings: ["access_rules": BearerUpstreamTests.rules]) { site in
                try await NginxFrontTests.withFrontNginx(site: site, app: upstream.port) { nginx in
                    let token = try await Visit.withClient { visit in try await BearerUpstreamTests.nativeToken(site, visit, sub: site.user("Ada").sub) }
                    try await browser.open(site.emulatorOrigin + "/emulator/admin/counters")
                    let put = try await browser.execute(
                        Self.putWithToken,
                        [.string(nginx.url("/api/items")), .string(token)]
                    ).string
                    #expect(put == "200 application/json", "\(put ?? "nil")\n\(nginx.logs())")
                    #expect(upstream.connections.value >= 1)
                    let anonymous = try await browser.execute(
                        Self.putWithoutToken,
                        [.string(nginx.url("/api/items"))]
                    ).string
                    #expect(anonymous == "failed", "without the token siwa's 401 carries no CORS headers")
                }
            }
        }
        try await e2e.startClean()
    }

    @Test("a command line's device flow approved in Chromium: the person opens verification_uri_complete, signs in with Apple, sees the client and approves; the command line's poll gets its tokens and calls the API behind --upstream as the person, with its client")
    func deviceFlowInChromium() async throws {
        let e2e = try EndToEnd.current()
        let browser = e2e.browser
        try await e2e.startClean()
        try await withEchoUpstream { app in
            let settings: [String: String?] = [
                "upstream": "http://127.0.0.1:\(app)", "trusted_proxies": nil,
                "oidc_clients": #"[{"client_id": "deploy-cli", "public": true, "device": true}]"#,
                "access_rules": #"[{"paths": ["^/api/"], "policy": "allow", "clients": ["deploy-cli"]}]"#,
            ]
            try await LocalSite.run(settings: settings) { site in
                try await Visit.withClient { cli in
                    let ada = site.user("Ada")
                    let started = try await cli.send(
                        site.url("/oauth2/device_authorization"), method: .POST, headers: [("Content-Type", "application/x-www-form-urlencoded")],
                        body: "client_id=deploy-cli&scope=openid profile offline_access"
                    )
                    let device = try #require(try JSONSerialization.jsonObject(with: Data(started.body.readableBytesView)) as? [String: Any], "\(started.text)")
                    let complete = try #require(device["verification_uri_complete"] as? String)
                    let deviceCode = try #require(device["device_code"] as? String)
                    func poll() async throws -> [String: Any] {
                        let answer = try await cli.send(
                            site.url("/oauth2/token"), method: .POST, headers: [("Content-Type", "application/x-www-form-urlencoded")],
                            body: "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code&client_id=deploy-cli&device_code=" + deviceCode
                        )
                        return try #require(try JSONSerialization.jsonObject(with: Data(answer.body.readableBytesView)) as? [String: Any])
                    }
                    #expect(try await poll()["error"] as? String == "authorization_pending")

                    try await browser.open(complete)
                    try await browser.waitForPage(site.emulatorOrigin + "/auth/authorize")
                    try await browser.element(userRadio(ada)).click()
                    try await browser.element("#continue").click()
                    try await browser.waitForPage(site.url("/auth/device"))
                    #expect(try await browser.element("#device-client").text() == "deploy-cli")
                    #expect(try await browser.element("#device-code").text() == device["user_code"] as? String)
                    try await browser.element("#device-approve").click()
                    try await browser.waitUntil("the approval page") { (try? await browser.element("#device-done").text())?.isEmpty == false }

                    let tokens = try await poll()
                    let access = try #require(tokens["access_token"] as? String, "\(tokens)")
                    #expect(tokens["refresh_token"] is String)
                    let called = try await cli.send(site.url("/api/deploys"), headers: [("Authorization", "Bearer " + access)])
                    #expect(called.status == 200, "\(called.text)")
                    let echoed = try called.echoed()
                    #expect(echoed.values("x-auth-request-user") == [ada.sub])
                    #expect(echoed.values("x-auth-request-client") == ["deploy-cli"])
                }
            }
        }
        try await e2e.startClean()
    }
}
