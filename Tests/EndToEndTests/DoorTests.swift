import DoorHTTP
import Foundation
import NIOCore
@testable import SignInServer
import Testing
import TestSupport

/// What the door of `siwa serve --upstream` refuses, tried as an attacker would, with raw sockets: targets that two
/// parsers read differently, upstream answers that stopped siwa, headers that pass for another front's identity.
/// Each test here failed before the door had one request model (issue 26).
@Suite("The door: one request model, decided and forwarded as the same bytes", .serialized)
struct DoorTests {
    /// A header outside the byte path's subset (a value that is not ASCII): the request carrying it, and the rest of
    /// its connection, go to NIO's parser and Hummingbird's handlers, the other carrier.
    static let toTheHandlers = "X-Note: caf\u{e9}"

    /// One request written as `head` (its lines joined with CRLF) and `body`, on a connection of its own, read to its end.
    static func exchange(_ site: LocalSite, _ head: [String], body: String = "") async throws -> RawSocket.Answer {
        let text = try await RawSocket.exchange(port: site.port, head.joined(separator: "\r\n") + "\r\nConnection: close\r\n\r\n" + body)
        guard let end = text.range(of: "\r\n\r\n") else { throw EndToEndError("no answer head: \(text)") }
        return RawSocket.Answer(head: String(text[..<end.lowerBound]), body: String(text[end.upperBound...]))
    }

