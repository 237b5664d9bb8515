import Foundation
import Testing
import TestSupport

/// HTTP/2's floods against siwa's own HTTPS (issue 36), each sent by a raw client (ThirdParty/h2_floods.py, frames
/// written by hand): each ends the offending connection, counted by its limit, while another client's requests on
/// connections of their own are answered throughout.
@Suite("HTTP/2 floods end only the offending connection")
struct EdgeFloodTests {
    struct Outcome: Decodable {
        let flood: String
        let ended: String
        let closed: Bool?
        let seconds: Double
        let error_code: Int?
        let heads: Int?
        let refused: Int?
        let head_streams: [Int]?
        let reset_streams: [Int]?
        /// Stream (its number as text): the `:status` of its first HEADERS; the error code of its RST_STREAM.
        let statuses: [String: Int]?
        let reset_codes: [String: Int]?
        let last_stream: Int?
        /// An HTTP/1.1 answer's `Connection` field.
        let connection: String?
        /// How long after connecting the client found siwa's listener closed (`setup-*`).
        let refused_after: Double?
    }

    /// A site on HTTPS with a certificate of the test's own (no ACME), its stall and idle timeouts short. The handshake
    /// gets 12 s (`client_header_timeout_ms`): under the full suite's load a TLS 1.3 handshake can take over 2 s, and
    /// siwa then rightly closes the connection, whose client has finished its side and is sending its flood, before
    /// reading any of it; so a ping flood once ended with no limit counted at 2 s, and a header-list flood at 6 s (a
    /// fresh clone's run of 1396b29).
    static func withSite(_ more: [String: String?] = [:], _ body: (LocalSite, _ cert: String, _ https: Int) async throws -> Void) async throws {
        try await TestCertificate.withSelfSigned { cert, key in
            let https = try await FreePorts.reserve(1)[0]
            try await LocalSite.run(settings: [
                "tls_cert_file": cert, "tls_key_file": key, "tls_domains": "auth.localhost", "https_port": String(https),
                "h2_stall_timeout_ms": "2000", "client_idle_timeout_ms": "3000", "client_header_timeout_ms": "12000",
            ].merging(more) { $1 }) { site in
                try await body(site, cert, https)
            }
        }
    }

