import AppleIDEmulator
import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
// The two instances get a database of their own on the test server (another test's rows or NOTIFYs must not reach
// them): made and dropped with the client SignInServer's store is built on, as the store tests make theirs.
import PostgresNIO
import TestSupport
import Testing

/// Groups and access rules (issue 27) as an operator meets them outside a browser: `siwa rules test` on a
/// configuration whose rules overlap, and `siwa groups add` run against the database of two `siwa serve` instances
/// sharing PostgreSQL. The built `siwa` binary runs as an operator runs it; the instances are its own processes on
/// free loopback ports, stopped by their pids.
@Suite("Access rules end to end: siwa rules test, and siwa groups on two instances sharing PostgreSQL")
struct AccessRulesEndToEndTests {
    /// What `siwa rules test` said: the deciding rule as it names it (`2`, `skip_auth_routes[0]` or `global`), the
    /// verdict, the person's groups when a person was given, and its exit status.
    struct RulesVerdict: Equatable, CustomStringConvertible {
        var rule: String?
        var verdict: String?
        var groups: String?
        var status: Int32

        var description: String { "rule \(rule ?? "?"), verdict \(verdict ?? "?"), groups \(groups ?? "-"), exit \(status)" }
    }

    /// Runs the built `siwa` with `arguments` and returns how it ended.
    static func siwa(_ arguments: [String]) async throws -> ChildProcess.Outcome {
        // 120 s: a command is quick, but under the full suite's load (and a build beside it) one ran past 30 s.
        try await ChildProcess.run(ChildProcess.siwaExecutable, arguments: arguments, environment: [:], timeLimit: .seconds(120))
    }

    /// `siwa rules test URL …` read back.
    static func rulesTest(_ arguments: [String], store: [String]) async throws -> (RulesVerdict, String) {
        let run = try await siwa(["rules", "test"] + arguments + store)
        let lines = run.stdout.split(separator: "\n").map(String.init)
        let decided = lines.first { $0.hasPrefix("decided by ") }
        let rule = decided?.firstMatch(of: /^decided by (?:rule )?([^:]+):/).map { String($0.1) }
        let verdict = lines.first { $0.hasPrefix("verdict: ") }.map { String($0.dropFirst("verdict: ".count)) }
        let groups = lines.first { $0.hasPrefix("groups: ") }.map { String($0.dropFirst("groups: ".count)) }
        return (RulesVerdict(rule: rule, verdict: verdict, groups: groups, status: run.status), "stdout:\n\(run.stdout)\nstderr:\n\(run.stderr)")
    }

    @Test("siwa rules test on overlapping rules: the first rule that matches decides, named by its index (skip_auth_routes first, global when none); the verdict is printed; exit 0 for public and allow, 1 for deny and sign-in; groups from the store count beside the configuration's")
    func rulesTestCommand() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-rules-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // Every request below is matched by more than one of these: only the order says which decides. (An upstream,
        // because skip_auth_routes are for the built-in proxy.)
        let configuration = """
            {
              "upstream": "http://127.0.0.1:3000",
              "skip_auth_routes": ["GET=^/status$"],
              "access_rules": [
                {"paths": ["^/health$"], "policy": "public"},
                {"hosts": ["grafana.example.com"], "paths": ["^/admin/"], "policy": "allow", "groups": ["admins"]},
                {"hosts": ["*.example.com"], "methods": ["POST", "DELETE"], "policy": "deny"},
                {"hosts": ["grafana.example.com"], "policy": "allow", "email_domains": ["example.com"]},
                {"paths": ["^/admin/"], "policy": "deny"}
              ],
              "groups": {"admins": ["ada@example.com"]},
              "allowed_emails": ["grace@example.org"]
            }
            """
        let file = directory.appendingPathComponent("siwa.json")
        try Data(configuration.utf8).write(to: file)
        let store = ["--config", file.path, "--db", directory.appendingPathComponent("siwa.sqlite").path]

