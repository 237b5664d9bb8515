import AppleIDEmulator
import Foundation
import NIOCore
import TestSupport
import Testing

extension BrowserSignInTests {
    /// The groups siwa keeps, as real relying parties of its OpenID Provider see them: Apache httpd with
    /// mod_auth_openidc deciding on the `groups` claim, or refused a code by a client limited to a group, and
    /// Authlib reading the claim; signing in through Apple (the emulator) in the browser suite's Chromium. Groups
    /// are changed with the built `siwa groups` while the server runs on the same SQLite store.
    @Suite("OpenID Provider groups with real relying parties")
    struct ProviderGroupsTests {
        @Test("mod_auth_openidc asking for the groups scope, Require claim groups:admins: a member reaches the page and the app sees her groups; a non-member gets Apache's 403; a member removed with siwa groups remove is refused at her next sign-in")
        func apacheRequiresGroupClaim() async throws {
            let e2e = try EndToEnd.current()
            let browser = e2e.browser
            try await e2e.startClean()
            try await Self.withDatabase { database in
                // Ada is an admin in the store, as an operator makes her one; Grace is staff (the configuration's domain).
                #expect(try await Self.siwa(["groups", "add", "admins", "ada@example.com"], database: database).contains("admins: 1 added"))
                let siwaPort = try await FreePorts.reserve(1)[0]
                let secret = "apache-" + UUID().uuidString
                let onlyAdmins = """
                    <Location /protected>
                        AuthType openid-connect
                        Require claim groups:admins
                        OIDCUnAutzAction 403
                        # Signed in but not allowed: 403, where mod_authz_core would answer 401.
                        AuthzSendForbiddenOnFailure On
                    </Location>
                    """
                try await withApacheOIDC(provider: "http://127.0.0.1:\(siwaPort)", clientID: "apache", clientSecret: secret, scope: "openid email groups", directives: onlyAdmins) { apache in
                    let settings: [String: String?] = [
                        "port": String(siwaPort), "db": database, "check_cache_seconds": "1", "groups": #"{"staff": ["@example.org"]}"#,
                        "oidc_clients": try Self.clients([["client_id": "apache", "client_secret": secret, "redirect_uris": [apache.redirectURI], "iss_in_errors": false]]),
                    ]
                    try await LocalSite.run(settings: settings) { site in
                        let ada = site.user("Ada")
                        let grace = site.user("Grace")

                        try await browser.open(apache.protectedURL)
                        try await Self.consent(as: ada, at: site, in: browser)
                        try await browser.waitForPage(apache.protectedURL)
                        let echoed = try EchoedRequest(json: ByteBuffer(string: try await browser.element("body").text()))
                        #expect(echoed.values("oidc_claim_sub") == [ada.sub], "\(apache.logs())")
                        #expect(echoed.values("oidc_claim_groups") == ["admins"])
                        let idToken = try Self.object(echoed.values("oidc_id_token_payload").first ?? "")
                        #expect(idToken["groups"] as? [String] == ["admins"], "\(idToken)")

                        // Grace, in a fresh browser session: signed in, with a groups claim, but not admins.
                        try await browser.deleteAllCookies()
                        try await browser.open(apache.protectedURL)
                        try await Self.consent(as: grace, at: site, in: browser)
                        try await Self.expectForbidden(browser, apache: apache, for: grace)

                        // Ada leaves admins while the server runs; her next sign-in, past check_cache_seconds, is refused.
                        #expect(try await Self.siwa(["groups", "remove", "admins", "ada@example.com"], database: database).contains("admins: 1 removed"))
                        try await browser.deleteAllCookies()
                        // Past the next poll of the groups (every check_cache_seconds, 1 s), with room for the suite's load.
                        try await Task.sleep(for: .milliseconds(3_000))
                        try await browser.open(apache.protectedURL)
                        try await Self.consent(as: ada, at: site, in: browser)
                        try await Self.expectForbidden(browser, apache: apache, for: ada)
                    }
                }
            }
            try await e2e.startClean()
        }

