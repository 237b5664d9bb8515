import Foundation
import NIOHTTP1
import Testing
import TestSupport

/// A recent sign-in for sensitive paths (issue 47, part C): a rule's `max_auth_age` against a real `siwa serve`, its
/// emulator and the echo upstream. The same verdict at every door is `VerdictDifferentialTests`' `/recent/` column.
@Suite("A recent sign-in for a rule: max_auth_age", .serialized)
struct StepUpTests {
    /// 8 s: long enough that a sign-in is still recent at the next request under the full suite's load (2 s was not),
    /// short enough to wait out.
    static let rules = #"[{"paths": ["^/billing/"], "policy": "allow", "max_auth_age": 8}]"#

    @Test("a session older than the rule's max_auth_age: a navigation gets the page that says why, whose button signs in with Apple again and comes back to the same URL, which then passes; a script gets 401 insufficient_user_authentication with max_age (RFC 9470), and so does a check; other paths pass meanwhile; memory never lets it through")
    func oldSessionSignsInAgain() async throws {
        try await UpstreamProxyTests.withEchoSite(["access_rules": Self.rules, "trusted_proxies": "127.0.0.1", "check_cache_seconds": "600"]) { site, visit in
            let ada = site.user("Ada")
            let signingIn = ContinuousClock.now
            let session = try await visit.signIn(site, user: ada).session
            let signedIn = ContinuousClock.now
            let page = site.url("/billing/invoices?year=2026")
            let navigation = [("Accept", "text/html"), ("Sec-Fetch-Mode", "navigate")]
            // Fresh: through (judged only when the answer came within the 8 s, as it does unless the machine stalls).
            let fresh = try await visit.send(page, headers: navigation, cookies: ["siwa_session": session]).status
            if ContinuousClock.now - signingIn < .seconds(8) { #expect(fresh == 200) }
            try await Task.sleep(until: signedIn + .milliseconds(8500))

            // Twice: the second time the session is in memory, and memory must not let it through either.
            for _ in 0..<2 {
                let again = try await visit.send(page, headers: navigation, cookies: ["siwa_session": session])
                #expect(again.status == 401, "\(again.status) \(again.text.prefix(300))")
                #expect(again.text.contains("Sign in again to go on"), "\(again.text)")
                let challenge = again.headers.first(name: "www-authenticate") ?? ""
                #expect(challenge.contains(#"error="insufficient_user_authentication""#) && challenge.contains("max_age=8"), "\(challenge)")
            }
            let again = try await visit.send(page, headers: navigation, cookies: ["siwa_session": session])
            // The page's button: the sign-in with Apple, back to the very URL.
            let button = try #require(again.text.firstMatch(of: /href="([^"]*\/auth\/apple\?rd=[^"]*)"/).map { String($0.1).replacingOccurrences(of: "&amp;", with: "&") })
            #expect(URLComponents(string: button)?.queryItems?.first { $0.name == "rd" }?.value == page, "\(button)")

            // A script or an app: RFC 9470's challenge, problem details.
            let script = try await visit.send(page, headers: [("Accept", "application/json")], cookies: ["siwa_session": session])
            #expect(script.status == 401)
            #expect(script.headers.first(name: "www-authenticate")?.contains(#"error="insufficient_user_authentication""#) == true)
            #expect(script.text.contains("insufficient_user_authentication"), "\(script.text)")
            // nginx's check, from a trusted proxy: 401 with the same challenge.
            let check = try await visit.send(
                site.url("/auth/check"), headers: [("X-Forwarded-Host", "127.0.0.1:\(site.port)"), ("X-Original-URI", "/billing/invoices")], cookies: ["siwa_session": session]
            )
            #expect(check.status == 401 && check.headers.first(name: "www-authenticate")?.contains("max_age=8") == true, "\(check.status)")
            // Elsewhere the session still passes as it is.
            #expect(try await visit.send(site.url("/home"), headers: navigation, cookies: ["siwa_session": session]).status == 200)

            // Signing in again through the button comes back to the page, which now passes.
            let renewing = ContinuousClock.now
            let renewed = try await visit.signIn(site, user: ada, start: button)
            #expect(renewed.returnedTo == page, "\(renewed.returnedTo ?? "nowhere")")
            let through = try await visit.send(page, headers: navigation, cookies: ["siwa_session": renewed.session])
            if ContinuousClock.now - renewing < .seconds(8) {
                #expect(through.status == 200)
                let echoed = try through.echoed()
                #expect(echoed.values("x-auth-request-user") == [ada.sub])
                // The app is told when: the sign-in just made, in the header and in the assertion.
                let said = echoed.values("x-siwa-auth-time").first.flatMap(Double.init)
                #expect(said.map { abs($0 - Date().timeIntervalSince1970) < 60 } == true, "\(echoed.values("x-siwa-auth-time"))")
                let assertion = try #require(echoed.values("x-siwa-assertion").first)
                let claims = try BytePathTests.claims(ofJWT: assertion)
                #expect((claims["auth_time"] as? NSNumber)?.doubleValue == said, "\(claims)")
            }
        }
    }

    @Test("generated checks (nginx's /auth/check, Traefik's /auth/forward; navigations, scripts, fetches, languages, forwarded methods and URIs) for a person memory holds whose sign-in is too old: the byte path answers exactly as the handlers do (the page with its button back to the original URL, or 401 with RFC 9470's challenge), and a path without the rule still passes")
    func checksFromMemoryAgree() async throws {
        let rules = #"[{"paths": ["^/billing/"], "policy": "allow", "max_auth_age": 1}]"#
        try await LocalSite.run(settings: ["access_rules": rules, "trusted_proxies": "127.0.0.1", "check_cache_seconds": "600"]) { site in try await Visit.withClient { visit in
            let session = try await visit.signIn(site, user: site.user("Ada")).session
            try await Task.sleep(for: .milliseconds(1_100))
            let kinds: [(name: String, lines: [String])] = [
                ("navigation", ["Accept: text/html,application/xhtml+xml", "Sec-Fetch-Mode: navigate"]),
                ("html, no fetch metadata", ["Accept: text/html"]),
                ("fetch", ["Accept: text/html", "Sec-Fetch-Mode: cors"]),
                ("json", ["Accept: application/json"]),
                ("xhr", ["Accept: text/html", "X-Requested-With: XMLHttpRequest"]),
                ("nothing", []),
            ]
            let languages: [String?] = [nil, "zh-CN,zh;q=0.9", "en-GB"]
            let uris = ["/billing/invoices", "/billing/invoices?year=2026&q=a%20b", "/billing/", "/home"]
            var generator = SplitMix64(seed: 9470)
            var fromMemory = 0
            for round in 0..<40 {
                let forward = Bool.random(using: &generator)
                let kind = kinds.randomElement(using: &generator) ?? kinds[0]
                let language = languages.randomElement(using: &generator) ?? nil
                let uri = uris.randomElement(using: &generator) ?? uris[0]
                let method = ["GET", "GET", "HEAD", "POST"].randomElement(using: &generator) ?? "GET"
                var lines = kind.lines + ["Cookie: siwa_session=\(session)"]
                if let language { lines.append("Accept-Language: \(language)") }
                lines += forward
                    ? ["X-Forwarded-Method: \(method)", "X-Forwarded-Proto: https", "X-Forwarded-Host: app.example", "X-Forwarded-Uri: \(uri)"]
                    : ["X-Forwarded-Host: app.example", "X-Original-URI: \(uri)", "X-Original-Method: \(method)"]
                let path = forward ? "/auth/forward" : "/auth/check"
                let what = "round \(round): \(path) \(method) \(uri) \(kind.name) \(language ?? "no language")"
                let counter = forward ? "forward" : "check"
                let before = try await BytePathTests.counted(counter, site, visit)
                let handlers = try await RawSocket.send(port: site.port, path: path, lines: lines + [DoorTests.toTheHandlers])
                let bytes = try await RawSocket.send(port: site.port, path: path, lines: lines)
                let answered = try await BytePathTests.counted(counter, site, visit) - before
                #expect(answered <= 1, "\(what): the handlers' request was counted as the byte path's")
                fromMemory += answered
                #expect(bytes.status == handlers.status, "\(what)")
                #expect(bytes.fields == handlers.fields, "\(what): other headers from the byte path\n\(bytes.head)\n\(handlers.head)")
                #expect(bytes.body == handlers.body, "\(what): another body from the byte path")
                // What the proxy passes on.
                if uri == "/home" {
                    #expect(bytes.status == (forward ? 200 : 202), "\(what)")
                    continue
                }
                #expect(bytes.status == 401, "\(what)")
                #expect(bytes.value("www-authenticate")?.contains(#"error="insufficient_user_authentication""#) == true && bytes.value("www-authenticate")?.contains("max_age=1") == true, "\(what)")
                let navigation = forward && (method == "GET" || method == "HEAD") && (kind.name == "navigation" || kind.name == "html, no fetch metadata")
                if navigation {
                    #expect(bytes.body.contains("Sign in again to go on") || bytes.body.contains("请重新登录后继续"), "\(what)")
                    let rd = bytes.body.firstMatch(of: /href="[^"]*\/auth\/apple\?rd=([^"]*)"/).map { String($0.1).removingPercentEncoding ?? "" }
                    #expect(rd == "https://app.example" + uri, "\(what): the button comes back to \(rd ?? "nowhere")")
                } else if forward {
                    #expect(bytes.body.contains("insufficient_user_authentication"), "\(what): \(bytes.body)")
                } else {
                    #expect(bytes.body.isEmpty, "\(what): nginx's check has no body")
                }
            }
            #expect(fromMemory >= 20, "only \(fromMemory) of 40 checks were answered from memory")
        } }
    }

    @Test("siwa rules test says the rule's max_auth_age for a person it lets in")
    func rulesTestSaysIt() async throws {
        try await withScratchDirectory("siwa-step-up-rules") { directory in
            let file = directory.appendingPathComponent("siwa.json")
            try Data(#"{"access_rules": \#(Self.rules), "allowed_emails": ["ada@example.com"]}"#.utf8).write(to: file)
            let store = ["--config", file.path, "--db", directory.appendingPathComponent("siwa.sqlite").path]
            let (verdict, output) = try await AccessRulesEndToEndTests.rulesTest(["https://app.example.com/billing/x", "--email", "ada@example.com"], store: store)
            #expect(verdict.verdict == "allow" && verdict.rule == "0", "\(output)")
            #expect(output.contains("max_auth_age: 8 s"), "\(output)")
            let (other, otherOutput) = try await AccessRulesEndToEndTests.rulesTest(["https://app.example.com/home", "--email", "ada@example.com"], store: store)
            #expect(other.verdict == "allow" && !otherOutput.contains("max_auth_age"), "\(otherOutput)")
        }
    }
}