        let cases: [(arguments: [String], expected: RulesVerdict)] = [
            // Rule 0 comes before the host rules that also match grafana.example.com.
            (["https://grafana.example.com/health"], RulesVerdict(rule: "0", verdict: "public", status: 0)),
            // The path as the door reads it: the dot-segments go before the rules are asked.
            (["https://grafana.example.com/admin/../health"], RulesVerdict(rule: "0", verdict: "public", status: 0)),
            (["https://docs.example.com/status"], RulesVerdict(rule: "skip_auth_routes[0]", verdict: "public", status: 0)),
            (["https://grafana.example.com/admin/users", "--email", "ada@example.com"], RulesVerdict(rule: "1", verdict: "allow", groups: "admins", status: 0)),
            // The global policy names Grace, and rule 3 would not, but rule 1 comes first.
            (["https://grafana.example.com/admin/users", "--email", "grace@example.org"], RulesVerdict(rule: "1", verdict: "deny", groups: "none", status: 1)),
            // Rule 3 would let Ada in; the method rule before it does not.
            (["https://grafana.example.com/dashboards/new", "--email", "ada@example.com", "--method", "POST"], RulesVerdict(rule: "2", verdict: "deny", groups: "admins", status: 1)),
            (["https://grafana.example.com/dashboards/new", "--email", "ada@example.com"], RulesVerdict(rule: "3", verdict: "allow", groups: "admins", status: 0)),
            (["https://grafana.example.com/dashboards/new", "--email", "lilei@example.cn"], RulesVerdict(rule: "3", verdict: "deny", groups: "none", status: 1)),
            // Ada's group opens /admin/ on grafana only: elsewhere rule 4 closes it to her too.
            (["https://docs.example.com/admin/settings", "--email", "ada@example.com"], RulesVerdict(rule: "4", verdict: "deny", groups: "admins", status: 1)),
            (["https://docs.example.com/guide/intro", "--email", "grace@example.org"], RulesVerdict(rule: "global", verdict: "allow", groups: "none", status: 0)),
            (["https://docs.example.com/guide/intro", "--sub", "000456.0f1e2d3c4b5a69788796a5b4c3d2e1f0.5678", "--email", "lilei@example.cn"], RulesVerdict(rule: "global", verdict: "deny", groups: "none", status: 1)),
            (["https://docs.example.com/guide/intro"], RulesVerdict(rule: "global", verdict: "sign-in", status: 1)),
            (["https://grafana.example.com/admin/users"], RulesVerdict(rule: "1", verdict: "sign-in", status: 1)),
        ]
        for (arguments, expected) in cases {
            let (seen, output) = try await Self.rulesTest(arguments, store: store)
            #expect(seen == expected, "siwa rules test \(arguments.joined(separator: " ")):\n\(output)")
        }