    /// Whether this process (siwa, run in it) has accepted the TCP connection to `port` from the local port `from`:
    /// in /proc/net/tcp a connection still in a listener's queue has no socket yet (inode 0). Read to its end through a
    /// file handle: `String(contentsOfFile:)` reads a /proc file's first 4 KB only (it reports no size), which under the
    /// suite's load held a few dozen of the machine's connections.
    static func accepted(port: Int, from client: Int) -> Bool {
        guard let bytes = try? FileHandle(forReadingFrom: URL(fileURLWithPath: "/proc/net/tcp")).readToEnd() else { return false }
        for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ")
            guard fields.count > 9, let local = fields[1].split(separator: ":").last, let remote = fields[2].split(separator: ":").last else { continue }
            if Int(local, radix: 16) == port, Int(remote, radix: 16) == client, fields[9] != "0" { return true }
        }
        return false
    }

    static func flood(_ name: String, https: Int, cert: String, path: String = "/healthz", wait: Int = 15) async throws -> Outcome {
        try await ThirdPartyScript.run("h2_floods.py", [String(https), "auth.localhost", cert, name, path, String(wait)])
    }

    static func limits(_ site: LocalSite, cert: String) async throws -> [String: Int] {
        let text = try await Curl.fetch(site.url("/metrics"), caFile: cert).body
        var counts: [String: Int] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("siwa_http2_limit_total{limit=\"") {
            let name = line.split(separator: "\"")[1]
            counts[String(name)] = Int(line.split(separator: " ").last ?? "") ?? 0
        }
        return counts
    }

    @Test(
        "each flood ends its own connection at once, counted by the limit it passed, while a client on another connection is answered throughout",
        arguments: [
            ("rapid-reset", "h2_max_resets"), ("malformed-heads", "h2_max_resets"), ("continuation", "continuation"), ("hpack-table", "frame"), ("settings", "h2_max_control_frames"),
            ("ping", "h2_max_control_frames"), ("streams", "h2_max_concurrent_streams"), ("headers", "h2_max_header_list_size"),
        ]
    )
    func flood(name: String, limit: String) async throws {
        try await Self.withSite { site, cert, https in
            // Another client, on connections of its own, while the flood runs and after.
            let bystander = Task {
                var statuses: [Int] = []
                for _ in 0..<20 {
                    statuses.append((try? await Curl.fetch(site.url("/healthz"), http2: true, caFile: cert).status) ?? 0)
                }
                return statuses
            }
            // The client waits up to 30 s for siwa to end the connection (`closed`: siwa did, not the client's wait); its
            // time is not asserted, which under the full suite's load says more of the machine than of siwa.
            let outcome = try await Self.flood(name, https: https, cert: cert, wait: 30)
            #expect(outcome.closed == true, "\(name): \(outcome)")
            if name == "hpack-table" { #expect(outcome.error_code == 9, "GOAWAY with COMPRESSION_ERROR: \(outcome)") }
            let statuses = await bystander.value
            #expect(statuses.allSatisfy { $0 == 200 }, "\(name): the bystander got \(statuses)")
            #expect(try await Curl.fetch(site.url("/healthz"), http2: true, caFile: cert).status == 200)
            let counted = try await Self.limits(site, cert: cert)
            #expect(counted[limit, default: 0] >= 1, "\(name): \(counted)")
        }
    }

    @Test("errors of single streams (a body sent on after the answer, a header named in capitals) end those streams with RST_STREAM, not the connection: the next request on it is answered")
    func streamErrorsKeepTheConnection() async throws {
        try await Self.withSite { site, cert, https in
            // Each step waits up to 30 s for siwa's answer to the one before; the connection is then watched 2 s more.
            let outcome = try await Self.flood("stream-errors", https: https, cert: cert, wait: 30)
            #expect(outcome.ended == "open" && outcome.closed != true, "\(outcome)")
            #expect(Set(outcome.head_streams ?? []) == [1, 5], "streams 1 and 5 answered, once each: \(outcome)")
            #expect(outcome.heads == 2, "streams 1 and 5 answered, once each: \(outcome)")
            #expect(outcome.reset_streams?.contains(3) == true, "stream 3 reset: \(outcome)")
            #expect(try await Self.limits(site, cert: cert).isEmpty)
        }
    }

    @Test("a graceful shutdown tells an HTTP/2 client to open no new stream (GOAWAY, NO_ERROR) at once, then the connection ends; before, the client was told nothing until its connection was cut")
    func shutdownSaysGoAway() async throws {
        var client: Task<Outcome, any Error>?
        try await Self.withSite { _, cert, https in
            client = Task { try await Self.flood("shutdown", https: https, cert: cert, path: "/auth/apple/notifications", wait: 45) }
            // The client's stream is open (its body not ended) when the site shuts down, at the end of this body: 8 s
            // for the client's start and TLS handshake under the full suite's load (with 3 s, a fresh clone's run of
            // 1396b29 once left the client told nothing for 45 s, most likely because the shutdown began while its
            // connection was still in its TLS handshake, and such a connection is not told GOAWAY once it has its
            // HTTP/2 handler: not yet confirmed, in the session notes to look into).
            try await Task.sleep(for: .seconds(8))
        }
        let outcome = try #require(try await client?.value)
        #expect(outcome.ended == "goaway" && outcome.error_code == 0, "\(outcome)")
        // The stream under way is answered before the connection ends (a 400: its body is not a notification); the
        // connection was once closed with the client's last frames unread, a reset that lost the answer.
        #expect(outcome.head_streams?.contains(1) == true, "\(outcome)")
        #expect(outcome.closed == true, "\(outcome)")
    }

    @Test(
        "a connection still being set up when a graceful shutdown begins (its TLS handshake, or before the first bytes that tell h2c from HTTP/1.1) is answered its first request and then ends, told so (GOAWAY, NO_ERROR; Connection: close); before, it was never told, and held the shutdown until its idle limit",
        arguments: [("setup-h2", true), ("setup-http1", true), ("setup-h2", false), ("setup-http1", false)]
    )
    func shutdownDuringSetup(kind: String, tls: Bool) async throws {
        let marker = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-setup-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: marker) }
        var client: Task<Outcome, any Error>?
        // The client's connection accepted, the site shuts down (at the end of this body); the client sends its hello
        // or first bytes once the listener refuses new connections, then a GET of the sign-in page (answered on the
        // event loop).
        func connect(port: Int, cert: String) async throws {
            client = Task { try await ThirdPartyScript.run("h2_floods.py", [String(port), "auth.localhost", cert, kind, marker, "60"]) }
            let deadline = ContinuousClock.now + .seconds(60)
            var clientPort: Int?
            while clientPort == nil, ContinuousClock.now < deadline {
                clientPort = (try? String(contentsOfFile: marker, encoding: .utf8)).flatMap { Int($0) }
                if clientPort == nil { try await Task.sleep(for: .milliseconds(50)) }
            }
            // Accepted by siwa, not only queued by the kernel: a connection still in the listener's queue when it
            // closes is reset, which the suite's load once made of this test.
            while let clientPort, !Self.accepted(port: port, from: clientPort), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        // The idle limit far longer than the client waits (60 s): a connection that was never told stays open past it.
        // The handshake's limit as long: the client is silent from its connection to the shutdown's start, which under
        // load can take longer than 12 s (a run beside seven other suites once saw the client's hello met by a reset).
        let idle = ["client_idle_timeout_ms": "120000", "client_header_timeout_ms": "90000"]
        if tls {
            try await Self.withSite(idle) { _, cert, https in try await connect(port: https, cert: cert) }
        } else {
            // siwa's own port without TLS (with TLS, that port only redirects to HTTPS).
            try await LocalSite.run(settings: idle) { site in try await connect(port: site.port, cert: "-") }
        }
        let outcome = try #require(try await client?.value)
        #expect(outcome.statuses?["1"] == 200, "\(kind), TLS \(tls): \(outcome), the shutdown began \(outcome.refused_after ?? -1) s after the client connected")
        #expect(outcome.closed == true, "\(kind), TLS \(tls): \(outcome)")
        if kind == "setup-h2" {
            #expect(outcome.ended == "goaway" && outcome.error_code == 0, "\(kind), TLS \(tls): \(outcome)")
        } else {
            #expect(outcome.connection == "close", "\(kind), TLS \(tls): \(outcome)")
        }
    }

    @Test("a connection without a request, kept busy by a PING every half second, still ends after client_idle_timeout_ms (3 s here), not kept open by the PINGs for the 45 s they go on")
    func pingsDoNotKeepAnIdleConnection() async throws {
        try await Self.withSite { _, cert, https in
            // Without a limit on it, the PINGs kept it open for the whole 45 s; under the full suite's load the close
            // after 3 s idle can come seconds late.
            let outcome = try await Self.flood("idle-pings", https: https, cert: cert, wait: 45)
            #expect(outcome.closed == true && outcome.seconds < 40, "\(outcome)")
        }
    }

    @Test("a POST whose body a page answers without reading (more DATA than the reader buffers, the body not ended): once answered, siwa ends the stream (RST_STREAM) instead of holding it, and its task, for ever; the next request on the connection is answered")
    func unreadBodyEndsTheStream() async throws {
        try await Self.withSite { _, cert, https in
            let outcome = try await Self.flood("unread-body", https: https, cert: cert, path: "/nowhere", wait: 20)
            #expect(outcome.head_streams?.contains(1) == true, "stream 1 answered: \(outcome)")
            #expect(outcome.reset_streams?.contains(1) == true, "stream 1 ended by siwa: \(outcome)")
            #expect(outcome.head_streams?.contains(3) == true && outcome.closed != true, "stream 3 answered on the same connection: \(outcome)")
        }
    }

    @Test("a connection that never sends its TLS hello, or sends it and never finishes the handshake, is closed after client_header_timeout_ms; the bystander is answered", arguments: ["silent", "handshake-stall"])
    func stalledHandshake(kind: String) async throws {
        try await Self.withSite { site, cert, https in
            let outcome = try await Self.flood(kind, https: https, cert: cert, wait: 30)
            #expect(outcome.closed == true, "\(outcome)")
            #expect(try await Curl.fetch(site.url("/healthz"), http2: true, caFile: cert).status == 200)
        }
    }

    @Test(
        "a client that ends its side of the connection before sending a byte (a port check, a load balancer's probe) has it closed at once, on the HTTPS port and on the plain one; before, it was held until the handshake's time limit (12 s here), and held a shutdown as long",
        arguments: [true, false]
    )
    func halfClosedBeforeAByte(tls: Bool) async throws {
        let limits = ["client_header_timeout_ms": "12000"]
        func check(port: Int) async throws {
            let outcome = try await ThirdPartyScript.run("h2_floods.py", [String(port), "auth.localhost", "-", "half-close", "/", "30"]) as Outcome
            // Closed on the client's FIN, not by the 12 s limit: half that is far more than the suite's load adds.
            #expect(outcome.closed == true && outcome.seconds < 6, "TLS \(tls): \(outcome)")
        }
        if tls {
            try await Self.withSite(limits) { _, _, https in try await check(port: https) }
        } else {
            try await LocalSite.run(settings: limits) { site in try await check(port: site.port) }
        }
    }

    @Test("a client that keeps its window shut holds no answer: its connection is ended once its answer has not moved for h2_stall_timeout_ms, and counted so; the bystander is answered")
    func zeroWindow() async throws {
        try await Self.withSite { site, cert, https in
            // Closed by siwa after the 2 s stall (`closed`), within the client's 30 s wait; the idle time does not
            // end a connection with a stream open.
            let outcome = try await Self.flood("zero-window", https: https, cert: cert, path: "/metrics", wait: 30)
            #expect(outcome.closed == true, "\(outcome)")
            let counted = try await Self.limits(site, cert: cert)
            #expect((counted["h2_stall_timeout_ms"] ?? 0) >= 1, "the stall watch did not end the connection: \(counted) \(outcome)")
            #expect(try await Curl.fetch(site.url("/healthz"), http2: true, caFile: cert).status == 200)
        }
    }

    @Test("a POST whose body stops arriving (only a WINDOW_UPDATE on its stream every 300 ms) gets 408 after client_body_timeout_ms, and its stream alone ends (RST_STREAM NO_ERROR after the answer): the next request on the connection is answered; before, the stream was held for ever. A gRPC call that sends nothing for twice the limit is not ended")
    func slowBodyEndsItsStream() async throws {
        try await Self.withSite(["client_body_timeout_ms": "1500"]) { site, cert, https in
            let call = try await Self.flood("slow-grpc-body", https: https, cert: cert, path: "/auth/apple/callback", wait: 3)
            #expect(call.reset_streams == nil && call.statuses == nil && call.closed != true, "the gRPC call was ended: \(call)")
            let outcome = try await Self.flood("slow-body", https: https, cert: cert, path: "/auth/apple/callback", wait: 30)
            #expect(outcome.statuses?["1"] == 408, "stream 1 answered 408: \(outcome)")
            #expect(outcome.reset_codes?["1"] == 0, "stream 1 then reset with NO_ERROR: \(outcome)")
            #expect(outcome.statuses?["3"] == 200, "stream 3 answered on the same connection: \(outcome)")
            #expect(outcome.ended != "goaway", "\(outcome)")
            let text = try await Curl.fetch(site.url("/metrics"), caFile: cert).body
            #expect(text.contains("siwa_client_limit_total{limit=\"client_body_timeout_ms\"} 1"), "\(text.split(separator: "\n").filter { $0.contains("limit_total") })")
        }
    }

    @Test("a stream whose window the client keeps shut while the connection's other answers move (a paused video's), or beside an open stream with nothing to send, is reset alone (CANCEL) after h2_stall_timeout_ms: the connection goes on, the next request on it is answered; before, the whole connection was ended")
    func stalledStreamResetAlone() async throws {
        try await Self.withSite { site, cert, https in
            // Beside it an open stream with nothing to send (a body not finished, as an idle SSE stream or a long poll has
            // nothing to send) and nothing else moving: still that stream alone.
            let besideIdle = try await Self.flood("stalled-beside-idle", https: https, cert: cert, path: "/metrics", wait: 30)
            #expect(besideIdle.reset_codes?["1"] == 8 && besideIdle.statuses?["5"] == 200, "\(besideIdle)")
            let outcome = try await Self.flood("stalled-stream", https: https, cert: cert, path: "/metrics", wait: 30)
            #expect(outcome.reset_codes?["1"] == 8, "stream 1 reset with CANCEL: \(outcome)")
            // The stream asked for after the reset, on the same connection.
            let last = try #require(outcome.last_stream, "\(outcome)")
            #expect(outcome.statuses?[String(last)] == 200, "a stream after the reset answered on the same connection: \(outcome)")
            #expect(outcome.ended != "goaway", "\(outcome)")
            #expect(try await Self.limits(site, cert: cert)["h2_stall_timeout_ms"] == nil, "the connection was ended: \(outcome)")
        }
    }

    @Test("a client with a small flow-control window, opened as it reads, gets every answer whole, on the handlers' path and on the byte path: the stream is not closed (reset CANCEL) while its window still holds part of the answer")
    func smallWindow() async throws {
        try await Self.withSite { site, cert, https in
            for path in ["/nonexistent-page", "/metrics", "/"] {
                let whole = try await Curl.fetch(site.url(path), http2: true, caFile: cert)
                let answers = try await HTTP2DoorTests.send([.init(path: path)], https: https, cert: cert, window: 128)
                let answer = try #require(answers.first)
                #expect(answer.status == whole.status, "\(path): \(answer.status ?? 0)")
                // Ended with END_STREAM: neither reset nor closed first.
                #expect(!answer.closed && answer.reset == nil, "\(path): cut short after \(answer.body.utf8.count) bytes, reset \(answer.reset ?? -1)")
                #expect(answer.body.utf8.count > 4 * 128, "\(path): \(answer.body.utf8.count) bytes do not test the window")
                if path == "/nonexistent-page" { #expect(answer.body == whole.body) }
                if path == "/metrics" { #expect(answer.body.hasSuffix("\n") && answer.body.contains("siwa_http2_limit_total") || answer.body.contains("# TYPE")) }
            }
        }
    }
}

extension EdgeFloodTests {
    /// What `h2_streams.py` says of its streams.
    struct Streams: Decodable {
        let max_streams: Int?
        let refused: [String: Int]
        let statuses: [String: Int]
        let goaway: Int?
        let closed: Bool
        let after: Int?
    }

    @Test("a client that opens 110 streams at once where 100 are allowed, before it has read siwa's SETTINGS (a gRPC client opening its calls), over h2c: the 10 past the limit are refused alone (RST_STREAM REFUSED_STREAM, RFC 9113 §5.1.2), the 100 others answered, and the connection goes on; before, the whole connection ended with GOAWAY PROTOCOL_ERROR")
    func excessStreamsRefusedAlone() async throws {
        try await LocalSite.run { site in
            let outcome = try await ThirdPartyScript.run("h2_streams.py", [String(site.port), "110", "/oauth2/token"], as: Streams.self)
            #expect(outcome.max_streams == 100, "siwa advertises the limit it holds clients to: \(outcome)")
            #expect(outcome.goaway == nil && !outcome.closed, "the connection went on: \(outcome)")
            #expect(outcome.refused.count == 10, "the streams past the limit, and only they, were refused: \(outcome.refused)")
            #expect(Set(outcome.refused.values) == [7], "REFUSED_STREAM, which a client may send again: \(outcome.refused)")
            #expect(outcome.statuses.count == 100, "the others were answered: \(outcome.statuses.count)")
            #expect(outcome.after == 200, "a request after them is answered on the same connection: \(outcome)")
        }
    }
}
