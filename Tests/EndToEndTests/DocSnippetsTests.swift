import AppleIDEmulator
import AppleSignIn
import Foundation
import NIOCore
import SignInServer
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Every configuration block the documentation shows (issue 29), taken from the Markdown itself by
/// `DocSnippets` and run as a reader copies it, only ports, paths and `<placeholders>` filled in: the README's
/// quick-start nginx block, Traefik's and Caddy's forward-auth in front of the echo upstream, mod_auth_openidc's
/// blocks in Apache, Authlib's app in Python, Grafana's settings against siwa's endpoints, the access rules example
/// with `siwa rules test`, the systemd unit the operations page points to, and the PyJWT and jwt-kit checks of the
/// assertion (`DocSnippetsTests+Assertion.swift`); and the README's commands, docs/front.md's, the provider page's
/// registration, and docs/access.md's and docs/getting-started.md's, run by the built `siwa` (`DocSnippetsTests+README.swift`,
/// `+Front.swift`, `+Provider.swift`, `+Pages.swift`); docs/apis.md's every block, curl and jq run by `sh`
/// (`+APIs.swift`). A person signs in headlessly through the emulator.
@Suite("The documentation's configuration blocks, run as written")
struct DocSnippetsTests {
    /// A block a page shows, where a reader finds it: the `nth` block in `language` after the text `after`.
    struct Shown: Sendable, CustomStringConvertible {
        let page: String
        let language: String
        let after: String
        var nth = 1

        /// The block's text.
        func text() throws -> String { try fenced().text }
        func fenced() throws -> DocSnippets.Fenced { try DocSnippets.fenced(language, in: page, after: after, nth: nth) }
        var description: String { "the ```\(language) block of \(page) after \(after.debugDescription)" }
    }

    /// Run by `readmeNginx`.
    static let readmeNginx = Shown(page: "README.md", language: "nginx", after: "**Behind nginx**")
    /// Run by `NginxFrontTests.readmeConfiguration` and `.unixSocket`, and `BrowserSignInTests.nginxForwardAuth`.
    static let frontNginx = Shown(page: "docs/front.md", language: "nginx", after: "**nginx** (siwa on")
    /// Run by `NginxFrontTests.unixSocket`.
    static let socketNginx = Shown(page: "docs/front.md", language: "nginx", after: "**nginx on the same machine: a Unix socket**")
    /// Run by `traefikForwardAuth`.
    static let traefik = Shown(page: "docs/front.md", language: "yaml", after: "**Traefik**")
    /// Run by `caddyForwardAuth`.
    static let caddy = Shown(page: "docs/front.md", language: "caddyfile", after: "**Caddy**")
    /// Run by `apacheRelyingParty`, and with the next one by `apacheGroups`.
    static let apache = Shown(page: "docs/provider-apache.md", language: "apache", after: "## The site")
    /// Run by `apacheGroups`.
    static let apacheGroups = Shown(page: "docs/provider-apache.md", language: "apache", after: "## Only a group")
    /// Run by `authlibApp`.
    static let authlib = Shown(page: "docs/provider-authlib.md", language: "python", after: "## The app")
    /// Run by `grafanaSettings`.
    static let grafana = Shown(page: "docs/provider-apps.md", language: "ini", after: "## Grafana")
    /// Run by `BearerProxiesTests`, behind each proxy.
    static let bearerRules = Shown(page: "docs/front.md", language: "json", after: "**Apps and scripts with a token.**")
    /// Run by `accessRulesExample`.
    static let accessRules = Shown(page: "docs/access.md", language: "json", after: "A worked example")

    /// Every block a page shows for a reader to copy into a file: the configuration, and the programs
    /// (`programLanguages`).
    /// Run by `EnvoyExtAuthzTests` (HTTP mode, and with the next two in place of its filter and cluster, gRPC mode).
    static let envoyHTTP = Shown(page: "docs/front.md", language: "yaml", after: "Over HTTP (the listener on 10000")
    static let envoyGRPCFilter = Shown(page: "docs/front.md", language: "yaml", after: "Over gRPC, the same listener")
    static let envoyGRPCCluster = Shown(page: "docs/front.md", language: "yaml", after: "Over gRPC, the same listener", nth: 2)
    static let shown = [readmeNginx, frontNginx, socketNginx, traefik, caddy, envoyHTTP, envoyGRPCFilter, envoyGRPCCluster, bearerRules, apache, apacheGroups, authlib, grafana, accessRules, pyJWT, jwtKit, apisConfiguration, apisSwift, peopleWebhooks, peopleReceiver]