        // A membership kept in the store (`siwa groups add`) joins the configuration's: Grace is now let in by rule 1.
        let added = try await Self.siwa(["groups", "add", "admins", "grace@example.org"] + store)
        #expect(added.status == 0, "\(added.stderr)")
        let (grace, output) = try await Self.rulesTest(["https://grafana.example.com/admin/users", "--email", "grace@example.org"], store: store)
        #expect(grace == RulesVerdict(rule: "1", verdict: "allow", groups: "admins", status: 0), "\(output)")
        let listed = try await Self.siwa(["groups", "list", "admins"] + store)
        #expect(listed.status == 0, "\(listed.stderr)")
        let members = listed.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(members.contains { $0.hasPrefix("ada@example.com") && $0.contains("config") && !$0.contains("store") }, "\(listed.stdout)")
        #expect(members.contains { $0.hasPrefix("grace@example.org") && $0.contains("store") }, "\(listed.stdout)")
    }

    @Test("siwa groups add against the database of two instances sharing PostgreSQL: a check that was 403 on the other instance is 202 within a second, with X-Auth-Request-Groups; siwa groups remove turns it back to 403 as fast")
    func groupsAddReachesTheOtherInstance() async throws {
        try await Self.withFreshPostgresDatabase { url in
            let key = Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
            // Groups are polled every check_cache_seconds: at 600 only PostgreSQL's NOTIFY can bring a change within
            // a second. Members of ops alone may pass where no rule decides.
            let settings: [String: String?] = ["db": url, "data_key": key, "check_cache_seconds": "600", "allowed_groups": "ops"]
            try await LocalSite.runProcess(settings: settings) { a, _ in
                try await LocalSite.runProcess(settings: settings) { b, _ in
                    try await Visit.withClient { visit in
                        let ada = a.user("Ada")
                        let session = try await visit.signIn(a, user: ada).session
                        func check(_ site: LocalSite) async throws -> Visit.Answer {
                            try await visit.send(site.url("/auth/check"), cookies: ["siwa_session": session])
                        }
                        #expect(try await check(a).status == 403)
                        #expect(try await check(b).status == 403, "the session made on A is known to B, and Ada is in no group yet")

                        let store = ["--db", url, "--data-key", key]
                        let added = try await Self.siwa(["groups", "add", "ops", ada.email] + store)
                        #expect(added.status == 0, "\(added.stdout)\(added.stderr)")
                        // Within 10 s, where polling would take check_cache_seconds (600): only NOTIFY brings it (1 s once passed
                        // with the full suite's load before a check answered).
                        let letIn = try await Self.firstAnswer(within: .seconds(10), status: 202) { try await check(b) }
                        #expect(letIn.status == 202, "siwa groups add was not in force on B within 10 s")
                        #expect(letIn.headers["X-Auth-Request-Groups"] == ["ops"])
                        #expect(letIn.headers["X-Auth-Request-User"] == [ada.sub])
                        #expect(try await check(a).status == 202)

                        let removed = try await Self.siwa(["groups", "remove", "ops", ada.email] + store)
                        #expect(removed.status == 0, "\(removed.stdout)\(removed.stderr)")
                        let turnedAway = try await Self.firstAnswer(within: .seconds(10), status: 403) { try await check(b) }
                        #expect(turnedAway.status == 403, "siwa groups remove was not in force on B within 10 s")
                    }
                }
            }
        }
    }

    /// Asks `ask` until it answers `status` or `time` has passed since the first ask; the last answer.
    static func firstAnswer(within time: Duration, status: Int, _ ask: () async throws -> Visit.Answer) async throws -> Visit.Answer {
        let deadline = ContinuousClock.now + time
        var answer = try await ask()
        while answer.status != status, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
            answer = try await ask()
        }
        return answer
    }

    /// Runs `body` with the URL of a database of its own on the PostgreSQL server `scripts/test` starts
    /// (`SIWA_TEST_POSTGRES_URL`), dropped after. The server is held shared meanwhile (`PostgresGate`): the store
    /// tests' restart of it waits for the end.
    /// `exclusive`: the test restarts the server, so no other test may use it meanwhile.
    static func withFreshPostgresDatabase(exclusive: Bool = false, _ body: (String) async throws -> Void) async throws {
        guard let text = ProcessInfo.processInfo.environment["SIWA_TEST_POSTGRES_URL"], !text.isEmpty,
            var server = URLComponents(string: text), let host = server.host, let user = server.user
        else {
            throw EndToEndError("SIWA_TEST_POSTGRES_URL is not a postgres://user@host:port/db URL: run the tests with ./scripts/test, which starts a throwaway PostgreSQL and exports it")
        }
        var logger = Logger(label: "test.postgres")
        logger.logLevel = .critical
        let adminDatabase = server.path.hasPrefix("/") ? String(server.path.dropFirst()) : server.path
        var configuration = PostgresClient.Configuration(
            host: host, port: server.port ?? 5432, username: user, password: server.password, database: adminDatabase.isEmpty ? user : adminDatabase, tls: .disable
        )
        configuration.options.connectTimeout = .seconds(3)
        let admin = PostgresClient(configuration: configuration, backgroundLogger: logger)
        let name = "siwa_rules_" + UUID().uuidString.prefix(8).lowercased()
        server.path = "/" + name
        guard let url = server.string else { throw EndToEndError("no URL for database \(name) on \(text)") }
        try await PostgresGate.shared.with(exclusive: exclusive) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await admin.run() }
                defer { group.cancelAll() }
                try await admin.query("CREATE DATABASE \(unescaped: name)", logger: logger)
                let result: Result<Void, any Error>
                do {
                    result = .success(try await body(url))
                } catch {
                    result = .failure(error)
                }
                // WITH (FORCE) ends the connections the instances may still hold.
                _ = try? await admin.query("DROP DATABASE IF EXISTS \(unescaped: name) WITH (FORCE)", logger: logger)
                try result.get()
            }
        }
    }
}