        @Test("a client registered with siwa oidc add-client --allowed-group admins: a member is signed in to mod_auth_openidc; a non-member gets no code, and Apache shows access_denied with siwa's reason")
        func apacheClientLimitedToAGroup() async throws {
            let e2e = try EndToEnd.current()
            let browser = e2e.browser
            try await e2e.startClean()
            try await Self.withDatabase { database in
                let siwaPort = try await FreePorts.reserve(1)[0]
                // A public client (PKCE), so the store's registration needs no secret Apache must know beforehand.
                try await withApacheOIDC(provider: "http://127.0.0.1:\(siwaPort)", clientID: "apache", clientSecret: "", authentication: .publicClient) { apache in
                    _ = try await Self.siwa(["oidc", "add-client", "apache", "--public", "--redirect-uri", apache.redirectURI, "--allowed-group", "admins", "--no-iss-in-errors"], database: database)
                    #expect(try await Self.siwa(["oidc", "list-clients"], database: database).contains("groups: admins"))
                    let settings: [String: String?] = ["port": String(siwaPort), "db": database, "groups": #"{"admins": ["ada@example.com"]}"#]
                    try await LocalSite.run(settings: settings) { site in
                        let ada = site.user("Ada")
                        let grace = site.user("Grace")

                        try await browser.open(apache.protectedURL)
                        try await Self.consent(as: ada, at: site, in: browser)
                        try await browser.waitForPage(apache.protectedURL)
                        let echoed = try EchoedRequest(json: ByteBuffer(string: try await browser.element("body").text()))
                        #expect(echoed.values("oidc_claim_sub") == [ada.sub], "\(apache.logs())")

                        try await browser.deleteAllCookies()
                        try await browser.open(apache.protectedURL)
                        try await Self.consent(as: grace, at: site, in: browser)
                        try await browser.waitForPage(apache.redirectURI)
                        // mod_auth_openidc's error page, naming the provider's error and its reason.
                        let shown = try await browser.element("body").text()
                        #expect(shown.contains("OpenID Connect Provider error: access_denied"), "\(shown)\n\(apache.logs())")
                        #expect(shown.contains("this app signs in members of admins only"), "\(shown)")
                        // What came back to the redirect URI: the error, and no code.
                        func callbacks() -> [String] { Self.accessLog(apache).filter { $0.contains("GET /protected/redirect_uri?") } }
                        try await browser.waitUntil("Apache's access log to show the second callback") { callbacks().count == 2 }
                        #expect(callbacks().last?.contains("error=access_denied") == true, "\(callbacks())")
                        #expect(callbacks().last?.contains("code=") == false, "\(callbacks())")
                        #expect(!Self.accessLog(apache).contains { $0.contains("user=\(grace.sub)") })
                    }
                }
            }
            try await e2e.startClean()
        }

        @Test("Authlib asking for the groups scope: a member's groups in the id_token and from userinfo; a non-member's are an empty array")
        func authlibReadsGroups() async throws {
            let e2e = try EndToEnd.current()
            let browser = e2e.browser
            try await e2e.startClean()
            let siwaPort = try await FreePorts.reserve(1)[0]
            let secret = "authlib-" + UUID().uuidString
            try await withAuthlibRP(provider: "http://127.0.0.1:\(siwaPort)", clientID: "authlib", clientSecret: secret, scope: "openid email profile groups") { rp in
                let settings: [String: String?] = [
                    "port": String(siwaPort), "groups": #"{"admins": ["ada@example.com"], "staff": ["@example.com"]}"#,
                    "oidc_clients": try Self.clients([["client_id": "authlib", "client_secret": secret, "redirect_uris": [rp.redirectURI]]]),
                ]
                try await LocalSite.run(settings: settings) { site in
                    for (user, groups) in [(site.user("Ada"), ["admins", "staff"]), (site.user("Grace"), [])] {
                        try await browser.open(rp.loginURL())
                        try await Self.consent(as: user, at: site, in: browser)
                        try await browser.waitForPage(rp.startURL)
                        try await browser.open(rp.claimsURL)
                        let claims = try Self.object(try await browser.element("body").text())
                        let idToken = claims["id_token"] as? [String: Any] ?? [:]
                        let userinfo = claims["userinfo"] as? [String: Any] ?? [:]
                        #expect(idToken["sub"] as? String == user.sub, "\(claims)\n\(rp.logs())")
                        #expect(idToken["groups"] as? [String] == groups, "\(idToken)")
                        #expect(userinfo["groups"] as? [String] == groups, "\(userinfo)")
                        try await browser.deleteAllCookies()
                    }
                }
            }
            try await e2e.startClean()
        }

        // MARK: steps

        /// A throwaway directory for the SQLite store the server and the `siwa` commands share; its path.
        private static func withDatabase(_ body: (String) async throws -> Void) async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-groups-\(UUID().uuidString)", isDirectory: true)
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            try await body(directory.appendingPathComponent("siwa.sqlite").path)
        }