    /// The README's opening commands; checked by `readmeLocalMode`, which runs the first (the second, `./scripts/test`,
    /// is what runs these tests).
    static let readmeOpening = Shown(page: "README.md", language: "sh", after: "# siwa")
    /// Run by `readmeUpstream`.
    static let readmeUpstream = Shown(page: "README.md", language: "sh", after: "**In front of an app**")
    /// Run by `readmeOIDC`.
    static let readmeOIDC = Shown(page: "README.md", language: "sh", after: "**As the OpenID provider of an app**")
    /// Run by `providerRegistrationCommands`; its add-client command by `grafanaSettings` too.
    static let providerRegistration = Shown(page: "docs/provider.md", language: "sh", after: "**Register a client**")
    /// Run by `authlibApp`.
    static let authlibRegistration = Shown(page: "docs/provider-authlib.md", language: "sh", after: "## Register the client")
    /// Its values are the client `apacheRelyingParty` and `apacheGroups` register (through `oidc_clients`: Apache's
    /// port, which the redirect URI names, is known only as Apache starts, with the secret already in its block).
    static let apacheRegistration = Shown(page: "docs/provider-apache.md", language: "sh", after: "## Register the client")
    /// Run by `accessRulesExample`, which compares the output it shows.
    static let rulesTest = Shown(page: "docs/access.md", language: "sh", after: "`siwa rules test` tells which rule decides")
    /// Run by `frontSocket`.
    static let frontSocket = Shown(page: "docs/front.md", language: "sh", after: "**nginx on the same machine: a Unix socket**")
    /// Run by `frontUpstream`.
    static let frontUpstream = Shown(page: "docs/front.md", language: "sh", after: "### The built-in proxy (`--upstream`)")
    /// Run by `accessGroupsCommands`.
    /// docs/people.md's `event_webhooks` and Python receiver, and its `siwa invite create`; run by `peoplePage`.
    static let peopleWebhooks = Shown(page: "docs/people.md", language: "json", after: "## Account events")
    static let peopleReceiver = Shown(page: "docs/people.md", language: "python", after: "Standard Webhooks library")
    static let peopleInvite = Shown(page: "docs/people.md", language: "sh", after: "## Invitations")
    static let groupsCommands = Shown(page: "docs/access.md", language: "sh", after: "Groups come from two places, joined:")
    /// Run by `gettingStartedLocalMode`, which compares the lines it shows.
    static let localModeSession = Shown(page: "docs/getting-started.md", language: "console", after: "## Local mode, step by step")
    /// Run by `gettingStartedAppleMode`.
    static let appleMode = Shown(page: "docs/getting-started.md", language: "sh", after: "## Apple mode")

    /// The command blocks a test runs (```sh, and the ```console session of getting started, its commands after `$ `):
    /// every block of the README, docs/front.md, docs/access.md and docs/getting-started.md, the registrations of
    /// the clients' pages, and docs/apis.md's (`apisCommands`).
    static let commands = [
        readmeOpening, readmeUpstream, readmeOIDC, providerRegistration, authlibRegistration, apacheRegistration, rulesTest, frontSocket, frontUpstream,
        groupsCommands, localModeSession, appleMode, edgeOneCommand, edgeOwnCertificate, peopleInvite,
    ] + apisCommands

    /// The pages every block of which, commands too, a test runs: the README, getting started, the page of siwa in front
    /// of a site, who may enter which app, the OpenID provider's pages, and APIs, apps and scripts.
    static let whollyRun: Set<String> = [
        "README.md", "docs/getting-started.md", "docs/front.md", "docs/access.md", "docs/provider.md", "docs/provider-apache.md", "docs/provider-authlib.md",
        "docs/provider-apps.md", "docs/apis.md",
    ]

    /// The languages of a program a reader copies into their own (Authlib's app, the assertion's verification).
    static let programLanguages: Set<String> = ["python", "py", "swift"]

    /// The languages of configuration a reader copies into a file (the others are commands and their output).
    static let configurationLanguages: Set<String> = ["nginx", "yaml", "yml", "toml", "caddyfile", "apache", "apacheconf", "ini", "systemd", "json", "conf"]