/// The same in real Chromium, sharing the browser suite's browser: nginx with two `location`s guarded differently,
/// Traefik and Caddy with rules by host, and `siwa serve --upstream` with a `public` rule and a group rule; a person in
/// the group reaches the app, which is told their groups, and a person outside gets siwa's 403 page naming them.
extension BrowserSignInTests {
    @Suite("Access rules end to end in Chromium: nginx, Traefik, Caddy and --upstream")
    struct AccessRulesEndToEndInChromium {
        @Test("nginx, /admin/ guarded by /auth/check?allowed_groups=admins and /finance/ by an access rule on its path: each person reaches the location of their group, the app sees X-Auth-Request-Groups and the groups claim, and the other location shows the 403 page naming them")
        func nginxTwoLocations() async throws {
            let e2e = try EndToEnd.current()
            let browser = e2e.browser
            try await e2e.startClean()
            try await withEchoUpstream { app in
                try await LocalSite.run(settings: [
                    "access_rules": #"[{"paths": ["^/finance/"], "policy": "allow", "groups": ["finance"]}]"#,
                    "groups": #"{"admins": ["ada@example.com"], "staff": ["@example.com"], "finance": ["grace@example.org"]}"#,
                ]) { site in
                    let ada = site.user("Ada")
                    let grace = site.user("Grace")
                    try await withNginx(configuration: { port in Self.nginxServer(port: port, siwa: site.port, app: app) }) { nginx in
                        let admin = nginx.url("/admin/users")
                        let finance = nginx.url("/finance/q3")

                        let adaSees = try await Self.signIn(browser, at: admin, query: "?page=2", on: site, as: ada)
                        #expect(adaSees.path == "/admin/users?page=2", "\(nginx.logs())")
                        #expect(adaSees.values("x-auth-request-user") == [ada.sub])
                        #expect(adaSees.values("x-auth-request-groups") == ["admins,staff"], "sorted, comma-separated")
                        let claims = try await BrowserSignInTests.verifiedWithPyJWT(adaSees, site: site, audience: nginx.origin)
                        #expect(claims?["groups"] as? [String] == ["admins", "staff"])
                        // The rule on /finance/ names a group Ada is not in.
                        try await browser.open(finance)
                        try await Self.expectDenied(browser, naming: ada)

                        try await browser.deleteAllCookies()
                        let graceSees = try await Self.signIn(browser, at: finance, query: "", on: site, as: grace)
                        #expect(graceSees.path == "/finance/q3")
                        #expect(graceSees.values("x-auth-request-user") == [grace.sub])
                        #expect(graceSees.values("x-auth-request-groups") == ["finance"])
                        // allowed_groups=admins narrows this location's check: the rules alone would let Grace in.
                        try await browser.open(admin)
                        try await Self.expectDenied(browser, naming: grace)
                    }
                }
            }
            try await e2e.startClean()
        }

