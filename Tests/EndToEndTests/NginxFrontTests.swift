import AsyncHTTPClient
import Foundation
import NIOCore
import Testing
import TestSupport

/// Real nginx in front of an app, configured as the README tells a reader to (its nginx block, run as written with
/// the ports of this test), and nginx with its default settings passing siwa's own pages on; driven over real
/// sockets by a client that does not follow redirects, signed in headlessly through the emulator.
@Suite("nginx in front, as the README configures it")
struct NginxFrontTests {
    /// docs/front.md's nginx block (`DocSnippetsTests.frontNginx`), with siwa's port for 8080 and the app's for 3000.
    static func readmeBlock(siwa: Int, app: Int) throws -> String {
        let block = try DocSnippetsTests.frontNginx.text()
        #expect(block.contains("127.0.0.1:8080") && block.contains("127.0.0.1:3000"), "the README's block names siwa and the app as the test expects")
        return block.replacingOccurrences(of: "127.0.0.1:8080", with: "127.0.0.1:\(siwa)").replacingOccurrences(of: "127.0.0.1:3000", with: "127.0.0.1:\(app)")
    }

    /// An nginx `server` on 127.0.0.1:`port` holding `block`.
    static func server(port: Int, _ block: String) -> String {
        "server {\n    listen 127.0.0.1:\(port);\n\(block)}\n"
    }

    @Test("the README's nginx block: a browser goes to the sign-in with the whole URL in rd and comes back to it; other clients get 401; the app gets siwa's identity and a verifiable assertion, never the client's; a POST passes; a person turned away gets siwa's 403 page")
    func readmeConfiguration() async throws {
        try await withEchoUpstream { app in
            // Grace is not on the list.
            try await LocalSite.run(settings: ["allowed_emails": "ada@example.com,lilei@example.cn"]) { site in
                try await Self.withFrontNginx(site: site, app: app) { nginx in
                    try await Visit.withClient { visit in
                        try await Self.walkThrough(site: site, proxy: nginx, visit: visit)
                    }
                }
            }
        }
    }

    /// nginx with docs/front.md's block in its one `server`, siwa at `site` and the app on port `app`.
    static func withFrontNginx<T>(site: LocalSite, app: Int, _ body: (RunningProxy) async throws -> T) async throws -> T {
        let block = try readmeBlock(siwa: site.port, app: app)
        return try await withNginx(configuration: { port in server(port: port, block) }, body)
    }

    @Test("the README's nginx block with siwa on a Unix socket (socket), siwa's own pages served by the same nginx: the same walk-through, the socket's peer believed as a proxy (the assertion is addressed to nginx's origin)")
    func unixSocket() async throws {
        try await Self.onReservedPort { try await unixSocket(nginxPort: $0) }
    }