        /// Runs the built `siwa` on the store at `database`, as an operator does beside a running server; its output.
        private static func siwa(_ arguments: [String], database: String, sourceLocation: SourceLocation = #_sourceLocation) async throws -> String {
            let run = try await ChildProcess.run(ChildProcess.siwaExecutable, arguments: arguments + ["--db", database], environment: [:])
            try #require(run.status == 0, "siwa \(arguments.joined(separator: " ")) exited \(run.status):\n\(run.stderr)\n\(run.stdout)", sourceLocation: sourceLocation)
            return run.stdout
        }

        /// `oidc_clients` as the configuration holds it.
        private static func clients(_ clients: [[String: Any]]) throws -> String {
            String(decoding: try JSONSerialization.data(withJSONObject: clients), as: UTF8.self)
        }

        /// Picks `user` on the emulator's consent page and continues.
        private static func consent(as user: EmulatorConfiguration.User, at site: LocalSite, in browser: Browser) async throws {
            try await browser.waitForPage(site.emulatorOrigin + "/auth/authorize")
            try await browser.element("input[name=emulator_user][value=\"\(user.sub)\"]").click()
            try await browser.element("#continue").click()
        }

        // MARK: checks

        /// Back on Apache's protected page after signing in as `user`, the browser shows Apache's 403 page, not the
        /// app's: the module knew who it was and refused.
        private static func expectForbidden(_ browser: Browser, apache: RunningApacheOIDC, for user: EmulatorConfiguration.User, sourceLocation: SourceLocation = #_sourceLocation) async throws {
            try await browser.waitForPage(apache.protectedURL)
            #expect(try await status(of: browser) == 403, sourceLocation: sourceLocation)
            #expect(try await browser.element("h1").text() == "Forbidden", "\(apache.logs())", sourceLocation: sourceLocation)
            // Apache logs a request once it has answered it.
            try await browser.waitUntil("Apache's access log to show the 403 to \(user.sub)") {
                accessLog(apache).contains { $0.contains("\"GET /protected/ HTTP/1.1\" 403 ") && $0.hasSuffix("user=\(user.sub)") }
            }
        }

        /// The HTTP status of the page the browser shows (Navigation Timing's `responseStatus`).
        private static func status(of browser: Browser) async throws -> Int? {
            try await browser.execute("return performance.getEntriesByType('navigation')[0].responseStatus").number.map { Int($0) }
        }

        /// Apache's access log, a line a request: `127.0.0.1 "GET /path HTTP/1.1" 403 199 user=SUB`.
        private static func accessLog(_ apache: RunningApacheOIDC) -> [String] {
            let text = (try? String(contentsOf: apache.server.directory.appendingPathComponent("access.log"), encoding: .utf8)) ?? ""
            return text.split(separator: "\n").map(String.init)
        }

        /// `json` read as a JSON object; a failed test showing what it was instead.
        private static func object(_ json: String) throws -> [String: Any] {
            try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any], "not a JSON object: \(json.prefix(500))")
        }
    }
}