        /// An nginx `server` on `port` in front of the app on `app`, with two protected locations: `/admin/` asks
        /// `/auth/check?allowed_groups=admins`, `/finance/` asks `/auth/check` alone (the access rules decide on the
        /// path nginx passes in `X-Original-URI`). Each turned-away request goes to `/auth/forward` with the same
        /// narrowing, so that a browser is sent to the sign-in and a person outside gets siwa's 403 page (without
        /// it, `/auth/forward` would let through whom the check refused, and nginx would show an empty page).
        static func nginxServer(port: Int, siwa: Int, app: Int) -> String {
            func check(_ name: String, query: String) -> String {
                """
                    location = /\(name) {
                        internal;
                        proxy_pass http://127.0.0.1:\(siwa)/auth/check\(query);
                        proxy_pass_request_body off;
                        proxy_set_header Content-Length "";
                        proxy_set_header X-Forwarded-Proto $scheme;
                        proxy_set_header X-Forwarded-Host $http_host;
                        proxy_set_header X-Original-URI $request_uri;
                        proxy_set_header X-Original-Method $request_method;
                    }

                """
            }
            func forward(_ name: String, query: String) -> String {
                // The `?` at the end of the rewrite keeps the request's own query out of siwa's.
                """
                    location @\(name) {
                        rewrite ^ /auth/forward\(query)? break;
                        proxy_method GET;
                        proxy_pass_request_body off;
                        proxy_set_header Content-Length "";
                        proxy_set_header X-Forwarded-Method $request_method;
                        proxy_set_header X-Forwarded-Proto $scheme;
                        proxy_set_header X-Forwarded-Host $http_host;
                        proxy_set_header X-Forwarded-Uri $request_uri;
                        proxy_redirect off;
                        proxy_pass http://127.0.0.1:\(siwa);
                    }

                """
            }
            func protected(_ prefix: String, check: String, forward: String) -> String {
                """
                    location \(prefix) {
                        auth_request /\(check);
                        error_page 401 403 = @\(forward);
                        auth_request_set $siwa_user $upstream_http_x_auth_request_user;
                        auth_request_set $siwa_groups $upstream_http_x_auth_request_groups;
                        auth_request_set $siwa_assertion $upstream_http_x_siwa_assertion;
                        proxy_set_header X-Auth-Request-User $siwa_user;
                        proxy_set_header X-Auth-Request-Groups $siwa_groups;
                        proxy_set_header X-Siwa-Assertion $siwa_assertion;
                        proxy_pass http://127.0.0.1:\(app);
                    }

                """
            }
            return "server {\n    listen 127.0.0.1:\(port);\n"
                + check("_siwa_check", query: "") + check("_siwa_check_admins", query: "?allowed_groups=admins")
                + forward("siwa", query: "") + forward("siwa_admins", query: "?allowed_groups=admins")
                + protected("/admin/", check: "_siwa_check_admins", forward: "siwa_admins") + protected("/finance/", check: "_siwa_check", forward: "siwa")
                + "}\n"
        }

