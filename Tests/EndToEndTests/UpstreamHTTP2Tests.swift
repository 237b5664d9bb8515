import Foundation
import Testing
import TestSupport

/// `upstream_http2` (issue 36): a gRPC service (Python's grpcio) behind `siwa serve --upstream` on siwa's own HTTPS,
/// called by a gRPC client with the site's iOS app's token: a unary call with its trailers, a server-streaming call,
/// and a call without a token refused as gRPC understands it.
@Suite("A gRPC service behind --upstream over HTTP/2")
struct UpstreamHTTP2Tests {
    struct Called: Decodable {
        let code: String
        let unary: String?
        let trailers: [String: String]?
        let stream: [String]?
        let details: String?
        let missing: String?
        let missingDetails: String?
    }

    static func call(_ https: Int, root: String, token: String?) async throws -> Called {
        try await ThirdPartyScript.run("grpc_echo.py", ["call", String(https), root, "auth.localhost"] + (token.map { [$0] } ?? []), timeLimit: .seconds(60))
    }

    @Test("a unary call reaches the service as the person and the app and comes back with its trailers; a server-streaming call brings every part; an error answered Trailers-Only comes back as that error (NOT_FOUND); without a token the call is UNAUTHENTICATED")
    func grpcBehindSiwa() async throws {
        let ports = try await FreePorts.reserve(2)
        let (service, https) = (ports[0], ports[1])
        try await TestCertificate.withSelfSigned { cert, key in
            let output = URL(fileURLWithPath: cert).deletingLastPathComponent().appendingPathComponent("grpc.log")
            try await ChildProcess.withRunning(
                try ExternalTool.authlibPython.executable(),
                arguments: [ExternalTool.thirdPartyScripts.appendingPathComponent("grpc_echo.py").path, "serve", String(service)],
                output: output, startupTimeLimit: .seconds(120), ready: { await Self.saysReady(output) }
            ) { _ in
                try await LocalSite.run(settings: [
                    "upstream": "http://127.0.0.1:\(service)", "upstream_http2": "true", "tls_cert_file": cert, "tls_key_file": key,
                    "tls_domains": "auth.localhost", "https_port": String(https), "access_rules": BearerUpstreamTests.rules, "trusted_proxies": nil,
                ]) { site in
                    // The iOS app's token, asked for on siwa's HTTPS (curl: this process does not resolve auth.localhost).
                    let person = site.user("Ada")
                    let token = try await Visit.withClient { visit in
                        let body = try await BearerUpstreamTests.nativeCredential(site, visit, sub: person.sub)
                        let answer = try await Curl.fetch(site.url("/auth/api/apple/native"), caFile: cert, method: "POST", headers: ["Content-Type: application/json"], body: body)
                        let json = try #require(try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [String: Any], "\(answer)")
                        return try #require(json["session_token"] as? String)
                    }
                    // The rules let the app's token in on /api/ios/ only: the service's methods are under /siwa.Echo/,
                    // which no rule names, so the global policy (anyone signed in) decides.
                    let called = try await Self.call(https, root: cert, token: token)
                    #expect(called.code == "OK", "\(called)")
                    #expect(called.unary == "echo:hello")
                    #expect(called.trailers?["x-seen-user"] == person.sub, "\(called)")
                    #expect(called.trailers?["x-seen-client"] == BearerUpstreamTests.bundle, "\(called)")
                    #expect(called.stream == (0..<5).map { "part \($0)" }, "\(called)")
                    // An error the service answers Trailers-Only (one HEADERS frame with END_STREAM) reaches the client as
                    // that error, not as an answer without trailers (INTERNAL).
                    #expect(called.missing == "NOT_FOUND" && called.missingDetails == "no such thing", "\(called)")
                    let refused = try await Self.call(https, root: cert, token: nil)
                    #expect(refused.code == "UNAUTHENTICATED", "\(refused)")
                }
            }

        }
    }

    /// Whether a server of the tests' own has printed "ready" (it listens first) into `output`.
    static func saysReady(_ output: URL, _ word: String = "ready") async -> Bool {
        ((try? String(contentsOf: output, encoding: .utf8)) ?? "").contains(word)
    }

    /// Paths under /h2/ are public: the requests reach the upstream without a sign-in.
    static let publicRules = #"[{"paths": ["^/h2/"], "policy": "public"}]"#

