import AppleIDEmulator
import DoorHTTP
import Foundation
import NIOCore
@testable import SignInServer
import Testing
import TestSupport

/// HTTP/2 as a transport under the one door (issue 36): every stream is read as the HTTP/1.1 request it carries, by
/// the same reader and the same policy. Requests are sent with a raw HTTP/2 client (`h2_requests.py`), which sends
/// what it is given, as a careless or hostile client would.
@Suite("HTTP/2 under the one door: generated targets and heads")
struct HTTP2DoorTests {
    struct Sent: Encodable {
        var method = "GET"
        var path: String
        var authority: String?
        var fields: [[String]] = []
        var body: String?
        var split = false
        /// The whole head, pseudo-header fields included, in its order (instead of `method`, `path` and `fields`).
        var head: [[String]]?
        /// Fields sent as trailers after the body (or after the head).
        var trailers: [[String]]?
    }

    struct Received: Decodable {
        let status: Int?
        let fields: [[String]]
        let body: String
        let reset: Int?
        let closed: Bool
        let goaway: Int?

        func values(_ name: String) -> [String] { fields.filter { $0.first == name }.map { $0.count > 1 ? $0[1] : "" } }
    }

    /// Sends `requests` on one HTTP/2 connection, one stream after the other; `window`: the client's flow-control
    /// window, opened again as it reads.
    static func send(_ requests: [Sent], https: Int, cert: String, window: Int? = nil) async throws -> [Received] {
        let arguments = [String(https), "auth.localhost", cert] + (window.map { [String($0)] } ?? [])
        return try await ThirdPartyScript.run("h2_requests.py", arguments, sending: requests, as: [Received].self)
    }