        @Test("Traefik forwardAuth and Caddy forward_auth with rules by host (app1 for team1, app2 for team2, one cookie for both): each person is let into the app of their team, with X-Auth-Request-Groups, and gets the 403 page naming them at the other")
        func traefikAndCaddyRulesByHost() async throws {
            let e2e = try EndToEnd.current()
            let browser = e2e.browser
            try await e2e.startClean()
            // siwa reached as auth.siwa.localhost, its session cookie for every *.siwa.localhost (Chromium sends those
            // names to loopback, RFC 6761), the apps on app1. and app2. behind the same proxy.
            let settings: [String: String?] = [
                "public_url": "http://auth.siwa.localhost:{port}", "cookie_domain": ".siwa.localhost", "allowed_redirect_domains": ".siwa.localhost",
                "access_rules": #"[{"hosts": ["app1.siwa.localhost"], "policy": "allow", "groups": ["team1"]}, {"hosts": ["app2.siwa.localhost"], "policy": "allow", "groups": ["team2"]}]"#,
                "groups": #"{"team1": ["grace@example.org"], "team2": ["lilei@example.cn"]}"#,
            ]
            try await withEchoUpstream { app in
                try await LocalSite.run(settings: settings) { site in
                    let grace = site.user("Grace")
                    let lilei = site.user("李")
                    let copied = "X-Auth-Request-User X-Auth-Request-Email X-Auth-Request-Groups X-Siwa-Assertion"
                    // No cookie of an earlier test on *.siwa.localhost.
                    try await browser.open(site.url("/"))
                    try await browser.deleteAllCookies()

                    try await withTraefik(dynamicConfiguration: { _ in
                        """
                        http:
                          routers:
                            app: {rule: "PathPrefix(`/`)", middlewares: [siwa], service: app}
                          middlewares:
                            siwa:
                              forwardAuth:
                                address: "http://127.0.0.1:\(site.port)/auth/forward"
                                authResponseHeaders: [\(copied.split(separator: " ").joined(separator: ", "))]
                          services:
                            app: {loadBalancer: {servers: [{url: "http://127.0.0.1:\(app)"}]}}
                        """
                    }) { traefik in
                        let app1 = "http://app1.siwa.localhost:\(traefik.port)/wiki/start"
                        let seen = try await Self.signIn(browser, at: app1, query: "?rev=3", on: site, as: grace)
                        #expect(seen.path == "/wiki/start?rev=3", "\(traefik.logs())")
                        #expect(seen.values("x-auth-request-user") == [grace.sub])
                        #expect(seen.values("x-auth-request-groups") == ["team1"])
                        let claims = try await Self.assertionClaims(seen, site: site)
                        #expect(claims["aud"] as? String == "http://app1.siwa.localhost:\(traefik.port)")
                        #expect(claims["groups"] as? [String] == ["team1"])
                        // The same session on the other host: the rule for app2 names team2.
                        try await browser.open("http://app2.siwa.localhost:\(traefik.port)/wiki/start")
                        try await Self.expectDenied(browser, naming: grace)
                    }

                    // Signed out everywhere under siwa.localhost (the page shown is app2's), then Li Lei through Caddy.
                    try await browser.deleteAllCookies()
                    try await withCaddy(configuration: { port in
                        """
                        http://app1.siwa.localhost:\(port), http://app2.siwa.localhost:\(port) {
                            forward_auth 127.0.0.1:\(site.port) {
                                uri /auth/forward
                                copy_headers \(copied)
                            }
                            reverse_proxy 127.0.0.1:\(app)
                        }
                        """
                    }) { caddy in
                        let app2 = "http://app2.siwa.localhost:\(caddy.port)/notes"
                        let seen = try await Self.signIn(browser, at: app2, query: "", on: site, as: lilei)
                        #expect(seen.path == "/notes", "\(caddy.logs())")
                        #expect(seen.values("x-auth-request-user") == [lilei.sub])
                        #expect(seen.values("x-auth-request-groups") == ["team2"])
                        try await browser.open("http://app1.siwa.localhost:\(caddy.port)/notes")
                        try await Self.expectDenied(browser, naming: lilei)
                    }
                    try await browser.deleteAllCookies()
                }
            }
            try await e2e.startClean()
        }