    @Test("a WebSocket upgrade asked for after another request on one connection is sent back to the same path on a new connection (307), and a path that begins with two slashes is sent to this site, never read as another host's (//evil.example/x)")
    func laterUpgradeRedirectStaysOnSite() async throws {
        try await ScriptedUpstream.run { upstream in
            try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(upstream.port)", ["skip_auth_routes": "^/"]) { site, _ in
                let upgrade = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                for (target, location) in [("/chat?room=1", "/chat?room=1"), ("//evil.example/x", "/evil.example/x"), ("///evil.example", "/evil.example")] {
                    let text = try await RawSocket.exchange(
                        port: site.port, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\n" + upgrade + "\r\n"
                    )
                    let answers = text.components(separatedBy: "HTTP/1.1 ").dropFirst()
                    #expect(answers.count == 2 && answers.last?.hasPrefix("307") == true, "\(target): \(text)")
                    let said = answers.last?.split(separator: "\r\n").first { $0.lowercased().hasPrefix("location:") }.map { $0.dropFirst("location:".count).trimmingCharacters(in: .whitespaces) }
                    #expect(said == location, "\(target): \(text)")
                }
            }
        }
    }

    @Test("targets two parsers read differently are refused with siwa's 400 page and never reach the upstream: a non-UTF-8 encoding on a skip route, absolute-form naming another authority, a fragment a rule could see, a climb above /, two Host fields")
    func oddTargetsAreRefused() async throws {
        try await ScriptedUpstream.run { upstream in
            let routes = "POST=^/hooks/,GET=^/public/,\\.css$"
            try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(upstream.port)", ["skip_auth_routes": routes]) { site, _ in
                let refused: [([String], String)] = [
                    (["POST /hooks/x%ff?action=delete HTTP/1.1", "Host: a", "Content-Length: 5"], "hello"),
                    (["GET /public/%ff?q=1 HTTP/1.1", "Host: a", "Content-Length: 5"], "hello"),
                    (["GET /public/%ff?q=1 HTTP/1.1", "Host: a"], ""),
                    (["GET http://x:abc/public/x?q=5 HTTP/1.1", "Host: a"], ""),
                    (["GET http://[::1/public/x HTTP/1.1", "Host: a"], ""),
                    (["GET http://%zz/public/x HTTP/1.1", "Host: a"], ""),
                    (["GET http://evil.example/public/x HTTP/1.1", "Host: a"], ""),
                    (["GET /admin#.css HTTP/1.1", "Host: a"], ""),
                    (["GET /admin#.css HTTP/1.1", "Host: a", Self.toTheHandlers], ""),
                    (["GET /../secret.css HTTP/1.1", "Host: a"], ""),
                    (["GET /public/a%2Fb HTTP/1.1", "Host: a"], ""),
                    (["GET /public/..;/admin HTTP/1.1", "Host: a"], ""),
                    (["GET /public/x HTTP/1.1", "Host: a", "Host: evil.example", Self.toTheHandlers], ""),
                    (["GET /public/x HTTP/1.1", "Host: a", "Host: evil.example"], ""),
                ]
                for (head, body) in refused {
                    let answer = try await Self.exchange(site, head, body: body)
                    #expect(answer.status == 400, "\(head[0]): \(answer.head)")
                    #expect(answer.body.contains("This address cannot be opened") || answer.body.isEmpty, "\(head[0]): \(answer.body.prefix(300))")
                }
                let json = try await Self.exchange(site, ["GET /public/%ff HTTP/1.1", "Host: a", "Accept: application/json"])
                #expect(json.status == 400 && json.body.contains("\"status\":400"), "\(json.body)")
                #expect(upstream.connections.value == 0, "a refused request reached the upstream")
                // The same routes still pass what they name, with the target as the rule saw it.
                let absolute = try await Self.exchange(site, ["GET http://A/public/x?q=5 HTTP/1.1", "Host: a"])
                #expect(absolute.status == 404, "absolute-form naming the Host is the origin-form request: \(absolute.head)")
                #expect(upstream.connections.value == 1)
            }
        }
    }

    @Test("a dot-segment stays under the upstream's base path: /a/../secret reaches it as /app/secret, by either carrier")
    func dotSegmentsStayUnderTheBasePath() async throws {
        try await withEchoUpstream { port in
            try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(port)/app", ["skip_auth_routes": "^/"]) { site, _ in
                let bytes = try await Self.exchange(site, ["GET /a/../secret?x=1 HTTP/1.1", "Host: a"])
                let handlers = try await Self.exchange(site, ["GET /a/%2e%2E/secret?x=1 HTTP/1.1", "Host: a", Self.toTheHandlers])
                for answer in [bytes, handlers] {
                    #expect(answer.status == 200, "\(answer.head)")
                    #expect(try EchoedRequest(json: ByteBuffer(string: answer.body)).path == "/app/secret?x=1")
                }
            }
        }
    }

    @Test("generated targets, by every carrier: what the upstream receives is the normalized target the rule was matched on, or nothing reaches it and the client gets 400")
    func generatedTargetsAgreeEndToEnd() async throws {
        try await withEchoUpstream { port in
            let settings: [String: String?] = ["skip_auth_routes": "GET=^/public/,POST=^/public/"]
            try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(port)/app", settings) { site, _ in
                let targets = GeneratedTargets.make(count: 160, seed: 26, prefix: "public/") + GeneratedTargets.make(count: 40, seed: 2026)
                var forwarded = 0
                for raw in targets {
                    let expected = try? RequestTarget(raw, host: "127.0.0.1")
                    // The byte path (a bodiless GET, a POST with a small body), the handlers (a GET with a header outside
                    // the byte path's subset, a POST with a chunked body).
                    let carriers: [(String, [String], String)] = [
                        ("byte path", ["GET \(raw) HTTP/1.1", "Host: 127.0.0.1", "Accept: application/json"], ""),
                        ("byte path with a body", ["POST \(raw) HTTP/1.1", "Host: 127.0.0.1", "Accept: application/json", "Content-Length: 4"], "body"),
                        ("handlers", ["GET \(raw) HTTP/1.1", "Host: 127.0.0.1", "Accept: application/json", Self.toTheHandlers], ""),
                        ("handlers with a body", ["POST \(raw) HTTP/1.1", "Host: 127.0.0.1", "Accept: application/json", "Transfer-Encoding: chunked"], "4\r\nbody\r\n0\r\n\r\n"),
                    ]
                    for (carrier, head, body) in carriers {
                        let answer = try await Self.exchange(site, head, body: body)
                        guard answer.status == 200 else {
                            if let expected, SiwaPaths(publicDirectory: "/nonexistent").contains(expected.path) == false {
                                #expect(answer.status == 401 && !expected.path.hasPrefix("/public/"), "\(carrier) \(raw): \(answer.head)")
                            } else if expected == nil, !raw.contains(" ") {
                                // (A blank ends the target on the request line: NIO's parser reads the rest its own way.)
                                #expect(answer.status == 400, "\(carrier) \(raw) (refused by the door): \(answer.head)")
                            }
                            continue
                        }
                        let echoed = try EchoedRequest(json: ByteBuffer(string: answer.body))
                        let received = String(echoed.path.dropFirst("/app".count))
                        #expect(echoed.path.hasPrefix("/app/"), "\(carrier) \(raw) reached the upstream as \(echoed.path)")
                        #expect(received == expected?.forwarded, "\(carrier) \(raw): the upstream received \(received), the rule saw \(expected?.forwarded ?? "nothing")")
                        // What the upstream makes of what it received is what the rule was matched on.
                        let upstreamView = try? RequestTarget(received, host: "127.0.0.1")
                        #expect(upstreamView?.path.hasPrefix("/public/") == true, "\(carrier) \(raw): passed without a sign-in as \(received)")
                        forwarded += 1
                    }
                }
                #expect(forwarded > 100, "too few generated targets were forwarded to compare: \(forwarded)")
            }
        }
    }

    @Test("an upstream that answers 101 to a request that asked for no switch gets the 502 page on every carrier, and siwa goes on answering; an interim 102 is dropped on every carrier alike")
    func unaskedSwitchIsABrokenUpstream() async throws {
        try await ScriptedUpstream.run { upstream in
            try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(upstream.port)", ["skip_auth_routes": "^/"]) { site, visit in
                for path in ["/switch"] {
                    let heads: [([String], String)] = [
                        (["GET \(path) HTTP/1.1", "Host: a", "Accept: text/html"], ""),
                        (["GET \(path) HTTP/1.1", "Host: a", "Accept: text/html", Self.toTheHandlers], ""),
                        (["POST \(path) HTTP/1.1", "Host: a", "Accept: text/html", "Content-Length: 4"], "body"),
                    ]
                    for (head, body) in heads {
                        let answer = try await Self.exchange(site, head, body: body)
                        #expect(answer.status == 502, "\(head[0]) \(head.last ?? ""): \(answer.head)")
                        #expect(answer.body.contains("cannot be passed on"), "\(answer.body.prefix(300))")
                        #expect(!answer.head.lowercased().contains("upgrade"), "the upstream's switch reached the client: \(answer.head)")
                    }
                }
                for head in [["GET /processing HTTP/1.1", "Host: a"], ["GET /processing HTTP/1.1", "Host: a", Self.toTheHandlers]] {
                    let answer = try await Self.exchange(site, head)
                    #expect(answer.status == 200 && answer.body == "ok", "\(head): \(answer.head)")
                }
                #expect(try await visit.send(site.url("/length")).text == "twelve bytes", "siwa stopped answering")
            }
        }
    }

    @Test("an upstream that answers an upload before its body has all come: the answer reaches the client, the connection's next request is answered, siwa goes on (two readers of one body stopped it)")
    func earlyAnswerDuringUpload() async throws {
        try await ScriptedUpstream.run { upstream in
            try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(upstream.port)", ["skip_auth_routes": "^/"]) { site, visit in
                for _ in 0..<3 {
                    let text = try await RawSocket.exchange(
                        port: site.port, "POST /early HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello",
                        then: [" worldGET /length HTTP/1.1\r\nHost: a\r\n\(Self.toTheHandlers)\r\nConnection: close\r\n\r\n"]
                    )
                    #expect(text.hasPrefix("HTTP/1.1 200 OK\r\n") && text.contains("\r\n\r\nearly"), "\(text)")
                    #expect(text.hasSuffix("twelve bytes"), "the next request was not answered: \(text)")
                }
                #expect(try await visit.send(site.url("/length")).text == "twelve bytes", "siwa stopped answering")
            }
        }
    }

    @Test("signed-in POSTs with small bodies, each followed on its kept-alive connection by a GET, through the handlers, on eight connections at once: every one is answered and siwa goes on (the upload's reader and Hummingbird's raced for the body)")
    func uploadsThenGetsUnderLoad() async throws {
        try await UpstreamProxyTests.withEchoSite { site, visit in
            let session = try await visit.signIn(site, user: site.user("Ada")).session
            let cookie = "Cookie: siwa_session=\(session)\r\n"
            let rounds = 40
            let pair = "POST /form HTTP/1.1\r\nHost: a\r\n\(cookie)\(Self.toTheHandlers)\r\nContent-Length: 5\r\n\r\nhello" + "GET /page HTTP/1.1\r\nHost: a\r\n\(cookie)\(Self.toTheHandlers)\r\n\r\n"
            let last = "GET /last HTTP/1.1\r\nHost: a\r\n\(cookie)Connection: close\r\n\r\n"
            try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<8 {
                    group.addTask { try await RawSocket.exchange(port: site.port, String(repeating: pair, count: rounds) + last) }
                }
                for try await text in group {
                    #expect(text.components(separatedBy: "HTTP/1.1 200 OK\r\n").count == 2 * rounds + 2, "\(text.suffix(500))")
                    #expect(text.contains("\"path\":\"\\/last\""))
                }
            }
            #expect(try await visit.send(site.url("/page"), cookies: ["siwa_session": session]).status == 200, "siwa stopped answering")
        }
    }

    @Test("an Upgrade siwa does not pass (h2c, as curl --http2 asks) is answered in HTTP/1.1 as if it had none; neither Upgrade nor HTTP2-Settings reaches the upstream")
    func h2cUpgradeIsAnsweredInHTTP1() async throws {
        try await UpstreamProxyTests.withEchoSite(["skip_auth_routes": "^/"]) { site, _ in
            let lines = ["Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"]
            for extra in [[], [Self.toTheHandlers]] {
                let answer = try await Self.exchange(site, ["GET /page HTTP/1.1", "Host: a"] + lines + extra)
                #expect(answer.head.hasPrefix("HTTP/1.1 200"), "\(answer.head)")
                let echoed = try EchoedRequest(json: ByteBuffer(string: answer.body))
                #expect(echoed.values("upgrade").isEmpty && echoed.values("http2-settings").isEmpty, "\(echoed.headers)")
            }
        }
    }

    @Test("headers other fronts pass identity under, method and URL overrides, the client's address claims and strip_request_headers never reach the upstream, in either spelling, by either carrier")
    func identityFamilyStripped() async throws {
        try await UpstreamProxyTests.withEchoSite(["skip_auth_routes": "^/", "strip_request_headers": "X-Tenant"]) { site, _ in
            let claimed = [
                "Remote-User: admin", "Remote_User: admin", "Remote-Email: a@b", "Remote-Groups: admins", "Remote-Name: Admin", "X-Remote-User: admin",
                "X-Forwarded-User: admin", "X-Forwarded-Email: a@b", "X-Forwarded-Groups: admins", "X-Forwarded-Preferred-Username: admin",
                "X-HTTP-Method-Override: DELETE", "X-Method-Override: DELETE", "X-Original-URL: /admin", "X-Original-URI: /admin",
                "X-Rewrite-URL: /admin", "X-Real-IP: 10.0.0.1", "True-Client-IP: 10.0.0.1", "X-Tenant: other", "X_Tenant: other", "X-Kept: yes",
            ]
            for extra in [[], [Self.toTheHandlers]] {
                let answer = try await Self.exchange(site, ["GET /page HTTP/1.1", "Host: a"] + claimed + extra)
                let echoed = try EchoedRequest(json: ByteBuffer(string: answer.body))
                let passed = echoed.headers.keys.filter { name in name != "x-kept" && claimed.contains { $0.lowercased().hasPrefix(name + ":") } }
                #expect(passed.isEmpty, "\(extra): \(passed)")
                #expect(echoed.values("x-kept") == ["yes"])
                #expect(echoed.values("host").count == 1 && echoed.values("host") != ["a"], "the upstream's Host is siwa's")
            }
        }
    }

    /// The fields frameworks, proxies and CDNs read as the client's address (the survey in docs/front.md, "The
    /// client's address"), written here apart from siwa's own list so that a name dropped there fails here.
    static let clientAddressFamily = [
        "X-Real-IP", "True-Client-IP", "X-Client-IP", "Client-IP", "X-Cluster-Client-IP", "X-Forwarded", "Forwarded-For", "X-Forwarded-For",
        "Forwarded", "X-Original-Forwarded-For", "X-Original-For", "Proxy-Client-IP", "WL-Proxy-Client-IP", "Remote-Addr", "Remote-Address",
        "X-Remote-IP", "X-Remote-Addr", "X-Originating-IP", "X-ProxyUser-Ip", "X-Coming-From", "Via", "HTTP-Client-IP", "HTTP-X-Forwarded-For",
        "HTTP-X-Forwarded", "HTTP-X-Cluster-Client-IP", "HTTP-Forwarded-For", "HTTP-Forwarded", "HTTP-Via", "CF-Connecting-IP",
        "CF-Connecting-IPv6", "CF-Pseudo-IPv4", "Fastly-Client-IP", "Fly-Client-IP", "X-Appengine-User-IP", "X-Appengine-Remote-Addr",
        "X-Azure-ClientIP", "X-Azure-SocketIP", "CloudFront-Viewer-Address", "DO-Connecting-IP", "X-Envoy-External-Address",
        "X-Vercel-Forwarded-For", "X-Vercel-Proxied-For", "X-Nf-Client-Connection-Ip", "Incap-Client-IP", "X-Sucuri-ClientIP", "X-0-Client-IP",
        "Oxygen-Buyer-IP", "Ali-Cdn-Real-Ip",
    ]

    /// Names next to the family that are not addresses, and must pass.
    static let clientAddressNeighbours = ["X-Azure-Ref", "X-Azure-FDID", "CF-Ray", "CF-IPCountry", "X-Client-Name", "Client-Hints", "X-Forwarder-Note", "Via-Note"]

    @Test("every field frameworks and CDNs read as the client's address is stripped, in any casing and either spelling, with generated values, by either carrier; its non-address neighbours pass")
    func clientAddressFamilyStripped() async throws {
        var random = SplitMix(seed: 26_034)
        func casing(_ name: String) -> String {
            String(name.map { random.below(2) == 0 ? Character($0.lowercased()) : Character($0.uppercased()) })
        }
        let values = ["6.6.6.6", "6.6.6.6, 10.0.0.1", "2001:db8::6", "[2001:db8::6]:443", "unknown", "for=6.6.6.6", "6.6.6.6:1234", "1.1 evil.example"]
        try await UpstreamProxyTests.withEchoSite(["skip_auth_routes": "^/"]) { site, _ in
            for round in 0..<4 {
                var lines: [String] = []
                for name in Self.clientAddressFamily {
                    let spelled = round % 2 == 0 ? name : name.replacingOccurrences(of: "-", with: "_")
                    lines.append("\(casing(spelled)): \(values[random.below(values.count)])")
                }
                let neighbours = Self.clientAddressNeighbours.map { "\(casing($0)): kept" }
                for extra in [[], [Self.toTheHandlers]] {
                    let answer = try await Self.exchange(site, ["GET /page HTTP/1.1", "Host: a"] + lines + neighbours + extra)
                    let echoed = try EchoedRequest(json: ByteBuffer(string: answer.body))
                    let family = Set(Self.clientAddressFamily.flatMap { [$0.lowercased(), $0.lowercased().replacingOccurrences(of: "-", with: "_")] })
                    let passed = echoed.headers.keys.filter { family.contains($0) && $0 != "x-forwarded-for" }
                    #expect(passed.isEmpty, "round \(round) \(extra): a client's address claim reached the upstream: \(passed)")
                    #expect(echoed.values("x-forwarded-for") == ["127.0.0.1"], "round \(round) \(extra): \(echoed.values("x-forwarded-for"))")
                    for neighbour in Self.clientAddressNeighbours {
                        #expect(echoed.values(neighbour.lowercased()) == ["kept"], "round \(round) \(extra): \(neighbour) was stripped")
                    }
                }
            }
        }
    }

    // MARK: Limits on time and count

    @Test("a request head that does not arrive whole within client_header_timeout_ms gets 408 and the connection ends, however its bytes trickle in; an idle kept-alive connection ends after client_idle_timeout_ms; both in the plain server and with --upstream")
    func clientTimeLimits() async throws {
        // Not tighter: a connection opened and not yet written on is idle, and a test process starved for 600 ms under
        // the suite's load would see it ended before its request (seen once with curl at the plain port).
        let limits: [String: String?] = ["client_header_timeout_ms": "1000", "client_idle_timeout_ms": "2000"]
        try await withEchoUpstream { port in
            for upstream in [nil, "http://127.0.0.1:\(port)"] as [String?] {
                var settings = limits
                settings["skip_auth_routes"] = upstream == nil ? nil : "^/"
                try await UpstreamProxyTests.withSite(upstream: upstream ?? "", settings.merging(upstream == nil ? ["upstream": nil] : [:]) { $1 }) { site, _ in
                    let started = ContinuousClock.now
                    // A byte more within the limit does not extend it: the limit counts from the head's first byte.
                    let trickled = try await RawSocket.exchange(port: site.port, "GET /healthz HT", then: ["T"])
                    #expect(trickled.hasPrefix("HTTP/1.1 408 Request Timeout\r\n"), "\(upstream ?? "plain"): \(trickled)")
                    // Ended by siwa, not by the reader's own 20 s limit (the time itself is no target under load).
                    #expect(ContinuousClock.now - started < .seconds(15))
                    // A connection that asked one thing and then nothing: answered, then ended when idle.
                    let idleStart = ContinuousClock.now
                    let answered = try await RawSocket.exchange(port: site.port, "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
                    // One answer, the 200: a 408 would be a second status line (a bare "408" can be part of a port).
                    #expect(answered.hasPrefix("HTTP/1.1 200 OK") && answered.components(separatedBy: "HTTP/1.1 ").count == 2, "\(answered)")
                    #expect(ContinuousClock.now - idleStart >= .milliseconds(1950), "ended before client_idle_timeout_ms")
                    // A connection that never says a thing ends too, without an answer.
                    let silent = try await RawSocket.exchange(port: site.port, "")
                    #expect(silent.isEmpty, "\(silent)")
                }
            }
        }
    }

    @Test("a request body that stops arriving gets 408 after client_body_timeout_ms and the connection ends, on both carriers, in the plain server and with --upstream, whose one place is then free again (the next request reaches the upstream: its 504, not the 503 of a request that waited in line); a body that keeps coming is read whole, however long it takes in all")
    func bodyTimeLimit() async throws {
        try await SilentListener.run { port in
            for upstream in [nil, "http://127.0.0.1:\(port)"] as [String?] {
                var settings: [String: String?] = ["client_body_timeout_ms": "3000", "upstream_timeout_ms": "3000", "upstream_max_connections": "1"]
                settings["skip_auth_routes"] = upstream == nil ? nil : "^/"
                try await UpstreamProxyTests.withSite(upstream: upstream ?? "", settings.merging(upstream == nil ? ["upstream": nil] : [:]) { $1 }) { site, _ in
                    let path = upstream == nil ? "/auth/apple/callback" : "/upload"
                    let head = "POST \(path) HTTP/1.1\r\nHost: a\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 250\r\n"
                    for extra in ["", Self.toTheHandlers + "\r\n"] {
                        let started = ContinuousClock.now
                        let cut = try await RawSocket.exchange(port: site.port, head + extra + "\r\ncode=abcde")
                        #expect(cut.hasPrefix("HTTP/1.1 408 Request Timeout\r\n") && cut.contains("\r\nConnection: close\r\n"), "\(upstream ?? "plain") \(extra): \(cut)")
                        // Ended by siwa, not by the reader's own 60 s limit.
                        #expect(ContinuousClock.now - started < .seconds(45), "\(upstream ?? "plain") \(extra)")
                        // 250 bytes, 10 every 200 ms: 5 s in all, more than the limit, each pause far less.
                        let steady = try await RawSocket.exchange(
                            port: site.port, head + extra + "Connection: close\r\n\r\ncode=abcde", then: Array(repeating: "0123456789", count: 24)
                        )
                        let status = Int(steady.dropFirst(9).prefix(3)) ?? 0
                        #expect(status != 408 && status != 0, "\(upstream ?? "plain") \(extra): \(steady.prefix(300))")
                        // In front of the silent upstream, the whole body went there and the upstream's limit answered.
                        if upstream != nil { #expect(status == 504, "\(extra): \(steady.prefix(300))") }
                    }
                }
            }
        }
    }

    @Test("a client that stops reading a long answer has its connection ended after client_send_timeout_ms, on both carriers, and the one upstream connection it held is free again: the next request is answered (before, it waited in line until its 503); a client that reads slowly, never pausing as long, gets the whole answer")
    func sendTimeLimit() async throws {
        let size = 16 << 20
        let big = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: \(size)\r\n\r\n" + String(repeating: "0123456789abcdef", count: size / 16)
        try await ScriptedUpstream.run(extra: ["/big": (big, false)]) { upstream in
            let settings: [String: String?] = ["skip_auth_routes": "^/", "client_send_timeout_ms": "3000", "upstream_max_connections": "1", "upstream_timeout_ms": "60000"]
            try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(upstream.port)", settings) { site, visit in
                for extra in ["", Self.toTheHandlers] {
                    try await withScratchDirectory("siwa-send-stall") { directory in
                        let output = directory.appendingPathComponent("client.out")
                        try await ChildProcess.withRunning(
                            try ExternalTool.authlibPython.executable(), arguments: ["-c", UpstreamHTTP2Tests.rawClient, String(site.port), "/big", "\r\n\r\n", "stall", extra],
                            output: output, startupTimeLimit: .seconds(120), ready: { await UpstreamHTTP2Tests.saysReady(output, "stalled") }
                        ) { _ in
                            // The stalled client holds the one place until siwa ends its connection; this request waits in
                            // line for it (up to upstream_timeout_ms, 60 s, then a 503).
                            let next = try await visit.send(site.url("/length"))
                            #expect(next.status == 200 && next.text == "twelve bytes", "\(extra): \(next.status) \(next.text.prefix(200))")
                        }
                    }
                }
                // The slow reader on one carrier: the limit is the connection's, whatever relays the answer.
                let slow = try await ChildProcess.run(
                    try ExternalTool.authlibPython.executable(), arguments: ["-c", UpstreamHTTP2Tests.rawClient, String(site.port), "/big", "\r\n\r\n", "slow"], environment: [:]
                )
                #expect(slow.stdout.contains("read \(size)"), "\(slow)")
                let metrics = try await visit.send(site.url("/metrics")).text
                #expect(metrics.contains("siwa_client_limit_total{limit=\"client_send_timeout_ms\"} 2"), "\(metrics.split(separator: "\n").filter { $0.contains("limit_total") })")
            }
        }
    }

    @Test("a request in progress is not cut by the client's limits: an upstream slower than client_header_timeout_ms still answers, and so does the 504 after upstream_timeout_ms")
    func requestInProgressIsNotCut() async throws {
        try await SilentListener.run { port in
            let settings: [String: String?] = ["skip_auth_routes": "^/", "upstream_timeout_ms": "2500", "client_header_timeout_ms": "200", "client_idle_timeout_ms": "1200"]
            try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(port)", settings) { site, _ in
                for extra in [[], [Self.toTheHandlers]] {
                    let answer = try await Self.exchange(site, ["GET /slow HTTP/1.1", "Host: a", "Accept: text/html"] + extra)
                    #expect(answer.status == 504, "\(extra): \(answer.head)")
                }
            }
        }
    }

    @Test("an upstream whose answer goes silent midway is ended after upstream_idle_timeout_ms, on either carrier: the client's connection ends with what came")
    func silentUpstreamBodyIsEnded() async throws {
        try await ScriptedUpstream.run { upstream in
            let settings: [String: String?] = ["skip_auth_routes": "^/", "upstream_idle_timeout_ms": "400"]
            try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(upstream.port)", settings) { site, visit in
                for extra in ["", Self.toTheHandlers + "\r\n"] {
                    let started = ContinuousClock.now
                    let text = try await RawSocket.exchange(port: site.port, "GET /stall HTTP/1.1\r\nHost: a\r\n\(extra)\r\n")
                    let waited = ContinuousClock.now - started
                    #expect(text.hasPrefix("HTTP/1.1 200 OK") && text.hasSuffix("partial"), "\(extra): \(text)")
                    #expect(waited >= .milliseconds(350) && waited < .seconds(10), "\(extra): ended after \(waited)")
                }
                #expect(try await visit.send(site.url("/length")).text == "twelve bytes", "siwa stopped answering")
            }
        }
    }

    @Test("upstream_max_connections: a request finding every place taken waits in line for one; one that finds the line full gets the 503 page at once, on either carrier; siwa's own paths are not held up")
    func upstreamPlacesAreCounted() async throws {
        try await SilentListener.run { port in
            let settings: [String: String?] = ["skip_auth_routes": "^/", "upstream_timeout_ms": "1500", "upstream_max_connections": "1"]
            try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(port)", settings) { site, visit in
                async let first = Self.exchange(site, ["GET /a HTTP/1.1", "Host: a", "Accept: text/html"])
                try await Task.sleep(for: .milliseconds(300))
                async let second = Self.exchange(site, ["GET /b HTTP/1.1", "Host: a", "Accept: text/html"])
                try await Task.sleep(for: .milliseconds(300))
                for extra in [[], [Self.toTheHandlers]] {
                    let started = ContinuousClock.now
                    let refused = try await Self.exchange(site, ["GET /c HTTP/1.1", "Host: a", "Accept: text/html"] + extra)
                    #expect(refused.status == 503, "\(extra): \(refused.head)")
                    #expect(refused.body.contains("The site is busy"), "\(refused.body.prefix(300))")
                    #expect(ContinuousClock.now - started < .milliseconds(1000), "the line was full: no wait")
                }
                #expect(try await visit.send(site.url("/healthz")).status == 200)
                // The first holds its place until its 504; the second waited, got it, and timed out in turn.
                #expect(try await first.status == 504)
                #expect(try await second.status == 504)
            }
        }
    }

    @Test("an HTTP/1.0 check (nginx's auth_request asks in HTTP/1.0 unless told otherwise) is answered from memory by the byte path: kept alive when it asks, ended otherwise, each answer saying which")
    func http10ChecksFromMemory() async throws {
        try await UpstreamProxyTests.withEchoSite { site, visit in
            let session = try await visit.signIn(site, user: site.user("Ada")).session
            // The first check puts the session in memory (the handlers answer it).
            _ = try await visit.send(site.url("/auth/check"), cookies: ["siwa_session": session])
            let before = try await BytePathTests.counted("check", site, visit)
            let check = "GET /auth/check HTTP/1.0\r\nHost: a\r\nCookie: siwa_session=\(session)\r\n"
            let text = try await RawSocket.exchange(port: site.port, check + "Connection: keep-alive\r\n\r\n" + check + "\r\n")
            let answers = text.components(separatedBy: "HTTP/1.1 202 Accepted\r\n").dropFirst()
            #expect(answers.count == 2, "\(text)")
            #expect(answers.first?.contains("Connection: keep-alive\r\n") == true, "\(text)")
            #expect(answers.last?.contains("Connection: close\r\n") == true, "\(text)")
            #expect(try await BytePathTests.counted("check", site, visit) == before + 2)
        }
    }

    @Test("an upload the handlers carry to an upstream that is down, or that answers before reading it, is answered at once and gives its place back: with upstream_max_connections 1 the next request still finds one")
    func uploadsThatFailGiveTheirPlaceBack() async throws {
        let body = String(repeating: "u", count: 200 * 1024)
        try await withClosedLoopbackPort { port in
            let settings: [String: String?] = ["skip_auth_routes": "^/", "upstream_max_connections": "1", "upstream_timeout_ms": "3000"]
            try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(port)", settings) { site, _ in
                for round in 0..<3 {
                    let started = ContinuousClock.now
                    let answer = try await Self.exchange(site, ["POST /upload HTTP/1.1", "Host: a", "Accept: text/html", "Content-Length: \(body.utf8.count)"], body: body)
                    #expect(answer.status == 502, "round \(round): \(answer.head)")
                    #expect(ContinuousClock.now - started < .seconds(10), "round \(round) waited")
                }
            }
        }
        try await ScriptedUpstream.run { upstream in
            let settings: [String: String?] = ["skip_auth_routes": "^/", "upstream_max_connections": "1", "upstream_timeout_ms": "3000"]
            try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(upstream.port)", settings) { site, visit in
                for round in 0..<3 {
                    let answer = try await Self.exchange(site, ["POST /early HTTP/1.1", "Host: a", "Content-Length: \(body.utf8.count)"], body: body)
                    #expect(answer.status == 200 && answer.body.hasPrefix("early"), "round \(round): \(answer.head)")
                }
                #expect(try await visit.send(site.url("/length")).text == "twelve bytes", "the place was not given back")
            }
        }
    }

    @Test("an answer that comes before the request's body has all arrived (a 401 to an upload) does not start the client's header limit on the body's bytes: no 408 on that connection")
    func earlyAnswerDoesNotTimeTheBody() async throws {
        let settings: [String: String?] = ["client_header_timeout_ms": "300", "client_idle_timeout_ms": "1500"]
        try await UpstreamProxyTests.withEchoSite(settings) { site, _ in
            let text = try await RawSocket.exchange(
                port: site.port, "POST /upload HTTP/1.1\r\nHost: a\r\nAccept: application/json\r\nContent-Length: 40\r\n\r\n0123456789",
                then: ["0123456789", "0123456789", "0123456789"]
            )
            #expect(text.hasPrefix("HTTP/1.1 401"), "\(text.prefix(200))")
            #expect(!text.contains("HTTP/1.1 408"), "a 408 for the body's bytes: \(text)")
        }
    }
}