    /// siwa (plain HTTP) in front of `h2_upstream.py`, an h2c upstream that misbehaves as services and proxies do;
    /// `body` gets the site and the upstream's log of events ("connection N", "reset PATH", "sent PATH BYTES").
    static func withMisbehavingUpstream(_ more: [String: String?] = [:], _ body: (LocalSite, _ events: () -> [String]) async throws -> Void) async throws {
        try await withScratchDirectory("siwa-h2-upstream") { directory in
            let log = directory.appendingPathComponent("events.log")
            FileManager.default.createFile(atPath: log.path, contents: nil)
            let port = try await FreePorts.reserve(1)[0]
            let output = directory.appendingPathComponent("upstream.out")
            // Ready once it says so (it listens first): a line in a file, read without the event loops or the
            // concurrency pool's turn a connection attempt needs, which the full suite's start can hold for a minute
            // (CI's run of 4a31c82: every probe of the first minute failed), and within a longer bound than the default.
            try await ChildProcess.withRunning(
                try ExternalTool.authlibPython.executable(),
                arguments: [ExternalTool.thirdPartyScripts.appendingPathComponent("h2_upstream.py").path, String(port), log.path],
                output: output, startupTimeLimit: .seconds(120),
                ready: { await Self.saysReady(output) }
            ) { _ in
                let settings: [String: String?] = ["upstream": "http://127.0.0.1:\(port)", "upstream_http2": "true", "access_rules": publicRules, "trusted_proxies": nil]
                try await LocalSite.run(settings: settings.merging(more) { $1 }) { site in
                    try await body(site) { ((try? String(contentsOf: log, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init) }
                }
            }
        }
    }

    /// curl's exit status and output for `url` (HTTP/1.1 to siwa's plain port), with `extra` arguments.
    static func curl(_ url: String, _ extra: [String] = []) async throws -> ChildProcess.Outcome {
        try await ChildProcess.run(URL(fileURLWithPath: "/usr/bin/curl"), arguments: ["-sS", "--http1.1", "-D", "-"] + extra + [url], environment: [:], timeLimit: .seconds(60))
    }

    /// Waits up to `seconds` for `events` to hold a line `matching`.
    static func waitFor(_ events: () -> [String], seconds: Int = 10, _ matching: (String) -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while ContinuousClock.now < deadline {
            if events().contains(where: matching) { return true }
            try await Task.sleep(for: .milliseconds(100))
        }
        return events().contains(where: matching)
    }

    /// A client of siwa's plain port on a raw socket (Python): it asks for `path` (with the header line `extra`, an
    /// optional fifth argument; `Connection: close`), reads until `until` has come, then:
    /// - `stop` "leave": closes its socket and prints `left`;
    /// - "stall": prints `stalled` and reads no more (its receive buffer kept small), until it is stopped;
    /// - "slow": reads the rest 64 KB at a time, 50 ms apart (1.3 MB/s, far slower than siwa sends, so that its
    ///   buffers stay full and the connection is not writable for seconds on end), and prints `read N`, the bytes after
    ///   `until`, when the connection ends.
    static let rawClient = """
        import socket, sys, time
        port, path, until, stop = int(sys.argv[1]), sys.argv[2], sys.argv[3].encode(), sys.argv[4]
        extra = sys.argv[5] if len(sys.argv) > 5 else ""
        s = socket.socket()
        if stop != "slow":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        s.connect(("127.0.0.1", port))
        s.sendall(("GET " + path + " HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nConnection: close\\r\\n" + (extra + "\\r\\n" if extra else "") + "\\r\\n").encode())
        got = b""
        while until not in got:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        if stop == "leave":
            s.close()
            print("left" if until in got else "ended: " + repr(got[:200]), flush=True)
        elif stop == "stall":
            print("stalled", flush=True)
            time.sleep(600)
        else:
            body = len(got.split(until, 1)[-1])
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                body += len(chunk)
                time.sleep(0.05)
            print("read", body, flush=True)
        """

    @Test("a client that leaves during a streaming answer (a gRPC watch, a download) has its upstream stream reset at once (RST_STREAM), not read on until the upstream ends it; and its place at the upstream is freed")
    func clientLeavesStreamReset() async throws {
        try await Self.withMisbehavingUpstream(["upstream_max_connections": "1"]) { site, events in
            // The client reads until the first tick (one every 100 ms), then closes its connection.
            let left = try await ChildProcess.run(
                try ExternalTool.authlibPython.executable(), arguments: ["-c", Self.rawClient, String(site.port), "/h2/stream", "tick", "leave"], environment: [:]
            )
            #expect(left.stdout.contains("left"), "\(left)")
            #expect(try await Self.waitFor(events, seconds: 30) { $0 == "reset /h2/stream" }, "\(events())")
            // The one place at the upstream is free again.
            let next = try await Self.curl(site.url("/h2/plain"), ["--max-time", "60"])
            #expect(next.status == 0 && next.stdout.hasPrefix("HTTP/1.1 200") && next.stdout.hasSuffix("ok"), "\(next)")
        }
    }

    @Test("a client that stops reading holds the upstream back (HTTP/2 flow control): of a 64 MB answer, the upstream sends what the windows and buffers hold, then waits; before, siwa read it all into memory")
    func slowClientHoldsUpstreamBack() async throws {
        try await Self.withMisbehavingUpstream { site, events in
            func sent() -> Int { events().compactMap { line -> Int? in line.hasPrefix("sent /h2/big ") ? Int(line.split(separator: " ").last ?? "") : nil }.max() ?? 0 }
            try await withScratchDirectory("siwa-h2-stall") { directory in
                let output = directory.appendingPathComponent("client.out")
                try await ChildProcess.withRunning(
                    try ExternalTool.authlibPython.executable(), arguments: ["-c", Self.rawClient, String(site.port), "/h2/big", "\r\n\r\n", "stall"],
                    output: output, startupTimeLimit: .seconds(120), ready: { await Self.saysReady(output, "stalled") }
                ) { _ in
                    // Until the upstream has stopped sending: what it sent does not grow for 2 s (within 60 s).
                    let deadline = ContinuousClock.now + .seconds(60)
                    var last = -1
                    while ContinuousClock.now < deadline {
                        try await Task.sleep(for: .seconds(2))
                        let now = sent()
                        if now > 0, now == last { break }
                        last = now
                    }
                    #expect(sent() > 0 && sent() < 32 << 20, "the upstream sent \(sent()) bytes to a client that read its head: \(events().suffix(5))")
                }
            }
            #expect(try await Self.waitFor(events, seconds: 30) { $0 == "reset /h2/big" }, "\(events().suffix(5))")
        }
    }

    @Test("an upstream that says GOAWAY (a graceful restart, nginx's keepalive_requests) is asked again on a new connection: the next request is answered, not left to time out on the old one; and requests that come together at the start share one connection")
    func goAwayThenNewConnection() async throws {
        try await Self.withMisbehavingUpstream(["upstream_timeout_ms": "20000"]) { site, events in
            // Twenty requests at once, before any connection: one connection for all.
            try await withThrowingTaskGroup(of: ChildProcess.Outcome.self) { group in
                for _ in 0..<20 { group.addTask { try await Self.curl(site.url("/h2/plain"), ["--max-time", "60"]) } }
                for try await outcome in group { #expect(outcome.status == 0 && outcome.stdout.hasSuffix("ok"), "\(outcome)") }
            }
            #expect(events().filter { $0.hasPrefix("connection") }.count == 1, "\(events())")
            let first = try await Self.curl(site.url("/h2/goaway"), ["--max-time", "60"])
            #expect(first.status == 0 && first.stdout.hasSuffix("ok"), "\(first)")
            // Before, this stream went on the retired connection and was siwa's 504 after upstream_timeout_ms.
            let next = try await Self.curl(site.url("/h2/plain"), ["--max-time", "60"])
            #expect(next.status == 0 && next.stdout.hasPrefix("HTTP/1.1 200") && next.stdout.hasSuffix("ok"), "\(next)")
            #expect(events().filter { $0.hasPrefix("connection") }.count == 2, "\(events())")
        }
    }

    @Test("a stream the upstream refuses unprocessed (REFUSED_STREAM; or beyond the last stream of a GOAWAY, a graceful restart racing the request) is sent again once on a new stream, a POST's body with it: the client gets the answer, not a 502")
    func refusedStreamSentAgain() async throws {
        try await Self.withMisbehavingUpstream { site, events in
            let once = try await Self.curl(site.url("/h2/refuse-once"), ["--max-time", "60"])
            #expect(once.status == 0 && once.stdout.hasPrefix("HTTP/1.1 200") && once.stdout.hasSuffix("ok"), "\(once)")
            // The body the first stream carried, sent again whole.
            let echoed = try await Self.curl(site.url("/h2/refuse-echo"), ["--max-time", "60", "--data-binary", "the body, sent twice"])
            #expect(echoed.status == 0 && echoed.stdout.hasPrefix("HTTP/1.1 200") && echoed.stdout.hasSuffix("\r\n\r\nthe body, sent twice"), "\(echoed)")
            let goneAway = try await Self.curl(site.url("/h2/goaway-unprocessed"), ["--max-time", "60"])
            #expect(goneAway.status == 0 && goneAway.stdout.hasPrefix("HTTP/1.1 200") && goneAway.stdout.hasSuffix("ok"), "\(goneAway)")
            #expect(events().filter { $0.hasPrefix("refused ") }.count == 3, "\(events())")
            // After the GOAWAY, the request went on a new connection.
            #expect(events().filter { $0.hasPrefix("connection") }.count == 2, "\(events())")
        }
    }

    @Test("a stream the upstream refuses while the request's body is still arriving is not sent again (what came of the body cannot be sent as the whole): the client gets the 502, and the upstream never gets a body that ends")
    func refusedStreamWithBodyComingNotSentAgain() async throws {
        try await Self.withMisbehavingUpstream { site, events in
            // The body's first chunk, and no more: the refusal comes while the rest is still to come, whatever the load
            // (the CI run of 1164db7 sent the rest 200 ms apart, and under the suite's load all of it had come before the
            // refusal, so siwa rightly sent it again whole).
            let text = try await RawSocket.exchange(
                port: site.port, "POST /h2/refuse-once HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nfirst\r\n"
            )
            #expect(text.hasPrefix("HTTP/1.1 502"), "\(text.prefix(300))")
            #expect(events().contains("refused /h2/refuse-once"), "\(events())")
            #expect(!events().contains("ended /h2/refuse-once"), "\(events())")
        }
    }

    @Test("an upstream whose connection breaks off midway through an answer: the client's answer breaks off too (curl fails), never ends as if whole")
    func cutAnswerNotWhole() async throws {
        try await Self.withMisbehavingUpstream { site, _ in
            let cut = try await Self.curl(site.url("/h2/cut"), ["--max-time", "60", "-o", "/dev/null"])
            #expect(cut.status == 18 || cut.status == 56, "\(cut)")
        }
    }

    @Test("an HTTP/2 upstream's trailers reach the client through the answer's filter: its own fields pass, a cookie of siwa's and connection-specific fields stay behind")
    func trailersFiltered() async throws {
        try await Self.withMisbehavingUpstream { site, _ in
            // HTTP/1.1 chunked: curl writes the trailer section with the head (-D).
            let answer = try await Self.curl(site.url("/h2/trailers"), ["--max-time", "60", "-o", "/dev/null"])
            #expect(answer.status == 0, "\(answer)")
            let lower = answer.stdout.lowercased()
            #expect(lower.contains("x-kept: yes") && lower.contains("grpc-status: 0"), "\(answer.stdout)")
            #expect(!lower.contains("siwa_session"), "\(answer.stdout)")
        }
    }

    @Test("an upload an HTTP/2 client resets midway (RST_STREAM) never reaches the upstream as a whole body: before, its end was read as the body's, and the upstream got a cut body ended as if complete")
    func cutUploadNotWhole() async throws {
        try await TestCertificate.withSelfSigned { cert, key in
            let https = try await FreePorts.reserve(1)[0]
            let tls: [String: String?] = ["tls_cert_file": cert, "tls_key_file": key, "tls_domains": "auth.localhost", "https_port": String(https)]
            try await Self.withMisbehavingUpstream(tls) { _, events in
                let _: EdgeFloodTests.Outcome = try await ThirdPartyScript.run("h2_floods.py", [String(https), "auth.localhost", cert, "cut-upload", "/h2/upload", "10"])
                // The upstream got the request (its head), and no end of its body.
                #expect(try await Self.waitFor(events, seconds: 30) { $0 == "reset /h2/upload" }, "\(events())")
                #expect(!events().contains("ended /h2/upload"), "\(events())")
            }
        }
    }
}