        @Test("siwa serve --upstream with a public rule (^/health$), a skip_auth_routes entry (GET=^/status$) and a group rule (^/ops/ for ops): /health and /status reach the app without a sign-in and without identity, forged or a signed-in person's, on both carriers; a member reaches /ops/ with X-Auth-Request-Groups, a non-member gets the 403 page naming them, and a person in no group gets no groups header even when forging one")
        func builtInProxyPublicAndGroupRules() async throws {
            let e2e = try EndToEnd.current()
            let browser = e2e.browser
            try await e2e.startClean()
            try await withEchoUpstream { app in
                let settings = UpstreamProxyTests.settings(upstream: "http://127.0.0.1:\(app)", [
                    "access_rules": #"[{"paths": ["^/health$"], "policy": "public"}, {"paths": ["^/ops/"], "policy": "allow", "groups": ["ops"]}]"#,
                    "groups": #"{"ops": ["ada@example.com"]}"#,
                    // The older shorthand for a public rule, read ahead of access_rules.
                    "skip_auth_routes": "GET=^/status$",
                ])
                try await LocalSite.run(settings: settings) { site in
                    let ada = site.user("Ada")
                    let grace = site.user("Grace")
                    let lilei = site.user("李")

                    // No sign-in for the public path: the app answers at once, told of no one.
                    try await browser.open(site.url("/health"))
                    #expect(try await browser.currentURL() == site.url("/health"))
                    #expect(Self.identitySeen(try await Self.echoed(browser)).isEmpty)
                    // Anchored: a path below it is not public.
                    try await browser.open(site.url("/health/details"))
                    try await browser.waitForPage(site.emulatorOrigin + "/auth/authorize")

                    let board = site.url("/ops/board")
                    let adaSees = try await Self.signIn(browser, at: board, query: "?view=all", on: site, as: ada)
                    #expect(adaSees.path == "/ops/board?view=all")
                    #expect(adaSees.values("x-auth-request-user") == [ada.sub])
                    #expect(adaSees.values("x-auth-request-groups") == ["ops"])
                    #expect(try await Self.assertionClaims(adaSees, site: site)["groups"] as? [String] == ["ops"])
                    // Signed in, the public path still carries no identity.
                    try await browser.open(site.url("/health"))
                    #expect(Self.identitySeen(try await Self.echoed(browser)).isEmpty)

                    try await browser.deleteAllCookies()
                    try await browser.open(board)
                    try await Self.consent(browser, on: site, as: grace)
                    try await browser.waitForPage(board)
                    try await Self.expectDenied(browser, naming: grace)
                    try await browser.deleteAllCookies()

                    // Forged identity, from a client that is not a browser, on each carrier: the byte path (a GET it can
                    // pass from memory) and the handlers (a header outside the byte path's subset sends it, and the rest
                    // of its connection, there). Each carrier has a client of its own, so no connection mixes them.
                    let (adaSession, lileiSession) = try await Visit.withClient { visit in
                        (try await visit.signIn(site, user: ada).session, try await visit.signIn(site, user: lilei).session)
                    }
                    for (carrier, extra) in [("byte path", [(String, String)]()), ("handlers", [UpstreamProxyTests.throughTheCodecs])] {
                        try await Visit.withClient { visit in
                            let before = try await UpstreamProxyTests.fastPathCount(site, visit)
                            for path in ["/health", "/status"] {
                                for cookies in [[:], ["siwa_session": adaSession]] {
                                    let open = try await visit.send(site.url(path), headers: Self.forgedIdentity + extra, cookies: cookies)
                                    #expect(open.status == 200, "\(carrier) \(path)")
                                    #expect(Self.identitySeen(try open.echoed()).isEmpty, "\(carrier) \(path), signed in: \(!cookies.isEmpty)")
                                }
                            }
                            // Li Lei is in no group: let in where no rule decides, with no groups header whatever she
                            // sends, and not let into /ops/ by a groups header of her own. Twice: the second time her
                            // session is in memory.
                            for _ in 0..<2 {
                                let docs = try await visit.send(site.url("/docs/intro"), headers: Self.forgedIdentity + extra, cookies: ["siwa_session": lileiSession])
                                #expect(docs.status == 200, "\(carrier)")
                                let seen = try docs.echoed()
                                #expect(seen.values("x-auth-request-user") == [lilei.sub], "\(carrier)")
                                #expect(seen.values("x-auth-request-groups").isEmpty && seen.values("x_auth_request_groups").isEmpty, "\(carrier): \(seen.headers)")
                                #expect(seen.values("x-siwa-assertion").count == 1 && !seen.values("x-siwa-assertion").contains("forged.jwt.value"), "\(carrier)")
                                let ops = try await visit.send(
                                    site.url("/ops/board"), headers: Self.forgedIdentity + extra + [("Accept", "text/html")], cookies: ["siwa_session": lileiSession]
                                )
                                #expect(ops.status == 403, "\(carrier)")
                                #expect(ops.text.contains(lilei.email), "\(carrier): \(ops.text)")
                            }
                            let passedFromMemory = try await UpstreamProxyTests.fastPathCount(site, visit) - before
                            #expect(extra.isEmpty ? passedFromMemory > 0 : passedFromMemory == 0, "\(carrier): \(passedFromMemory) passed from the event loop")
                        }
                    }
                }
            }
            try await e2e.startClean()
        }