    /// The echo upstream behind `siwa serve --upstream` on its own HTTPS, `/public/` open to all.
    static func withSite(_ body: (LocalSite, _ https: Int, _ cert: String) async throws -> Void) async throws {
        try await TestCertificate.withSelfSigned { cert, key in
            let https = try await FreePorts.reserve(1)[0]
            try await withEchoUpstream { port in
                let settings: [String: String?] = [
                    "skip_auth_routes": "GET=^/public/,POST=^/public/", "tls_cert_file": cert, "tls_key_file": key, "tls_domains": "auth.localhost",
                    "https_port": String(https),
                ]
                try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(port)/app", settings) { site, _ in
                    try await body(site, https, cert)
                }
            }
        }
    }

    @Test("generated targets over HTTP/2, by every carrier under it: the upstream receives the normalized target the rule was matched on, or nothing reaches it and the client gets 400 (or, for a :path no request line can carry, a reset stream)")
    func generatedTargets() async throws {
        try await Self.withSite { site, https, cert in
            let targets = GeneratedTargets.make(count: 160, seed: 26, prefix: "public/") + GeneratedTargets.make(count: 40, seed: 2026)
            // The byte path (a bodiless GET, a POST with a small body of known length), the handlers (a GET with a field
            // outside the byte path's subset, a POST whose body has no length: chunked on the way in).
            let carriers: [(String, (String) -> Sent)] = [
                ("byte path", { Sent(path: $0, fields: [["accept", "application/json"]]) }),
                ("byte path with a body", { Sent(method: "POST", path: $0, fields: [["accept", "application/json"], ["content-length", "4"]], body: "body") }),
                ("handlers", { Sent(path: $0, fields: [["accept", "application/json"], ["x-note", "caf\u{e9}"]]) }),
                ("handlers with a body", { Sent(method: "POST", path: $0, fields: [["accept", "application/json"]], body: "body", split: true) }),
            ]
            var forwarded = 0
            var refused = 0
            for (carrier, make) in carriers {
                let answers = try await Self.send(targets.map(make), https: https, cert: cert)
                #expect(answers.count == targets.count)
                for (raw, answer) in zip(targets, answers) {
                    let expected = try? RequestTarget(raw, host: "auth.localhost")
                    let carriable = !raw.isEmpty && raw.utf8.allSatisfy { (0x21...0x7E).contains($0) }
                    #expect(!answer.closed, "\(carrier) \(raw): the connection ended")
                    guard carriable else {
                        // A blank or a byte past ASCII in :path: malformed (RFC 9113 §8.1.1), its stream reset.
                        #expect(answer.reset == 1 && answer.status == nil, "\(carrier) \(raw): \(answer)")
                        refused += 1
                        continue
                    }
                    guard answer.status == 200 else {
                        if let expected, SiwaPaths(publicDirectory: "/nonexistent").contains(expected.path) == false {
                            #expect(answer.status == 401 && !expected.path.hasPrefix("/public/"), "\(carrier) \(raw): \(answer)")
                        } else if expected == nil {
                            #expect(answer.status == 400 || answer.reset == 1, "\(carrier) \(raw) (refused by the door): \(answer)")
                        }
                        continue
                    }
                    let echoed = try EchoedRequest(json: ByteBuffer(string: answer.body))
                    let received = String(echoed.path.dropFirst("/app".count))
                    #expect(echoed.path.hasPrefix("/app/"), "\(carrier) \(raw) reached the upstream as \(echoed.path)")
                    #expect(received == expected?.forwarded, "\(carrier) \(raw): the upstream received \(received), the rule saw \(expected?.forwarded ?? "nothing")")
                    #expect((try? RequestTarget(received, host: "auth.localhost"))?.path.hasPrefix("/public/") == true, "\(carrier) \(raw): passed without a sign-in as \(received)")
                    if carrier.hasSuffix("body") { #expect(echoed.bodyBytes == 4, "\(carrier) \(raw): \(echoed.bodyBytes) body bytes") }
                    forwarded += 1
                }
            }
            #expect(forwarded > 100, "too few generated targets were forwarded to compare: \(forwarded)")
            #expect(refused > 0, "no generated target had a byte no request line carries")
        }
    }

    @Test("heads no HTTP/1.1 reader could take the same way (a connection's field, TE other than trailers, CR, LF or NUL in a value, a name that is no token or has uppercase, a Host naming another authority, an odd method, an extended CONNECT for another protocol or on another method, pseudo-headers out of place, repeated, missing or unknown, trailers with a pseudo-header or a connection's field, a Content-Length empty, listed, repeated, signed or with blanks) reset their stream with PROTOCOL_ERROR (or, for what HPACK itself refuses, end the connection) and reach nothing; the next request is answered")
    func malformedHeads() async throws {
        try await Self.withSite { site, https, cert in
            var generator = SplitMix64(seed: 36)
            var bad: [(String, Sent)] = []
            for name in ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"] {
                for value in ["close", "chunked", "h2c", "x-note"] { bad.append(("\(name): \(value)", Sent(path: "/public/a", fields: [[name, value]]))) }
            }
            for value in ["gzip", "trailers, gzip", "deflate"] { bad.append(("te: \(value)", Sent(path: "/public/a", fields: [["te", value]]))) }
            // CR, LF and NUL at generated places of generated fields, siwa's identity and address fields among them.
            let names = ["x-note", "cookie", "x-forwarded-for", "x-forwarded-host", "x-siwa-user", "accept", "authorization", "content-type"]
            for _ in 0..<24 {
                let name = generator.pick(names)
                let insert = ["\r", "\n", "\u{0}", "\r\n", "\r\nX-Siwa-User: ada@example.com"][Int(generator.next() % 5)]
                let at = Int(generator.next() % 6)
                let value = String("abcdef".prefix(at)) + insert + String("abcdef".dropFirst(at))
                bad.append(("\(name) with \(insert.debugDescription) at \(at)", Sent(path: "/public/a", fields: [[name, value]])))
            }
            for name in ["x note", "x:note", "x\"note", "x(note)", "", "x\u{e9}"] { bad.append(("name \(name.debugDescription)", Sent(path: "/public/a", fields: [[name, "1"]]))) }
            bad.append(("a Host naming another authority", Sent(path: "/public/a", fields: [["host", "evil.example"]])))
            for method in ["GE T", "GET\r\nX: 1", "", "G(ET"] { bad.append(("method \(method.debugDescription)", Sent(method: method, path: "/public/a"))) }
            // RFC 8441's extended CONNECT (announced here, in front of an upstream) carried wrongly: `:protocol` on
            // another method, a protocol siwa does not carry, CR or LF in it, a connection's field beside it.
            let connects: [(String, String, [[String]])] = [
                ("GET", "websocket", []), ("CONNECT", "", []), ("CONNECT", "connect-udp", []), ("CONNECT", "websocket\r\nX-Siwa-User: ada", []),
                ("CONNECT", "websocket", [["upgrade", "websocket"]]), ("CONNECT", "websocket", [["connection", "upgrade"]]),
                ("CONNECT", "websocket", [["sec-websocket-key", "a\r\nX-Siwa-User: ada"]]),
                // The client ends its side with the head (this client sends END_STREAM on a head without a body).
                ("CONNECT", "websocket", []),
            ]
            for (method, name, fields) in connects {
                bad.append(("\(method) with :protocol \(name.debugDescription) \(fields)", Sent(method: method, path: "/public/ws", fields: [[":protocol", name]] + fields)))
            }
            // RFC 9113 §8.3's rules of pseudo-header fields (siwa's own reading checks them, `HTTP2RequestHead`), and
            // trailers that are no trailers.
            let good = [[":method", "GET"], [":scheme", "https"], [":authority", "auth.localhost"], [":path", "/public/a"]]
            let heads: [(String, [[String]])] = [
                ("a pseudo-header after a field", [good[0], good[1], good[2], ["accept", "*/*"], good[3]]),
                ("two :path", good + [[":path", "/public/b"]]), ("no :scheme", good.filter { $0[0] != ":scheme" }),
                ("no :path", good.filter { $0[0] != ":path" }), ("no :method", good.filter { $0[0] != ":method" }),
                ("an empty :path", [good[0], good[1], good[2], [":path", ""]]), (":status in a request", [[":status", "200"]] + good),
                ("an unknown pseudo-header", good + [[":tenant", "other"]]), ("a blank in :path", [good[0], good[1], good[2], [":path", "/public/a HTTP/1.1"]]),
                ("a CONNECT with :path", [[":method", "CONNECT"], [":authority", "auth.localhost:443"], [":path", "/"]]),
                ("an uppercase name", good + [["X-Siwa-User", "ada@example.com"]]),
            ]
            for (what, head) in heads { bad.append((what, Sent(path: "", head: head))) }
            for (what, trailers) in [("a pseudo-header in trailers", [[":path", "/admin"]]), ("a connection's field in trailers", [["connection", "close"]]),
                ("LF in a trailer", [["x-sum", "1\nx-siwa-user: ada"]])] {
                bad.append((what, Sent(method: "POST", path: "/public/a", body: "hello", trailers: trailers)))
            }
            // A length an HTTP/1.1 reader would read otherwise than NIO's HTTP/2 handler: empty (no length to NIO), a
            // list or two fields of the same (one to NIO), a sign, blanks around it (NIO trims them). The DATA is a
            // request of its own.
            let smuggled = "GET /public/smuggled HTTP/1.1\r\nhost: auth.localhost\r\n\r\n"
            let length = smuggled.utf8.count
            for lengths in [[""], ["\(length), \(length)"], ["\(length)", "\(length)"], ["+\(length)"], [" \(length)"], ["\(length) "], ["\(length)\t"]] {
                bad.append((
                    "Content-Length \(lengths)",
                    Sent(method: "POST", path: "/public/a", fields: lengths.map { ["content-length", $0] }, body: smuggled)
                ))
            }
            // A length on a CONNECT (which has no content): its DATA would be read as a body.
            bad.append(("CONNECT :protocol websocket with a Content-Length", Sent(method: "CONNECT", path: "/public/ws", fields: [[":protocol", "websocket"], ["content-length", "5"]], body: "hello")))
            // Each malformed head, then a good one on the same connection: answered, and the only one the upstream saw.
            var requests: [Sent] = []
            for (_, sent) in bad {
                requests.append(sent)
                requests.append(Sent(path: "/public/after", fields: [["accept", "application/json"]]))
            }
            let answers = try await Self.send(requests, https: https, cert: cert)
            #expect(answers.count == requests.count)
            for (index, (what, _)) in bad.enumerated() {
                let refused = answers[2 * index]
                let after = answers[2 * index + 1]
                // Its stream reset with PROTOCOL_ERROR; a head NIO's HPACK decoder refuses (an empty name) ends the
                // connection with GOAWAY instead, and the next request goes on a new one.
                #expect(refused.status == nil && (refused.reset == 1 || (refused.closed && [1, 9].contains(refused.goaway))), "\(what): \(refused)")
                #expect(after.status == 200, "after \(what): \(after)")
                let echoed = try? EchoedRequest(json: ByteBuffer(string: after.body))
                #expect(echoed?.path == "/app/public/after" && echoed?.values("x-siwa-user").isEmpty == true, "after \(what): \(after.body.prefix(300))")
            }
        }
    }

    @Test("Cookie fields split as HTTP/2 allows (RFC 9113 §8.2.3) reach the upstream as one Cookie, siwa's own cookies taken out of it as over HTTP/1.1")
    func splitCookies() async throws {
        try await Self.withSite { site, https, cert in
            let answers = try await Self.send(
                [
                    Sent(path: "/public/c", fields: [["cookie", "a=1"], ["cookie", "__Host-siwa_session=forged"], ["cookie", "b=2; c=3"], ["accept", "application/json"]]),
                    Sent(path: "/public/c", fields: [["cookie", "a=1"], ["accept", "application/json"]]),
                ],
                https: https, cert: cert
            )
            let split = try EchoedRequest(json: ByteBuffer(string: answers[0].body))
            #expect(split.values("cookie") == ["a=1; b=2; c=3"], "\(split.headers)")
            let single = try EchoedRequest(json: ByteBuffer(string: answers[1].body))
            #expect(single.values("cookie") == ["a=1"], "\(single.headers)")
        }
    }

    /// What `h2_websocket.py` saw of a WebSocket over HTTP/2.
    struct WebSocketOutcome: Decodable {
        struct Message: Decodable, Equatable {
            let opcode: Int
            let text: String?
            let hex: String?
        }

        let enabled: Int?
        let status: Int?
        let fields: [[String]]
        let body: String
        let messages: [Message]
        let close_code: Int?
        let ended: Bool
        let reset: Int?

        func values(_ name: String) -> [String] { fields.filter { $0.first == name }.map { $0.count > 1 ? $0[1] : "" } }
    }

    /// A session as siwa stores one (the SHA-256 of its value) for `person`, written into the site's SQLite file: the
    /// cookie's value.
    static func seedSession(_ site: LocalSite, for person: EmulatorConfiguration.User) async throws -> String {
        let value = "h2websocket" + UUID().uuidString.replacingOccurrences(of: "-", with: "")
        let seed = """
            import hashlib, sqlite3, sys, time
            db, value, sub, email = sys.argv[1:5]
            now = time.time()
            c = sqlite3.connect(db, timeout=30)
            with c:
                c.execute("INSERT OR IGNORE INTO users (sub, email, is_private_email, first_name, last_name, created_at, last_sign_in_at) VALUES (?, ?, 0, 'Ada', 'L', ?, ?)", (sub, email, now, now))
                c.execute("INSERT INTO sessions (id_hash, sub, csrf_token, created_at, expires_at) VALUES (?, ?, 'csrf', ?, ?)", (hashlib.sha256(value.encode()).hexdigest(), sub, now, now + 3600))
            """
        let seeded = try await ChildProcess.run(
            try ExternalTool.authlibPython.executable(), arguments: ["-c", seed, site.databasePath, value, person.sub, person.email], environment: [:]
        )
        try #require(seeded.status == 0, "\(seeded.stderr)")
        return value
    }

    /// Opens a WebSocket on `path` over HTTP/2 with `cookie` and talks to the echo upstream through it.
    static func webSocket(
        https: Int, cert: String, path: String, cookie: String?, protocol: String = "websocket", window: Int? = nil
    ) async throws -> WebSocketOutcome {
        let arguments = [String(https), "auth.localhost", cert, path, cookie ?? "", `protocol`] + (window.map { [String($0)] } ?? [])
        return try await ThirdPartyScript.run("h2_websocket.py", arguments, timeLimit: .seconds(60))
    }

    @Test("a WebSocket over HTTP/2 (RFC 8441): siwa announces extended CONNECT in front of an upstream; without a session the stream is answered 401 and the upstream sees nothing; with one, the upstream's handshake carries the person and no forged identity, the stream is answered 200 with the upstream's subprotocol, and messages, both ways, and the close code go end to end, through a 16-byte window too; an upstream that does not switch has its own answer passed on (its 400); siwa's own path, which would answer 200, and another :protocol are reset")
    func webSocketOverHTTP2() async throws {
        try await TestCertificate.withSelfSigned { cert, key in
            let https = try await FreePorts.reserve(1)[0]
            try await withWebSocketEchoUpstream { port, tally in
                let settings: [String: String?] = ["tls_cert_file": cert, "tls_key_file": key, "tls_domains": "auth.localhost", "https_port": String(https)]
                try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(port)", settings) { site, _ in
                    let anonymous = try await Self.webSocket(https: https, cert: cert, path: "/ws/chat", cookie: nil)
                    #expect(anonymous.enabled == 1, "SETTINGS_ENABLE_CONNECT_PROTOCOL")
                    #expect(anonymous.status == 401, "\(anonymous)")
                    #expect(anonymous.ended)
                    #expect(tally.requests == 0, "the upstream was contacted without a session")

                    let ada = site.user("Ada")
                    let value = try await Self.seedSession(site, for: ada)
                    let opened = try await Self.webSocket(https: https, cert: cert, path: "/ws/chat?room=2", cookie: "__Host-siwa_session=\(value); theme=dark")
                    #expect(opened.status == 200, "\(opened)")
                    #expect(opened.values("sec-websocket-protocol") == ["echo.v2"])
                    #expect(opened.values("sec-websocket-accept").isEmpty && opened.values("upgrade").isEmpty, "HTTP/2 carries no handshake fields: \(opened.fields)")
                    #expect(opened.values("set-cookie").isEmpty, "the upstream's answer may not set siwa's session cookie")
                    try #require(opened.messages.count == 3, "\(opened)")
                    let handshake = try EchoedRequest(json: ByteBuffer(string: opened.messages[0].text ?? ""))
                    #expect(handshake.method == "GET" && handshake.path == "/ws/chat?room=2")
                    #expect(handshake.values("x-auth-request-user") == [ada.sub])
                    #expect(handshake.values("x-siwa-assertion").count == 1)
                    #expect(handshake.values("cookie") == ["theme=dark"], "siwa's cookie stays with siwa")
                    #expect(opened.messages[1] == .init(opcode: 1, text: "hello 李雷", hex: nil))
                    #expect(opened.messages[2] == .init(opcode: 2, text: nil, hex: "000102ff"))
                    #expect(opened.close_code == 4001)
                    #expect(opened.ended, "the stream ended after the close")
                    #expect(tally.requests == 1)

                    // A client whose window holds 16 bytes at a time: every message, and the upstream's close, still
                    // arrive, each in as many DATA frames as the window allows. (One byte at a time took a round trip
                    // per byte of the first message, over 30 s under CI's load.)
                    let narrow = try await Self.webSocket(https: https, cert: cert, path: "/ws/chat", cookie: "__Host-siwa_session=\(value)", window: 16)
                    #expect(narrow.status == 200 && narrow.messages.count == 3, "\(narrow)")
                    #expect(narrow.close_code == 4001 && narrow.ended && narrow.reset == nil, "\(narrow)")
                    #expect(tally.requests == 2)

                    let refused = try await Self.webSocket(https: https, cert: cert, path: "/ws-refused", cookie: "__Host-siwa_session=\(value)")
                    #expect(refused.status == 400, "the upstream's own answer, not siwa's 502: \(refused)")
                    #expect(refused.ended && refused.messages.isEmpty)
                    #expect(tally.requests == 3)
                    // One of siwa's own paths answers with its page, which over RFC 8441 would read as an open
                    // WebSocket: reset instead.
                    let own = try await Self.webSocket(https: https, cert: cert, path: "/healthz", cookie: "__Host-siwa_session=\(value)")
                    #expect(own.status == nil && own.reset != nil, "\(own)")
                    #expect(own.messages.isEmpty)
                    let other = try await Self.webSocket(https: https, cert: cert, path: "/ws/chat", cookie: "__Host-siwa_session=\(value)", protocol: "connect-udp")
                    #expect(other.reset == 1, "PROTOCOL_ERROR: \(other)")
                    #expect(other.status == nil)
                    #expect(tally.requests == 3, "nothing reached the upstream")
                }
            }
        }
    }

    @Test("over HTTP/2 siwa makes the upstream handshake's key (the client has none) and checks the upstream's accept: an upstream whose 101 answers another key is not switched to; the stream is reset and the upstream's connection closed")
    func webSocketAcceptChecked() async throws {
        let closed = Collected(0)
        try await TestCertificate.withSelfSigned { cert, key in
            let https = try await FreePorts.reserve(1)[0]
            try await LoopbackServer.run({ try $0.addHandler(WrongAcceptUpstream(closed: closed)) }) { port, connections in
                let settings: [String: String?] = ["tls_cert_file": cert, "tls_key_file": key, "tls_domains": "auth.localhost", "https_port": String(https)]
                try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(port)", settings) { site, _ in
                    let value = try await Self.seedSession(site, for: site.user("Ada"))
                    let answer = try await Self.webSocket(https: https, cert: cert, path: "/ws/chat", cookie: "__Host-siwa_session=\(value)")
                    #expect(answer.status == nil && answer.reset != nil, "\(answer)")
                    #expect(answer.messages.isEmpty)
                    #expect(connections.value == 1, "the upstream was asked once")
                    let deadline = ContinuousClock.now + .seconds(15)
                    while closed.value < 1, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
                    #expect(closed.value == 1, "the upstream's connection was closed")
                }
            }
        }
    }

    /// A request of `h2_overlap.py`: sent `after` seconds from the first's start.
    struct Overlapping: Encodable {
        let path: String
        let after: Double
    }

    struct Overlapped: Decodable {
        let status: Int?
        let seconds: Double?
        let reset: Int?
    }

    @Test("streams under way together on one connection each keep their own upstream_timeout_ms: a silent upstream's streams, opened 0.4 s apart, are each answered 504 no sooner than the limit after their own start, and a stream answered meanwhile does not disturb them")
    func overlappingDeadlines() async throws {
        try await TestCertificate.withSelfSigned { cert, key in
            let https = try await FreePorts.reserve(1)[0]
            try await SilentListener.run { port in
                let settings: [String: String?] = [
                    "skip_auth_routes": "^/", "upstream_timeout_ms": "800", "tls_cert_file": cert, "tls_key_file": key, "tls_domains": "auth.localhost",
                    "https_port": String(https),
                ]
                try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(port)", settings) { _, _ in
                    let requests = [
                        Overlapping(path: "/first", after: 0), Overlapping(path: "/healthz", after: 0.2), Overlapping(path: "/second", after: 0.4),
                        Overlapping(path: "/third", after: 0.4),
                    ]
                    let answers = try await ThirdPartyScript.run(
                        "h2_overlap.py", [String(https), "auth.localhost", cert, "30"], sending: requests, as: [Overlapped].self
                    )
                    #expect(answers.count == 4)
                    #expect(answers.count == 4 && answers[1].status == 200, "\(answers)")
                    for index in [0, 2, 3] where index < answers.count {
                        #expect(answers[index].status == 504, "\(requests[index]): \(answers[index])")
                        #expect((answers[index].seconds ?? 0) >= 0.8, "\(requests[index]) was answered before its own limit: \(answers[index])")
                    }
                }
            }
        }
    }
}

/// An upstream that switches protocols to whatever it is asked, with an accept that answers no key.
private final class WrongAcceptUpstream: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    private let closed: Collected<Int>

    init(closed: Collected<Int>) { self.closed = closed }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let answer = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: answer)), promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        closed.withLock { $0 += 1 }
        context.fireChannelInactive()
    }
}
