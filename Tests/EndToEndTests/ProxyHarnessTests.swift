import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing
import TestSupport

/// The harness the forward-auth and proxy tests stand on, checked with the real programs: nginx, Traefik and
/// Caddy started from their configurations on free loopback ports, each in front of the echo upstream, which
/// reports what reached it; and the relying parties the OpenID provider tests sign in with, Apache httpd with
/// mod_auth_openidc and Authlib's client, started the same way. If one of these fails, the tests built on the
/// harness would prove nothing.
@Suite("Proxy harness: real nginx, Traefik, Caddy and Apache with mod_auth_openidc, and the Authlib relying party")
struct ProxyHarnessTests {
    /// One answer, its body read whole (small answers only).
    struct Fetched {
        var status: Int
        var headers: HTTPHeaders
        var body: ByteBuffer

        /// The body as the echo upstream's JSON.
        func echoed() throws -> EchoedRequest {
            try EchoedRequest(json: body)
        }
    }

    static func fetch(_ url: String, method: HTTPMethod = .GET, headers: [(String, String)] = []) async throws -> Fetched {
        var request = HTTPClientRequest(url: url)
        request.method = method
        request.headers.add(contentsOf: headers)
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        return Fetched(status: Int(response.status.code), headers: response.headers, body: try await response.body.collect(upTo: 1 << 20))
    }

    /// `fetch` on a connection of its own (`Connection: close`): Apache's event MPM may end an idle kept-alive
    /// connection as the next request goes out on it (under the suite's load one such request failed with
    /// remoteConnectionClosed, which async-http-client does not retry); a browser would send it again.
    static func fetchClosing(_ url: String, headers: [(String, String)] = []) async throws -> Fetched {
        try await fetch(url, headers: headers + [("Connection", "close")])
    }