        /// Identity a client makes up, under siwa's names and their underscore spellings.
        static let forgedIdentity = [
            ("X-Auth-Request-User", "forged-sub"), ("X-Auth-Request-Email", "mallory@example.com"), ("X-Auth-Request-Groups", "ops,admins"),
            ("X_Auth_Request_Groups", "ops"), ("X-Auth-Request-Preferred-Username", "Mallory"), ("X-Siwa-Private-Email", "false"),
            ("X-Siwa-Assertion", "forged.jwt.value"),
        ]

        /// The headers that reached the app under siwa's identity names (either spelling), by name.
        static func identitySeen(_ echoed: EchoedRequest) -> [String: [String]] {
            echoed.headers.filter { name, _ in
                let dashed = name.replacingOccurrences(of: "_", with: "-")
                return dashed.hasPrefix("x-auth-request-") || dashed.hasPrefix("x-siwa-")
            }
        }

        // MARK: steps

        /// Opens `url` + `query`, which sends a browser without a session to the sign-in, consents there as `user`,
        /// and returns what the app received once the browser is back on that very URL.
        static func signIn(_ browser: Browser, at url: String, query: String, on site: LocalSite, as user: EmulatorConfiguration.User) async throws -> EchoedRequest {
            try await browser.open(url + query)
            try await consent(browser, on: site, as: user)
            try await browser.waitForPage(url)
            #expect(try await browser.currentURL() == url + query, "back on the very URL asked for")
            return try await echoed(browser)
        }

        /// Answers the emulator's consent page as `user`.
        static func consent(_ browser: Browser, on site: LocalSite, as user: EmulatorConfiguration.User) async throws {
            try await browser.waitForPage(site.emulatorOrigin + "/auth/authorize")
            try await browser.element("input[name=emulator_user][value=\"\(user.sub)\"]").click()
            try await browser.element("#continue").click()
        }

        /// What the echo upstream received, as the browser shows its answer.
        static func echoed(_ browser: Browser) async throws -> EchoedRequest {
            try EchoedRequest(json: ByteBuffer(string: try await browser.element("body").text()))
        }

        /// The browser shows siwa's 403 page, naming `user` by their email, not the app.
        static func expectDenied(_ browser: Browser, naming user: EmulatorConfiguration.User, sourceLocation: SourceLocation = #_sourceLocation) async throws {
            #expect(try await browser.element("h1").text() == "You do not have access", sourceLocation: sourceLocation)
            let who = try await browser.element("#who").text()
            #expect(who.contains(user.email), "the page names \(who)", sourceLocation: sourceLocation)
            #expect(try await browser.elements("#sign-out").count == 1, sourceLocation: sourceLocation)
        }

        /// The claims of the assertion the app received, checked against `site`'s key set (fetched from siwa's port:
        /// this process cannot resolve the *.localhost names Chromium reaches it by).
        static func assertionClaims(_ echoed: EchoedRequest, site: LocalSite, sourceLocation: SourceLocation = #_sourceLocation) async throws -> [String: Any] {
            let token = try #require(echoed.values("x-siwa-assertion").first, "the app received no assertion", sourceLocation: sourceLocation)
            let keySet = try await HTTPClient.shared.execute(HTTPClientRequest(url: "http://127.0.0.1:\(site.port)/.well-known/siwa/jwks.json"), timeout: .seconds(10))
            let check = try AssertionCheck(token, keySet: String(buffer: try await keySet.body.collect(upTo: 1 << 20)))
            #expect(check.signatureVerifies, sourceLocation: sourceLocation)
            return check.claims
        }
    }
}