    /// The settings the forward-auth walk-through expects (`NginxFrontTests.walkThrough`): Ada and 李雷 let in, Grace
    /// not; Ada an admin, so the groups header has something to carry.
    static let frontSettings: [String: String?] = ["allowed_emails": "ada@example.com,lilei@example.cn", "groups": #"{"admins": ["ada@example.com"]}"#]

    @Test("every fenced block of README.md and docs/ names its language; every configuration block and every program among them, and every block of the README, docs/getting-started.md, docs/front.md, docs/access.md and the OpenID provider's pages, is one a test runs as written")
    func everyConfigurationBlockIsRun() throws {
        let run = try Self.shown.map { try $0.fenced() }
        let commands = try Self.commands.map { try $0.fenced() }
        #expect(Set((run + commands).map(\.description)).count == run.count + commands.count, "two entries name the same block: \(run + commands)")
        #expect(commands.allSatisfy { $0.language == "sh" || $0.language == "console" }, "\(commands)")
        var configuration: [DocSnippets.Fenced] = []
        for page in try DocSnippets.pages() {
            for block in try DocSnippets.fencedBlocks(in: page) {
                #expect(!block.language.isEmpty, "\(block) names no language: say what it is (```sh, ```nginx, ```text), so no configuration hides among the commands")
                if Self.configurationLanguages.contains(block.language) { configuration.append(block) }
                if Self.programLanguages.contains(block.language) {
                    #expect(run.contains(block), "\(block) is a program no test runs: add it to DocSnippetsTests.shown with a test that runs it")
                }
                if Self.whollyRun.contains(page) {
                    #expect(run.contains(block) || commands.contains(block), "\(block) is a block no test runs on a page whose every block is: add it to DocSnippetsTests.shown or .commands with a test that runs it")
                }
            }
        }
        for block in configuration {
            #expect(run.contains(block), "\(block) is a configuration block no test runs: add it to DocSnippetsTests.shown with a test that runs it")
        }
        // Besides the configuration, `shown` holds the programs run as written (Authlib's app, the assertion's checks).
        #expect(run.allSatisfy { Self.configurationLanguages.contains($0.language) || Self.programLanguages.contains($0.language) }, "\(run)")
        #expect(configuration.count == run.filter { Self.configurationLanguages.contains($0.language) }.count)
        // The systemd unit is a file of its own the operations page points to; `systemdUnit` runs it.
        #expect(try DocSnippets.text(of: "docs/operations.md").contains("`deploy/siwa.service`"))
    }

    // MARK: nginx, Traefik, Caddy

    @Test("the README's quick-start nginx block: a request without a session gets nginx's 401, a person let in reaches the app (a POST with its body too), a person turned away gets 403")
    func readmeNginx() async throws {
        try await withEchoUpstream { app in
            try await LocalSite.run(settings: Self.frontSettings) { site in
                let block = try DocSnippets.substituting(try Self.readmeNginx.text(), ["127.0.0.1:8080": "127.0.0.1:\(site.port)", "127.0.0.1:3000": "127.0.0.1:\(app)"])
                try await withNginx(configuration: { port in NginxFrontTests.server(port: port, block) }) { nginx in
                    try await Visit.withClient { visit in
                        let page = nginx.url("/reports/2026?year=2026&view=a%20b")
                        #expect(try await visit.send(page, headers: [("Accept", "text/html")]).status == 401, "\(nginx.logs())")
                        #expect(try await visit.send(nginx.url("/api/items"), method: .POST, body: #"{"n":1}"#).status == 401)

                        let ada = try await visit.signIn(site, user: site.user("Ada")).session
                        let shown = try await visit.send(page, headers: [("Accept", "text/html")], cookies: ["siwa_session": ada])
                        #expect(shown.status == 200, "\(nginx.logs())")
                        #expect(try shown.echoed().path == "/reports/2026?year=2026&view=a%20b")
                        // The app learns who signed in from siwa's answer; what the client claims under those names never reaches it.
                        let forged = try await visit.send(
                            page, headers: [("Accept", "text/html"), ("X-Auth-Request-User", "someone-else"), ("X-Auth-Request-Groups", "forged")],
                            cookies: ["siwa_session": ada]
                        )
                        #expect(try forged.echoed().values("x-auth-request-user") == [site.user("Ada").sub], "\(nginx.logs())")
                        #expect(try forged.echoed().values("x-auth-request-groups").allSatisfy { !$0.contains("forged") })
                        // Any method passes with a session, its body whole.
                        let posted = try await visit.send(
                            nginx.url("/api/items"), method: .POST, headers: [("Content-Type", "application/json")], cookies: ["siwa_session": ada], body: #"{"n":1}"#
                        )
                        #expect(posted.status == 200, "\(nginx.logs())")
                        #expect(try posted.echoed().method == "POST")
                        #expect(try posted.echoed().bodyBytes == 7)

                        let grace = try await visit.signIn(site, user: site.user("Grace")).session
                        #expect(try await visit.send(page, headers: [("Accept", "text/html")], cookies: ["siwa_session": grace]).status == 403)
                    }
                }
            }
        }
    }

    @Test("docs/front.md's Traefik block (its file provider's middleware, with a router and the app's service beside it): the nginx walk-through through Traefik, and the groups header set from siwa's answer, never the client's")
    func traefikForwardAuth() async throws {
        try await withEchoUpstream { app in
            try await LocalSite.run(settings: Self.frontSettings) { site in
                try await Self.withFrontTraefik(site: site, app: app) { traefik in
                    try await Visit.withClient { visit in
                        try await NginxFrontTests.walkThrough(site: site, proxy: traefik, visit: visit)
                        try await Self.groupsHandedOn(site: site, proxy: traefik, visit: visit)
                    }
                }
            }
        }
    }

    /// docs/front.md's Traefik block with siwa at `site`, and the reader's own router and service beside it, under the
    /// same `http:` as the block's middleware: every path through siwa to the app on port `app`.
    static func withFrontTraefik<T>(site: LocalSite, app: Int, _ body: (RunningProxy) async throws -> T) async throws -> T {
        let middleware = try DocSnippets.substituting(try Self.traefik.text(), ["http://127.0.0.1:8080/": "http://127.0.0.1:\(site.port)/"])
        let routing = """
              routers:
                app:
                  rule: "PathPrefix(`/`)"
                  middlewares: [siwa]
                  service: app
              services:
                app:
                  loadBalancer:
                    servers: [{url: "http://127.0.0.1:\(app)"}]

            """
        return try await withTraefik(dynamicConfiguration: { _ in middleware + routing }, body)
    }

    @Test("docs/front.md's Caddy block (its site address made this Caddy's): the nginx walk-through through Caddy, and the groups header set from siwa's answer, never the client's")
    func caddyForwardAuth() async throws {
        try await withEchoUpstream { app in
            try await LocalSite.run(settings: Self.frontSettings) { site in
                try await Self.withFrontCaddy(site: site, app: app) { caddy in
                    try await Visit.withClient { visit in
                        try await NginxFrontTests.walkThrough(site: site, proxy: caddy, visit: visit)
                        try await Self.groupsHandedOn(site: site, proxy: caddy, visit: visit)
                        // The block takes out every X-Auth-Request-* the client sent, those siwa never sends too.
                        let ada = try await visit.signIn(site, user: site.user("Ada")).session
                        let page = try await visit.send(caddy.url("/"), headers: [("X-Auth-Request-Access-Token", "forged")], cookies: ["siwa_session": ada])
                        #expect(try page.echoed().values("x-auth-request-access-token") == [], "\(caddy.logs())")
                    }
                }
            }
        }
    }

    /// docs/front.md's Caddy block with siwa at `site` and the app on port `app`, its site address made this Caddy's
    /// (known only once its port is chosen: `{port}` stands for it until then).
    static func withFrontCaddy<T>(site: LocalSite, app: Int, _ body: (RunningProxy) async throws -> T) async throws -> T {
        let block = try DocSnippets.substituting(try Self.caddy.text(), [
            "app.example.com {": "http://127.0.0.1:{port} {", "127.0.0.1:8080": "127.0.0.1:\(site.port)", "127.0.0.1:3000": "127.0.0.1:\(app)",
        ])
        return try await withCaddy(configuration: { port in block.replacingOccurrences(of: "{port}", with: String(port)) }, body)
    }

    /// Ada (in admins) and 李雷 (in no group) behind `proxy`, each sending a forged `X-Auth-Request-Groups`: the app
    /// gets Ada's groups from siwa, and nothing for 李雷.
    static func groupsHandedOn(site: LocalSite, proxy: RunningProxy, visit: Visit) async throws {
        let forged = [("Accept", "text/html"), ("X-Auth-Request-Groups", "root")]
        let ada = try await visit.signIn(site, user: site.user("Ada")).session
        let adas = try await visit.send(proxy.url("/team"), headers: forged, cookies: ["siwa_session": ada])
        #expect(adas.status == 200, "\(proxy.logs())")
        #expect(try adas.echoed().values("x-auth-request-groups") == ["admins"], "\(proxy.logs())")
        let lilei = try await visit.signIn(site, user: site.user("李")).session
        let lileis = try await visit.send(proxy.url("/team"), headers: forged, cookies: ["siwa_session": lilei])
        #expect(lileis.status == 200)
        let lileisGroups = try lileis.echoed().values("x-auth-request-groups")
        #expect(lileisGroups == [], "a client's groups reached the app")
    }

    // MARK: Apache with mod_auth_openidc

    /// docs/provider-apache.md's first Apache block with siwa at `siwa`, the client's secret filled in, and Apache's origin
    /// left as `{apache}` (`{apache-encoded}` where the page percent-encodes it) until Apache's port is known.
    static func apacheBlock(siwa: String, secret: String) throws -> String {
        try DocSnippets.substituting(try apache.text(), [
            "https://auth.example.com": siwa,
            "<client_secret>": secret,
            "<random>": UUID().uuidString,
            "https%3A%2F%2Fapp.example.com": "{apache-encoded}",
            "https://app.example.com": "{apache}",
        ])
    }

    /// `block` with Apache's origin in place.
    static func apacheBlock(_ block: String, origin: String) -> String {
        block.replacingOccurrences(of: "{apache-encoded}", with: Visit.formEncode(origin)).replacingOccurrences(of: "{apache}", with: origin)
    }

    /// The client the page's `siwa oidc add-client` registers for Apache (its name, redirect URI and post-logout
    /// redirect URI, on Apache's origin), as `oidc_clients` with `secret`.
    static func apacheClient(_ apache: RunningApacheOIDC, secret: String) throws -> String {
        let words = try DocSnippets.command(in: try apacheRegistration.text(), starting: "siwa oidc add-client")
        let arguments = try siwaArguments(words).map { $0.replacingOccurrences(of: "https://app.example.com", with: apache.origin) }
        try #require(arguments.count > 2, "\(words)")
        func values(_ option: String) -> [String] {
            arguments.indices.dropLast().filter { arguments[$0] == option }.map { arguments[$0 + 1] }
        }
        #expect(
            Set(arguments.filter { $0.hasPrefix("--") }) == ["--redirect-uri", "--post-logout-redirect-uri", "--no-iss-in-errors"], "an option this test does not register: \(arguments)"
        )
        let clients: [[String: Any]] = [[
            "client_id": arguments[2], "client_secret": secret,
            "redirect_uris": values("--redirect-uri"), "post_logout_redirect_uris": values("--post-logout-redirect-uri"),
            "iss_in_errors": !arguments.contains("--no-iss-in-errors"),
        ]]
        return String(decoding: try JSONSerialization.data(withJSONObject: clients), as: UTF8.self)
    }