    /// Downloads `url` a buffer at a time and returns how many bytes came and whether they were `PatternedBytes`.
    static func download(_ url: String, headers: [(String, String)] = []) async throws -> (status: Int, bytes: Int, patterned: Bool) {
        var request = HTTPClientRequest(url: url)
        request.headers.add(contentsOf: headers)
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(120))
        var count = 0
        var patterned = true
        for try await buffer in response.body {
            patterned = patterned && PatternedBytes.matches(buffer, at: count)
            count += buffer.readableBytes
        }
        return (Int(response.status.code), count, patterned)
    }

    /// POSTs `count` bytes of `PatternedBytes`, streamed, and returns what the echo upstream counted.
    static func upload(_ count: Int, to url: String, headers: [(String, String)] = []) async throws -> (status: Int, echoed: EchoedRequest) {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/octet-stream")
        request.headers.add(contentsOf: headers)
        request.body = .stream(PatternedBytes(count: count), length: .known(Int64(count)))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(120))
        let body = try await response.body.collect(upTo: 1 << 20)
        return (Int(response.status.code), try EchoedRequest(json: body))
    }

    static let large = 64 * 1024 * 1024

    /// What Traefik and Caddy do alike in front of the echo upstream: a client's own `X-Forwarded-For` (it is not
    /// a trusted proxy) is replaced by the address it came from, `-Host` and `-Proto` are set, the path and the
    /// upstream's cookie pass.
    static func expectOwnForwardedHeaders(through proxy: RunningProxy, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let fetched = try await fetch(proxy.url("/some/path?x=1"), headers: [("X-Forwarded-For", "203.0.113.7")])
        #expect(fetched.status == 200, "\(proxy.logs())", sourceLocation: sourceLocation)
        let echoed = try fetched.echoed()
        #expect(echoed.path == "/some/path?x=1", sourceLocation: sourceLocation)
        #expect(echoed.values("X-Forwarded-For") == ["127.0.0.1"], "an untrusted client's X-Forwarded-For is replaced", sourceLocation: sourceLocation)
        #expect(echoed.values("X-Forwarded-Host") == ["127.0.0.1:\(proxy.port)"], sourceLocation: sourceLocation)
        #expect(echoed.values("X-Forwarded-Proto") == ["http"], sourceLocation: sourceLocation)
        #expect(fetched.headers["Set-Cookie"] == ["upstream=1"], "the upstream's cookie came back", sourceLocation: sourceLocation)
    }

    /// A proxy configured to ask the echo's `authPath` first for paths under `/app`, and to copy its `X-Echo-Path`
    /// answer header into the request it then passes on: the upstream sees the original path and that header,
    /// and does not see it on other paths.
    static func expectAuthAnswerCopied(
        through proxy: RunningProxy, authPath: String = "/auth/forward", sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let fetched = try await fetch(proxy.url("/app/page"))
        #expect(fetched.status == 200, "\(proxy.logs())", sourceLocation: sourceLocation)
        let echoed = try fetched.echoed()
        #expect(echoed.path == "/app/page", sourceLocation: sourceLocation)
        #expect(echoed.values("X-Echo-Path") == [authPath], "the auth request went to the echo's \(authPath)", sourceLocation: sourceLocation)
        let unprotected = try await fetch(proxy.url("/public")).echoed()
        #expect(unprotected.values("X-Echo-Path").isEmpty, "no auth request outside /app", sourceLocation: sourceLocation)
    }

    // MARK: The echo upstream alone

    @Test("the echo upstream reports method, target, headers and body size, and sets its cookie")
    func echoReportsTheRequest() async throws {
        try await withEchoUpstream { upstream in
            var request = HTTPClientRequest(url: "http://127.0.0.1:\(upstream)/a/b?c=d&e")
            request.method = .PUT
            request.headers.add(name: "X-Twice", value: "one")
            request.headers.add(name: "X-Twice", value: "two")
            request.body = .bytes(ByteBuffer(string: "hello"))
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
            let echoed = try EchoedRequest(json: try await response.body.collect(upTo: 1 << 20))
            #expect(response.status == .ok)
            #expect(response.headers["Set-Cookie"] == ["upstream=1"])
            #expect(response.headers["X-Echo-Path"] == ["/a/b?c=d&e"])
            #expect(echoed.method == "PUT")
            #expect(echoed.path == "/a/b?c=d&e")
            #expect(echoed.values("X-Twice") == ["one", "two"])
            #expect(echoed.values("host") == ["127.0.0.1:\(upstream)"])
            #expect(echoed.bodyBytes == 5)
            #expect(!echoed.bodyMatchesPattern, "\"hello\" is not the pattern")
        }
    }

    @Test("the echo upstream streams 64 MB on /large and counts a 64 MB upload, both the pattern throughout")
    func echoStreamsLargeBodies() async throws {
        try await withEchoUpstream { upstream in
            let download = try await Self.download("http://127.0.0.1:\(upstream)/large?bytes=\(Self.large)")
            #expect(download.status == 200)
            #expect(download.bytes == Self.large)
            #expect(download.patterned)

            let upload = try await Self.upload(Self.large, to: "http://127.0.0.1:\(upstream)/upload")
            #expect(upload.status == 200)
            #expect(upload.echoed.bodyBytes == Self.large)
            #expect(upload.echoed.bodyMatchesPattern)
            #expect(upload.echoed.values("content-length") == [String(Self.large)])
        }
    }

    // MARK: nginx

    @Test("nginx proxies to the echo upstream with the X-Forwarded-For it was told to set, its auth_request copies the auth answer, and it stops after")
    func nginxProxies() async throws {
        let port = try await withEchoUpstream { upstream in
            try await withNginx(configuration: { port in """
                server {
                    listen 127.0.0.1:\(port);
                    proxy_set_header Host $http_host;
                    proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
                    location / {
                        proxy_pass http://127.0.0.1:\(upstream);
                    }
                    location = /_auth {
                        internal;
                        proxy_pass http://127.0.0.1:\(upstream)/auth/check;
                        proxy_pass_request_body off;
                        proxy_set_header Content-Length "";
                        proxy_set_header X-Original-URI $request_uri;
                    }
                    location /app {
                        auth_request /_auth;
                        auth_request_set $auth_path $upstream_http_x_echo_path;
                        proxy_set_header X-Echo-Path $auth_path;
                        proxy_pass http://127.0.0.1:\(upstream);
                    }
                }
                """ }) { nginx in
                let fetched = try await Self.fetch(nginx.url("/some/path?x=1"), headers: [("X-Forwarded-For", "203.0.113.7")])
                #expect(fetched.status == 200, "\(nginx.logs())")
                let echoed = try fetched.echoed()
                #expect(echoed.path == "/some/path?x=1")
                #expect(echoed.values("X-Forwarded-For") == ["203.0.113.7, 127.0.0.1"])
                #expect(echoed.values("Host") == ["127.0.0.1:\(nginx.port)"])
                #expect(fetched.headers["Set-Cookie"] == ["upstream=1"], "the upstream's cookie came back through nginx")
                try await Self.expectAuthAnswerCopied(through: nginx, authPath: "/auth/check")
                #expect(await TCPProbe.acceptsConnections(on: nginx.port))
                return nginx.port
            }
        }
        // Stopped by its pid when the body ended: nothing listens there any more.
        #expect(await !TCPProbe.acceptsConnections(on: port))
    }

    @Test("nginx passes a 64 MB upload and a 64 MB download whole, through its temporary files in the test's directory")
    func nginxLargeBodies() async throws {
        try await withEchoUpstream { upstream in
            // Small buffers, so both bodies go through nginx's temporary files (written by the worker process).
            try await withNginx(configuration: { port in """
                server {
                    listen 127.0.0.1:\(port);
                    client_body_buffer_size 16k;
                    proxy_buffers 4 16k;
                    location / { proxy_pass http://127.0.0.1:\(upstream); }
                }
                """ }) { nginx in
                let upload = try await Self.upload(Self.large, to: nginx.url("/upload"))
                #expect(upload.status == 200, "\(nginx.logs())")
                #expect(upload.echoed.bodyBytes == Self.large)
                #expect(upload.echoed.bodyMatchesPattern)
                let download = try await Self.download(nginx.url("/large?bytes=\(Self.large)"))
                #expect(download.status == 200, "\(nginx.logs())")
                #expect(download.bytes == Self.large)
                #expect(download.patterned)
                let logs = nginx.logs()
                #expect(logs.contains("a client request body is buffered to a temporary file"), "\(logs)")
                #expect(logs.contains("an upstream response is buffered to a temporary file"), "\(logs)")
            }
        }
    }

    @Test("nginx refusing its configuration fails the start with its own message")
    func nginxBadConfiguration() async throws {
        let error = await #expect(throws: ExternalToolError.self) {
            try await withNginx(configuration: { _ in "server { no_such_directive on; }" }) { _ in }
        }
        #expect(error?.description.contains("unknown directive \"no_such_directive\"") == true, "\(String(describing: error))")
    }

    // MARK: Traefik

    @Test("Traefik routes to the echo upstream setting X-Forwarded-* itself, and its forwardAuth copies the auth answer")
    func traefikProxies() async throws {
        try await withEchoUpstream { upstream in
            try await withTraefik(dynamicConfiguration: { _ in """
                http:
                  routers:
                    echo:
                      rule: "PathPrefix(`/`)"
                      service: echo
                    app:
                      rule: "PathPrefix(`/app`)"
                      middlewares: [auth]
                      service: echo
                  middlewares:
                    auth:
                      forwardAuth:
                        address: "http://127.0.0.1:\(upstream)/auth/forward"
                        authResponseHeaders: [X-Echo-Path]
                  services:
                    echo:
                      loadBalancer:
                        servers:
                          - url: "http://127.0.0.1:\(upstream)"
                """ }) { traefik in
                try await Self.expectOwnForwardedHeaders(through: traefik)
                try await Self.expectAuthAnswerCopied(through: traefik)
            }
        }
    }

    @Test("Traefik unable to read its dynamic configuration fails the start with its log")
    func traefikBadConfiguration() async throws {
        let error = await #expect(throws: ExternalToolError.self) {
            try await withTraefik(startupTimeLimit: .seconds(5), dynamicConfiguration: { _ in "http: [this is not: a mapping" }) { _ in }
        }
        #expect(error?.description.contains("yaml: line 1") == true, "Traefik's own complaint is in the error: \(String(describing: error))")
    }

    // MARK: Caddy

    @Test("Caddy reverse_proxy reaches the echo upstream setting X-Forwarded-* itself, and its forward_auth copies the auth answer")
    func caddyProxies() async throws {
        try await withEchoUpstream { upstream in
            try await withCaddy(configuration: { port in """
                http://127.0.0.1:\(port) {
                    forward_auth /app/* 127.0.0.1:\(upstream) {
                        uri /auth/forward
                        copy_headers X-Echo-Path
                    }
                    reverse_proxy 127.0.0.1:\(upstream)
                }
                """ }) { caddy in
                try await Self.expectOwnForwardedHeaders(through: caddy)
                try await Self.expectAuthAnswerCopied(through: caddy)
            }
        }
    }

    // MARK: Apache with mod_auth_openidc

    @Test("Apache starts with mod_auth_openidc from a configuration apache2 -t accepts; the module guards /protected by the provider's discovery document, the rest reaches the echo upstream")
    func apacheOIDCGuardsTheProtectedLocation() async throws {
        let port = try await withClosedLoopbackPort { provider in
            try await withApacheOIDC(provider: "http://127.0.0.1:\(provider)", clientID: "harness", clientSecret: "harness-secret") { apache in
                let apache2 = try ExternalTool.apache.executable()
                let check = try await ChildProcess.run(apache2, arguments: ["-t", "-f", apache.configurationFile.path], environment: [:])
                #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
                #expect((check.stdout + check.stderr).contains("Syntax OK"), "\(check.stdout)\(check.stderr)")
                let modules = try await ChildProcess.run(apache2, arguments: ["-M", "-f", apache.configurationFile.path], environment: [:])
                #expect(modules.stdout.contains("auth_openidc_module (shared)"), "\(modules.stdout)\(modules.stderr)")

                let open = try await Self.fetchClosing(apache.url("/public?x=1"))
                #expect(open.status == 200, "\(apache.logs())")
                let echoed = try open.echoed()
                #expect(echoed.path == "/public?x=1")
                #expect(echoed.values("Host") == ["127.0.0.1:\(apache.port)"])
                #expect(echoed.headers.keys.filter { $0.hasPrefix("oidc_") }.isEmpty, "no claims outside /protected: \(echoed.headers)")

                // A request that does not accept HTML is no browser: the module answers 401 rather than redirect it.
                let script = try await Self.fetchClosing(apache.protectedURL)
                #expect(script.status == 401, "\(apache.logs())")
                #expect(script.headers["X-Echo-Path"].isEmpty, "the echo upstream answered /protected")
                // A browser's: before it can send anyone to the provider, the module reads the discovery document;
                // with nothing listening there it answers 500 itself, and the upstream is not reached.
                let guarded = try await Self.fetchClosing(apache.protectedURL, headers: [("Accept", "text/html")])
                #expect(guarded.status == 500, "\(apache.logs())")
                #expect(guarded.headers["X-Echo-Path"].isEmpty, "the echo upstream answered /protected")
                let logs = apache.logs()
                #expect(logs.contains("could not retrieve metadata from url: http://127.0.0.1:\(provider)/.well-known/openid-configuration"), "\(logs)")
                #expect(apache.redirectURI == "http://127.0.0.1:\(apache.port)/protected/redirect_uri")
                #expect(apache.logoutURL(returningTo: apache.loggedOutURL) == apache.redirectURI + "?logout=http%3A%2F%2F127.0.0.1%3A\(apache.port)%2Flogged-out")
                // The module's logout without a session of its own: straight back to the return URL on this host.
                let loggedOut = try await Self.fetchClosing(apache.logoutURL(returningTo: apache.loggedOutURL))
                #expect(loggedOut.status == 200, "\(apache.logs())")
                #expect(try loggedOut.echoed().path == "/logged-out")
                return apache.port
            }
        }
        #expect(await !TCPProbe.acceptsConnections(on: port), "Apache was stopped by its pid")
    }

    @Test("Apache refusing a directive fails the start with its own message")
    func apacheBadConfiguration() async throws {
        let error = await #expect(throws: ExternalToolError.self) {
            try await withApacheOIDC(provider: "http://127.0.0.1:1", clientID: "harness", clientSecret: "harness-secret", directives: "NoSuchDirective on") { _ in }
        }
        #expect(error?.description.contains("Invalid command 'NoSuchDirective'") == true, "\(String(describing: error))")
    }

    // MARK: The Authlib relying party

    @Test("the Authlib relying party serves its start page signed out, and a sign-in begins by reading the provider's discovery document")
    func authlibRelyingPartyStarts() async throws {
        let port = try await withClosedLoopbackPort { provider in
            try await withAuthlibRP(provider: "http://127.0.0.1:\(provider)", clientID: "harness", clientSecret: "harness-secret") { rp in
                let start = try await Self.fetch(rp.startURL)
                #expect(start.status == 200, "\(rp.logs())")
                #expect(String(buffer: start.body).contains("<h1>Not signed in</h1>"), "\(String(buffer: start.body))")
                let claims = try await Self.fetch(rp.claimsURL)
                let state = try JSONSerialization.jsonObject(with: Data(claims.body.readableBytesView)) as? [String: Any]
                #expect(state?["signed_in"] as? Bool == false, "\(String(buffer: claims.body))")

                let login = try await Self.fetch(rp.loginURL(prompt: "login"))
                #expect(login.status == 502, "\(rp.logs())")
                #expect(String(buffer: login.body).contains("http://127.0.0.1:\(provider)/.well-known/openid-configuration"), "\(String(buffer: login.body))")
                #expect(rp.redirectURI == "http://127.0.0.1:\(rp.port)/callback")
                #expect(rp.postLogoutRedirectURI == "http://127.0.0.1:\(rp.port)/logged-out")
                return rp.port
            }
        }
        #expect(await !TCPProbe.acceptsConnections(on: port), "the relying party was stopped by its pid")
    }
}