    private func unixSocket(nginxPort: Int) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-socket-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let socket = directory.appendingPathComponent("siwa.sock").path
        try await withEchoUpstream { app in
            // No trusted_proxies: only the socket's peer is believed.
            let settings: [String: String?] = [
                "allowed_emails": "ada@example.com,lilei@example.cn", "socket": socket, "public_url": "http://127.0.0.1:\(nginxPort)", "trusted_proxies": nil,
            ]
            try await LocalSite.run(settings: settings) { site in
                var status = stat()
                #expect(lstat(socket, &status) == 0 && status.st_mode & S_IFMT == S_IFSOCK, "siwa listens on the socket")
                #expect(status.st_mode & 0o777 == 0o660, "owner and group only")
                // As the README says: its socket block (the upstream in the http block, siwa's pages in the server), and
                // its nginx block with http://siwa for siwa's address.
                let readme = try Self.readmeBlock(siwa: 8080, app: app).replacingOccurrences(of: "http://127.0.0.1:8080", with: "http://siwa")
                let socketBlock = try DocSnippetsTests.socketNginx.text().replacingOccurrences(of: "/run/siwa/siwa.sock", with: socket)
                let upstream = socketBlock.split(separator: "\n").filter { $0.hasPrefix("upstream siwa ") }.joined(separator: "\n")
                let locations = socketBlock.split(separator: "\n").filter { !$0.hasPrefix("upstream siwa ") }.joined(separator: "\n")
                #expect(upstream.contains("server unix:\(socket);"), "the README's socket block names the socket as the test expects")
                try await withNginx(port: nginxPort, configuration: { port in upstream + "\n" + Self.server(port: port, locations + "\n" + readme) }) { nginx in
                    #expect(nginx.origin == site.origin)
                    try await Visit.withClient { visit in
                        try await Self.walkThrough(site: site, proxy: nginx, visit: visit)
                    }
                }
            }
        }
    }

    /// A person's walk through `proxy` configured from the page (nginx here, Traefik and Caddy in
    /// `DocSnippetsTests`) in front of the echo upstream, siwa letting in Ada and 李雷, not Grace: the sign-in with the
    /// whole URL in rd and back to it, 401 for other clients, the identity and a verifiable assertion for the app and
    /// never the client's, a POST, and the 403 page on the app's host.
    static func walkThrough(site: LocalSite, proxy nginx: RunningProxy, visit: Visit) async throws {
        // A query with two `&`, an encoded space and an encoded `&`: what an rd written by nginx would lose.
        let original = nginx.url("/reports/2026?year=2026&view=a%20b&tag=x%26y")
        let first = try await visit.send(original, headers: [("Accept", "text/html")])
        #expect(first.status == 302, "\(nginx.logs())")
        let location = try #require(first.location)
        #expect(location.hasPrefix(site.url("/auth/apple?rd=")))
        #expect(URLComponents(string: location)?.percentEncodedQueryItems?.first { $0.name == "rd" }?.value?.removingPercentEncoding == original)
        #expect(try await visit.send(original, headers: [("Accept", "application/json")]).status == 401, "an API client is told 401, not redirected")
        let anonymousPost = try await visit.send(nginx.url("/api/items"), method: .POST, headers: [("Content-Type", "application/json")], body: "{}")
        #expect(anonymousPost.status == 401, "\(nginx.logs())")

        let ada = site.user("Ada")
        let signIn = try await visit.signIn(site, user: ada, start: location)
        #expect(signIn.returnedTo == original, "back on the very URL asked for")
        let cookies = ["siwa_session": signIn.session]
        let forged = [("Accept", "text/html"), ("X-Auth-Request-User", "forged-sub"), ("X-Auth-Request-Preferred-Username", "Mallory"), ("X-Siwa-Assertion", "forged.jwt.value")]
        let page = try await visit.send(original, headers: forged, cookies: cookies)
        #expect(page.status == 200)
        let echoed = try page.echoed()
        #expect(echoed.path == "/reports/2026?year=2026&view=a%20b&tag=x%26y")
        #expect(echoed.values("x-auth-request-user") == [ada.sub])
        #expect(echoed.values("x-auth-request-email") == [ada.email])
        #expect(echoed.values("x-auth-request-preferred-username") == ["\(ada.firstName) \(ada.lastName)"])
        #expect(echoed.values("x-siwa-private-email") == ["false"])
        let assertion = try #require(echoed.values("x-siwa-assertion").first)
        let check = try AssertionCheck(assertion, keySet: try await visit.send(site.url("/.well-known/siwa/jwks.json")).text)
        #expect(check.signatureVerifies)
        #expect(check.claims["aud"] as? String == nginx.origin)
        #expect(check.claims["iss"] as? String == site.origin)
        #expect(check.claims["sub"] as? String == ada.sub)

        // Any method passes with a session: nginx asks siwa with GET whatever the request's method is.
        let posted = try await visit.send(nginx.url("/api/items"), method: .POST, headers: [("Content-Type", "application/json")], cookies: cookies, body: #"{"n":1}"#)
        #expect(posted.status == 200)
        #expect(try posted.echoed().method == "POST")
        #expect(try posted.echoed().values("x-auth-request-user") == [ada.sub])

        // Grace, signed in but not on the list: siwa's page, saying whom she is signed in as and how to sign out.
        let grace = site.user("Grace")
        let graceSession = try await visit.signIn(site, user: grace).session
        let denied = try await visit.send(original, headers: [("Accept", "text/html")], cookies: ["siwa_session": graceSession])
        #expect(denied.status == 403)
        #expect(denied.text.contains(grace.email), "\(denied.text)")
        #expect(denied.text.contains(site.url("/auth/sign-out")))
        #expect(denied.headers.first(name: "content-type")?.hasPrefix("text/html") == true)
        // Shown on the app's host, the page links siwa's stylesheet where siwa serves it, and its policy lets it load.
        #expect(denied.text.contains(#"<link rel="stylesheet" href="\#(site.origin)/siwa.css">"#), "\(denied.text)")
        #expect(denied.headers.first(name: "content-security-policy")?.contains("style-src 'self' \(site.origin);") == true)
        #expect(try await visit.send(site.url("/siwa.css")).headers.first(name: "content-type")?.hasPrefix("text/css") == true)
    }

    @Test("siwa's own pages behind nginx with its default settings (no X-Forwarded-Host, Host rewritten): a sign-in started there makes one hop to public_url and completes, no loop")
    func signInThroughDefaultProxy() async throws {
        try await Self.onReservedPort { try await signInThroughDefaultProxy(nginxPort: $0) }
    }

    /// Runs `body` with a port reserved for nginx, which public_url names before either starts; when something took
    /// it meanwhile, both start again on a new port (three tries).
    static func onReservedPort(_ body: (Int) async throws -> Void) async throws {
        for attempt in 1...3 {
            do {
                return try await body(try await FreePorts.reserve(1)[0])
            } catch let error as ExternalToolError where error.isAddressInUse && attempt < 3 {
                continue
            }
        }
    }

    private func signInThroughDefaultProxy(nginxPort: Int) async throws {
        try await LocalSite.run(settings: ["public_url": "http://127.0.0.1:\(nginxPort)"]) { site in
            #expect(site.origin == "http://127.0.0.1:\(nginxPort)")
            try await withNginx(port: nginxPort, configuration: { port in
                "server {\n    listen 127.0.0.1:\(port);\n    location / { proxy_pass http://127.0.0.1:\(site.port); }\n}\n"
            }) { nginx in
                try await Visit.withClient { visit in
                    let start = try await visit.send(nginx.url("/auth/apple?return_to=%2Fsession"))
                    #expect(start.status == 302)
                    let hop = try #require(start.location)
                    #expect(hop == nginx.url("/auth/apple?return_to=%2Fsession&moved=1"), "one hop to public_url")
                    let ada = site.user("Ada")
                    let signIn = try await visit.signIn(site, user: ada, start: hop)
                    #expect(signIn.returnedTo == "/session")
                    let page = try await visit.send(nginx.url("/session"), headers: [("Accept", "text/html")], cookies: ["siwa_session": signIn.session])
                    #expect(page.status == 200)
                    #expect(page.text.contains(ada.email))
                }
            }
        }
    }
}