    /// The arguments `siwa` gets from a page's command: its words after `swift run siwa` (`swift run -c release siwa`:
    /// the built binary stands for either) or `siwa`.
    static func siwaArguments(_ words: [String]) throws -> [String] {
        if words.starts(with: ["swift", "run", "siwa"]) { return Array(words.dropFirst(3)) }
        if words.starts(with: ["swift", "run", "-c", "release", "siwa"]) { return Array(words.dropFirst(5)) }
        try #require(words.first == "siwa", "not a siwa command: \(words)")
        return Array(words.dropFirst())
    }

    @Test("docs/provider-apache.md's client and Apache block in Apache: a person with a siwa session reaches /protected with the claims, and the sign-out URL of its comment ends both sessions through siwa's end-session and comes back to the app")
    func apacheRelyingParty() async throws {
        let siwaPort = try await FreePorts.reserve(1)[0]
        let secret = "app-" + UUID().uuidString
        let block = try Self.apacheBlock(siwa: "http://127.0.0.1:\(siwaPort)", secret: secret)
        try await withApacheOIDC(clientID: "app", relyingParty: { Self.apacheBlock(block, origin: $0) }) { apache in
            try await LocalSite.run(settings: ["port": String(siwaPort), "oidc_clients": try Self.apacheClient(apache, secret: secret)]) { site in
                try await Visit.withClient { visit in
                    let ada = site.user("Ada")
                    let siwaSession = try await visit.signIn(site, user: ada).session
                    var jar = try await Self.signIn(at: apache, site: site, siwaSession: siwaSession, visit: visit)
                    let page = try await visit.send(apache.url("/protected/"), headers: [("Accept", "text/html")], cookies: jar)
                    #expect(page.status == 200, "\(apache.logs())")
                    let echoed = try page.echoed()
                    #expect(echoed.values("oidc_claim_sub") == [ada.sub], "\(echoed.headers)")
                    #expect(echoed.values("oidc_claim_email") == [ada.email])
                    #expect(echoed.values("oidc_claim_name") == ["\(ada.firstName) \(ada.lastName)"])

                    // The sign-out URL the block's comment gives.
                    let comment = try #require(Self.apacheBlock(block, origin: apache.origin).split(separator: "\n").first { $0.hasPrefix("# Sign out: ") })
                    let logout = String(comment.dropFirst("# Sign out: ".count))
                    let ended = try await visit.send(logout, headers: [("Accept", "text/html")], cookies: jar)
                    Self.remember(ended, in: &jar)
                    #expect(ended.status == 302, "\(ended.text)\n\(apache.logs())")
                    let endSession = try #require(ended.location)
                    #expect(endSession.hasPrefix(site.url("/oauth2/end-session?")), "\(endSession)")
                    let done = try await Self.confirmEndSession(endSession, site: site, siwaSession: siwaSession, visit: visit)
                    #expect(done.location?.hasPrefix(apache.url("/")) == true, "\(done.location ?? "none")")
                    // Both sessions are over: Apache sends the person to siwa again, and siwa to its sign-in.
                    let again = try await visit.send(apache.url("/protected/"), headers: [("Accept", "text/html")], cookies: jar)
                    #expect(again.status == 302)
                    #expect(again.location?.hasPrefix(site.url("/oauth2/authorize?")) == true)
                    let authorize = try await visit.send(try #require(again.location), cookies: ["siwa_session": siwaSession])
                    #expect(authorize.location?.hasPrefix(site.url("/auth/apple?")) == true, "\(authorize.status) \(authorize.location ?? "none")")
                }
            }
        }
    }

    @Test("docs/provider-apache.md's groups block after its first Apache block: a member of admins reaches /protected with her groups, a person outside it gets Apache's 403")
    func apacheGroups() async throws {
        let siwaPort = try await FreePorts.reserve(1)[0]
        let secret = "app-" + UUID().uuidString
        let block = try Self.apacheBlock(siwa: "http://127.0.0.1:\(siwaPort)", secret: secret) + "\n" + (try Self.apacheGroups.text())
        try await withApacheOIDC(clientID: "app", relyingParty: { Self.apacheBlock(block, origin: $0) }) { apache in
            let settings: [String: String?] = [
                "port": String(siwaPort), "oidc_clients": try Self.apacheClient(apache, secret: secret), "groups": #"{"admins": ["ada@example.com"]}"#,
            ]
            try await LocalSite.run(settings: settings) { site in
                try await Visit.withClient { visit in
                    let ada = site.user("Ada")
                    let adas = try await Self.signIn(at: apache, site: site, siwaSession: try await visit.signIn(site, user: ada).session, visit: visit)
                    let page = try await visit.send(apache.url("/protected/"), headers: [("Accept", "text/html")], cookies: adas)
                    #expect(page.status == 200, "\(apache.logs())")
                    #expect(try page.echoed().values("oidc_claim_sub") == [ada.sub])
                    #expect(try page.echoed().values("oidc_claim_groups") == ["admins"])

                    let graces = try await Self.signIn(at: apache, site: site, siwaSession: try await visit.signIn(site, user: site.user("Grace")).session, visit: visit)
                    let refused = try await visit.send(apache.url("/protected/"), headers: [("Accept", "text/html")], cookies: graces)
                    #expect(refused.status == 403, "\(refused.status) \(apache.logs())")
                }
            }
        }
    }

    /// A browser with a siwa session opening Apache's /protected: Apache sends it to siwa's authorize, siwa back with
    /// a code (the person is signed in), Apache takes the code. Returns Apache's cookies.
    static func signIn(at apache: RunningApacheOIDC, site: LocalSite, siwaSession: String, visit: Visit) async throws -> [String: String] {
        var jar: [String: String] = [:]
        let start = try await visit.send(apache.url("/protected/"), headers: [("Accept", "text/html")])
        remember(start, in: &jar)
        let authorize = try #require(start.location, "Apache did not send the browser to siwa: \(start.status) \(start.text)\n\(apache.logs())")
        #expect(authorize.hasPrefix(site.url("/oauth2/authorize?")), "\(authorize)")
        let code = try await visit.send(authorize, cookies: ["siwa_session": siwaSession])
        let callback = try #require(code.location, "siwa gave no code: \(code.status) \(code.text)")
        #expect(callback.hasPrefix(apache.url("/protected/redirect_uri?")) && callback.contains("code="), "\(callback)")
        let taken = try await visit.send(callback, headers: [("Accept", "text/html")], cookies: jar)
        remember(taken, in: &jar)
        #expect(taken.status == 302, "\(taken.text)\n\(apache.logs())")
        #expect(jar["mod_auth_openidc_session"] != nil, "\(taken.headers)")
        return jar
    }

    /// Keeps the cookies `answer` sets in `jar` (an emptied one is dropped).
    static func remember(_ answer: Visit.Answer, in jar: inout [String: String]) {
        for line in answer.headers["set-cookie"] {
            let pair = line.prefix { $0 != ";" }
            guard let equals = pair.firstIndex(of: "=") else { continue }
            let name = String(pair[..<equals])
            let value = String(pair[pair.index(after: equals)...])
            jar[name] = value.isEmpty ? nil : value
        }
    }

    /// The hidden fields of a page's form, form-encoded, as a browser submits them.
    static func hiddenFields(_ html: String) -> String {
        html.matches(of: /<input type="hidden" name="([^"]+)" value="([^"]*)">/).map {
            "\($0.output.1)=\(Visit.formEncode(HTMLText.unescape(String($0.output.2))))"
        }.joined(separator: "&")
    }

    /// A browser with the siwa session `siwaSession` sent to `endSession` (an app's sign-out at siwa): siwa's
    /// confirmation page, then its form submitted. Returns siwa's answer to the form (a 303 back to the app).
    static func confirmEndSession(_ endSession: String, site: LocalSite, siwaSession: String, visit: Visit) async throws -> Visit.Answer {
        let confirm = try await visit.send(endSession, cookies: ["siwa_session": siwaSession])
        #expect(confirm.status == 200, "\(confirm.text)")
        let done = try await visit.send(
            site.url("/oauth2/end-session"), method: .POST, headers: [("Content-Type", "application/x-www-form-urlencoded")],
            cookies: ["siwa_session": siwaSession], body: hiddenFields(confirm.text)
        )
        #expect(done.status == 303, "\(done.text)")
        return done
    }

    /// Runs `body` with a new empty directory (its name begins `siwa-label-`), removed afterwards.
    static func withDirectory<T>(_ label: String, _ body: (URL) async throws -> T) async throws -> T {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-\(label)-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        return try await body(directory)
    }

    // MARK: Grafana

    @Test("docs/provider.md's client registration and docs/provider-apps.md's Grafana block: the secret siwa oidc add-client prints goes in client_secret; Grafana's code flow with PKCE on auth_url, token_url and api_url gives the attributes it reads; signout_redirect_url ends the siwa session and returns to Grafana")
    func grafanaSettings() async throws {
        try await Self.withDirectory("grafana") { directory in
            let database = directory.appendingPathComponent("siwa.sqlite").path

            // The page's registration command, run with the built siwa on this test's store.
            let register = try DocSnippets.command(in: try Self.providerRegistration.text(), starting: "swift run siwa oidc add-client")
            let added = try await ChildProcess.run(ChildProcess.siwaExecutable, arguments: try Self.siwaArguments(register), environment: ["SIWA_DB": database], timeLimit: .seconds(30))
            #expect(added.status == 0, "\(added.stderr)")
            #expect(added.stdout.contains("client_id: grafana"), "\(added.stdout)")
            let secret = try #require(added.stdout.firstMatch(of: /client_secret: (\S+)/).map { String($0.output.1) }, "\(added.stdout)")
            let redirect = try #require(register.firstIndex(of: "--redirect-uri").map { register[$0 + 1] })

            try await LocalSite.run(settings: ["db": database]) { site in
                let ini = try Self.ini(try DocSnippets.substituting(try Self.grafana.text(), ["https://auth.example.com": site.origin, "<client_secret>": secret]))
                let grafana = try #require(ini["auth.generic_oauth"])
                func setting(_ key: String) throws -> String { try #require(grafana[key], "grafana.ini sets no \(key)") }
                #expect(try setting("use_pkce") == "true")
                let ada = site.user("Ada")
                try await Visit.withClient { visit in
                    let session = try await visit.signIn(site, user: ada).session
                    // What Grafana's generic_oauth sends: the code flow with PKCE S256 and the scopes as listed.
                    let verifier = UUID().uuidString + UUID().uuidString
                    let challenge = Self.base64URL(hex: IdentityTokenVerifier.sha256Hex(verifier))
                    let query = [
                        ("response_type", "code"), ("client_id", try setting("client_id")), ("redirect_uri", redirect), ("scope", try setting("scopes")),
                        ("state", "grafana-state"), ("code_challenge", challenge), ("code_challenge_method", "S256"), ("access_type", "online"),
                    ].map { "\($0.0)=\(Visit.formEncode($0.1))" }.joined(separator: "&")
                    let authorized = try await visit.send(try setting("auth_url") + "?" + query, cookies: ["siwa_session": session])
                    let back = try #require(authorized.location.flatMap(URLComponents.init(string:)), "\(authorized.status) \(authorized.text)")
                    #expect(authorized.location?.hasPrefix(redirect + "?") == true)
                    #expect(back.queryItems?.first { $0.name == "state" }?.value == "grafana-state")
                    let code = try #require(back.queryItems?.first { $0.name == "code" }?.value)

                    // Go's oauth2 (Grafana's client) tries the secret in Basic first, both parts form-encoded.
                    let (clientID, clientSecret) = (try setting("client_id"), try setting("client_secret"))
                    let basic = Data("\(Visit.formEncode(clientID)):\(Visit.formEncode(clientSecret))".utf8).base64EncodedString()
                    let token = try await visit.send(
                        try setting("token_url"), method: .POST, headers: [("Content-Type", "application/x-www-form-urlencoded"), ("Authorization", "Basic \(basic)")],
                        body: "grant_type=authorization_code&code=\(Visit.formEncode(code))&redirect_uri=\(Visit.formEncode(redirect))&code_verifier=\(verifier)"
                    )
                    #expect(token.status == 200, "\(token.text)")
                    let tokens = try JSONSerialization.jsonObject(with: Data(token.body.readableBytesView)) as? [String: Any]
                    let accessToken = try #require(tokens?["access_token"] as? String)
                    let userinfo = try await visit.send(try setting("api_url"), headers: [("Authorization", "Bearer \(accessToken)")])
                    #expect(userinfo.status == 200, "\(userinfo.text)")
                    let claims = try JSONSerialization.jsonObject(with: Data(userinfo.body.readableBytesView)) as? [String: Any] ?? [:]
                    // Each attribute path is a plain claim name, so the JMESPath is a lookup.
                    let (login, name, email) = (try setting("login_attribute_path"), try setting("name_attribute_path"), try setting("email_attribute_path"))
                    #expect(claims[login] as? String == ada.sub, "\(claims)")
                    #expect(claims[name] as? String == "\(ada.firstName) \(ada.lastName)")
                    #expect(claims[email] as? String == ada.email)

                    // Grafana's sign-out: siwa's confirmation, then back to Grafana's login page, the siwa session over.
                    let done = try await Self.confirmEndSession(try setting("signout_redirect_url"), site: site, siwaSession: session, visit: visit)
                    #expect(done.location == "https://grafana.example.com/login")
                    #expect(try await visit.send(site.url("/auth/api/session"), cookies: ["siwa_session": session]).status == 401)
                }
            }
        }
    }

    /// An INI file's sections, each key's value trimmed.
    static func ini(_ text: String) throws -> [String: [String: String]] {
        var sections: [String: [String: String]] = [:]
        var section = ""
        for line in text.split(separator: "\n").map({ $0.trimmingCharacters(in: .whitespaces) }) where !line.isEmpty && !line.hasPrefix(";") && !line.hasPrefix("#") {
            if line.hasPrefix("["), line.hasSuffix("]") {
                section = String(line.dropFirst().dropLast())
            } else {
                let parts = line.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                try #require(parts.count == 2, "not an INI line: \(line)")
                sections[section, default: [:]][parts[0]] = parts[1]
            }
        }
        return sections
    }

    /// base64url without padding of the bytes `hex` spells (a PKCE S256 challenge from a SHA-256 in hex).
    static func base64URL(hex: String) -> String {
        var bytes: [UInt8] = []
        var digits = hex.makeIterator()
        while let high = digits.next(), let low = digits.next() {
            bytes.append(UInt8(String([high, low]), radix: 16) ?? 0)
        }
        return Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    // MARK: access rules

    @Test("docs/access.md's worked example as siwa.json, and its siwa rules test command: the output the page shows")
    func accessRulesExample() async throws {
        try await Self.withDirectory("rules-doc") { directory in
            try Self.accessRules.text().write(to: directory.appendingPathComponent("siwa.json"), atomically: true, encoding: .utf8)
            let session = DocSnippets.session(in: try Self.rulesTest.text())
            #expect(session.count == 1, "the block's commands changed, and this test runs one: \(session.map(\.command))")
            let (command, expected) = try #require(session.first)
            // Run in the directory holding siwa.json, as the page's reader does (its store is made there too).
            let run = try await ChildProcess.run(
                URL(fileURLWithPath: "/usr/bin/env"), arguments: ["-C", directory.path, ChildProcess.siwaExecutable.path] + Self.siwaArguments(try DocSnippets.words(of: command)),
                environment: [:], timeLimit: .seconds(30)
            )
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.stdout.split(separator: "\n").map(String.init) == expected, "stdout:\n\(run.stdout)\nstderr:\n\(run.stderr)")
        }
    }
}
