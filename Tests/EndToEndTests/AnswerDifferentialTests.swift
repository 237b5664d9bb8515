import Foundation
import Testing
import TestSupport

/// The upstream's answers through every carrier of `siwa serve --upstream`: generated answers (interim statuses, 101
/// to requests that did not ask, 204, 304, `HEAD`, `Content-Length` once and twice, `chunked` with extensions and
/// trailers, `gzip, chunked`, close-delimited bodies, hop-by-hop and `Connection`-named fields, siwa's cookies, odd
/// casing), each sent through the byte path, the handlers (async-http-client) and, for `HEAD`, the handlers again;
/// the client must get the same status, fields (less `Date`) and body bytes from each, and what the generator says
/// a proxy passes on: end-to-end fields in their order, none of the hop's, the codings labelled once.
@Suite("The upstream's answers: the same through every carrier, generated", .serialized)
struct AnswerDifferentialTests {
    /// What the scripted upstream answers to `GET` and `HEAD /gen/<index>` of each answer.
    static func scripted(_ answers: [GeneratedAnswer]) -> [String: (bytes: String, close: Bool)] {
        var scripted: [String: (bytes: String, close: Bool)] = [:]
        for answer in answers {
            scripted["GET /gen/\(answer.index)"] = (answer.bytes(head: false), answer.closes)
            scripted["HEAD /gen/\(answer.index)"] = (answer.bytes(head: true), answer.closes)
        }
        return scripted
    }

    @Test("generated upstream answers reach the client alike through the byte path and the handlers, GET and HEAD, and as the generator's model says")
    func generatedAnswersAgree() async throws {
        let answers = (0..<72).map { GeneratedAnswer(index: $0) }
        let scripted = Self.scripted(answers)
        try await ScriptedUpstream.run(extra: scripted) { upstream in
            try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(upstream.port)", ["skip_auth_routes": "^/"]) { site, visit in
                var disagreements = 0
                for answer in answers {
                    let path = "/gen/\(answer.index)"
                    let byBytes = try await Self.fetch(site, "GET \(path) HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                    let byHandlers = try await Self.fetch(site, "GET \(path) HTTP/1.1\r\nHost: a\r\n\(DoorTests.toTheHandlers)\r\nConnection: close\r\n\r\n")
                    let byHead = try await Self.fetch(site, "HEAD \(path) HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                    let expected = answer.expected
                    var failures: [String] = []
                    if byBytes != byHandlers { failures.append("byte path \(byBytes) ≠ handlers \(byHandlers)") }
                    if answer.broken {
                        if byBytes.status != 502 || byHead.status != 502 || byBytes.fields.contains(where: { $0.lowercased().hasPrefix("upgrade:") }) {
                            failures.append("a broken upstream was not siwa's 502: \(byBytes), HEAD \(byHead)")
                        }
                    } else if byBytes.status != expected.status || byBytes.fields != expected.fields || byBytes.body != expected.body {
                        failures.append("byte path \(byBytes) ≠ model \(expected)")
                    }
                    // HEAD: the GET's status and fields but for the framing a bodiless answer does not say, no body.
                    let headExpected = answer.expectedForHead
                    if !answer.broken, byHead.status != headExpected.status || byHead.fields != headExpected.fields || !byHead.body.isEmpty {
                        failures.append("HEAD \(byHead) ≠ model \(headExpected)")
                    }
                    if !failures.isEmpty {
                        disagreements += 1
                        Issue.record("answer \(answer.index) (\(answer.summary)):\n\(failures.joined(separator: "\n"))\nupstream sent:\n\(answer.bytes(head: false).prefix(600))")
                    }
                    // One wrong answer is one failure, not a cascade.
                    if disagreements > 5 { break }
                }
                // The answers really went both ways: the byte path took the plain GETs.
                #expect(try await BytePathTests.counted("upstream_bytes", site, visit) == answers.count)
            }
        }
    }

    @Test("the same generated upstream answers through siwa's own HTTPS: HTTP/2 and HTTP/1.1 give the client the same status, end-to-end fields and body (HTTP/2 carrying no connection's fields), GET and HEAD; a broken upstream is siwa's 502 on both")
    func generatedAnswersOverHTTP2() async throws {
        let answers = (0..<72).map { GeneratedAnswer(index: $0) }
        var scripted = Self.scripted(answers)
        // A 204 that says a length (RFC 9110 8.6 forbids it; upstreams send it): over HTTP/2 its HEADERS end the stream,
        // and a length there that no DATA follows is a stream error NIO refuses to send.
        for status in ["204 No Content", "304 Not Modified"] {
            scripted["GET /said-length/\(status.prefix(3))"] = ("HTTP/1.1 \(status)\r\nContent-Length: 5\r\nX-App: 1\r\n\r\n", false)
        }
        try await TestCertificate.withSelfSigned { cert, key in
            let https = try await FreePorts.reserve(1)[0]
            // What only a connection says, and the framing each version writes its own way.
            let connections: Set<String> = ["date", "connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection", "upgrade"]
            func comparable(_ answer: CurlAnswer) -> (Int, [String], String) {
                (answer.status, answer.fields.filter { !connections.contains($0.name) }.map { "\($0.name): \($0.value)" }.sorted(), answer.body)
            }
            try await ScriptedUpstream.run(extra: scripted) { upstream in
                let settings: [String: String?] = [
                    "skip_auth_routes": "^/", "tls_cert_file": cert, "tls_key_file": key, "tls_domains": "auth.localhost", "https_port": String(https),
                ]
                try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(upstream.port)", settings) { site, _ in
                    var disagreements = 0
                    for answer in answers {
                        let url = site.url("/gen/\(answer.index)")
                        var failures: [String] = []
                        for method in ["GET", "HEAD"] {
                            let extra = method == "HEAD" ? ["-I"] : []
                            let two: CurlAnswer
                            let one: CurlAnswer
                            do {
                                two = try await Curl.fetch(url, http2: true, caFile: cert, method: method, extra: extra + ["--max-time", "10"])
                                one = try await Curl.fetch(url, http2: false, caFile: cert, method: method, extra: extra + ["--max-time", "10"])
                            } catch {
                                failures.append("\(method): \(error)")
                                continue
                            }
                            if two.version != "2" { failures.append("\(method) over HTTP/2 was answered in HTTP/\(two.version)") }
                            if comparable(two) != comparable(one) { failures.append("\(method): HTTP/2 \(comparable(two)) ≠ HTTP/1.1 \(comparable(one))") }
                            if answer.broken, two.status != 502 { failures.append("\(method): a broken upstream was not siwa's 502 over HTTP/2: \(two.status)") }
                        }
                        if !failures.isEmpty {
                            disagreements += 1
                            Issue.record("answer \(answer.index) (\(answer.summary)):\n\(failures.joined(separator: "\n"))\nupstream sent:\n\(answer.bytes(head: false).prefix(600))")
                        }
                        if disagreements > 5 { break }
                    }
                    for status in [204, 304] {
                        let url = site.url("/said-length/\(status)")
                        let two = try await Curl.fetch(url, http2: true, caFile: cert, extra: ["--max-time", "10"])
                        let one = try await Curl.fetch(url, http2: false, caFile: cert, extra: ["--max-time", "10"])
                        #expect(two.status == status && two.body.isEmpty && two.header("x-app") == "1", "\(two)")
                        #expect(comparable(two) == comparable(one), "HTTP/2 \(comparable(two)) ≠ HTTP/1.1 \(comparable(one))")
                    }
                    // HTTP/2 is a transport under the one door: its GETs went the byte path's way, as HTTP/1.1's did.
                    let metrics = try await Curl.fetch(site.url("/metrics"), caFile: cert).body
                    let prefix = "siwa_front_fast_path_total{request=\"upstream_bytes\"} "
                    let counted = metrics.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { Int($0.dropFirst(prefix.count)) }
                    #expect(counted == 2 * answers.count + 4, "GETs passed by the byte path, HTTP/2's and HTTP/1.1's: \(counted ?? -1) of \(2 * answers.count + 4)")
                }
            }
        }
    }

    @Test("the same generated answers from an HTTP/2 upstream (upstream_http2) reach the client as from an HTTP/1.1 upstream: status, end-to-end fields in order, body, GET and HEAD, interim answers left out, siwa's cookies and the upstream's Server not passed on, trailers never in the head; an answer HTTP/2 makes malformed (a connection's field, a 101) is siwa's 502")
    func generatedAnswersFromAnHTTP2Upstream() async throws {
        let answers = (0..<72).map { GeneratedAnswer(index: $0) }
        // Each answer as both versions can carry it: HTTP/2 has no connection's fields, no transfer coding and no
        // 101; the HTTP/1.1 upstream gets the same answer with a length (chunked with its trailers when it has some).
        let hop: Set<String> = ["keep-alive", "proxy-connection", "te", "trailer", "upgrade", "connection"]
        var h2: [String: Any] = [:]
        var scripted: [String: (bytes: String, close: Bool)] = [:]
        var kinds: [Int: H2Kind] = [:]
        for answer in answers {
            let path = "/gen/\(answer.index)"
            var fields = answer.fields.map(\.line).map { line -> (String, String) in
                let name = String(line.prefix { $0 != ":" })
                return (name, line.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces))
            }.filter { !hop.contains($0.0.lowercased()) }
            // Every fourth answer carries one field HTTP/2 forbids (RFC 9113 8.2.2): malformed, siwa's 502.
            let forbidden = answer.index % 4 == 3 ? [("connection", "close"), ("keep-alive", "timeout=5"), ("transfer-encoding", "chunked"), ("upgrade", "h2c")][answer.index / 4 % 4] : nil
            let kind: H2Kind = answer.status == 101 ? .malformed("a 101") : forbidden.map { .malformed("\($0.0): \($0.1)") } ?? .carried
            kinds[answer.index] = kind
            let trailers: [(String, String)] = answer.trailers && !answer.bodiless ? [("x-t", "1"), ("set-cookie", "siwa_session=from-a-trailer")] : []
            if let forbidden { fields.append(forbidden) }
            var interim: [[Any]] = []
            if !answer.interim.isEmpty {
                let lines = answer.interim.components(separatedBy: "\r\n").filter { !$0.isEmpty }
                let status = Int(lines[0].dropFirst(9).prefix(3)) ?? 100
                interim.append([status, lines.dropFirst().map { line -> [String] in
                    let name = String(line.prefix { $0 != ":" })
                    return [name, line.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces)]
                }])
            }
            var sent = fields
            if !answer.bodiless, answer.index % 2 == 0 { sent.append(("content-length", String(answer.body.utf8.count))) }
            h2[path] = [
                "interim": interim, "status": answer.status, "fields": sent.map { [$0.0, $0.1] }, "body": answer.bodiless ? "" : answer.body,
                "trailers": trailers.map { [$0.0, $0.1] },
            ] as [String: Any]
            guard case .carried = kind else { continue }
            for head in [false, true] {
                var out = answer.interim + "HTTP/1.1 \(answer.status) \(answer.reason)\r\n"
                for (name, value) in fields { out += "\(name): \(value)\r\n" }
                if answer.bodiless {
                    out += "\r\n"
                } else if trailers.isEmpty || head {
                    out += "Content-Length: \(answer.body.utf8.count)\r\n\r\n" + (head ? "" : answer.body)
                } else {
                    out += "Transfer-Encoding: chunked\r\n\r\n" + String(answer.body.utf8.count, radix: 16) + "\r\n" + answer.body + "\r\n0\r\n"
                        + trailers.map { "\($0.0): \($0.1)\r\n" }.joined() + "\r\n"
                }
                scripted["\(head ? "HEAD" : "GET") \(path)"] = (out, false)
            }
        }
        // What only a connection says, and the framing each carrier writes its own way.
        let framing: Set<String> = ["content-length", "transfer-encoding", "connection"]
        // Names compared in lower case: HTTP/2 has no other (RFC 9113 8.2.1).
        func comparable(_ seen: Seen) -> Seen {
            let fields = seen.fields.map { field -> String in
                let name = field.prefix { $0 != ":" }
                return name.lowercased() + field.dropFirst(name.count)
            }
            return Seen(status: seen.status, fields: fields.filter { !framing.contains(String($0.prefix { $0 != ":" })) }, body: seen.body)
        }
        try await withScratchDirectory("siwa-h2-answers") { directory in
            let file = directory.appendingPathComponent("answers.json")
            try JSONSerialization.data(withJSONObject: h2).write(to: file)
            let port = try await FreePorts.reserve(1)[0]
            let output = directory.appendingPathComponent("upstream.out")
            try await ChildProcess.withRunning(
                try ExternalTool.authlibPython.executable(),
                arguments: [ExternalTool.thirdPartyScripts.appendingPathComponent("h2_answers.py").path, String(port), file.path],
                output: output, startupTimeLimit: .seconds(120), ready: { await UpstreamHTTP2Tests.saysReady(output) }
            ) { _ in
                try await ScriptedUpstream.run(extra: scripted) { upstream in
                    try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(upstream.port)", ["skip_auth_routes": "^/"]) { one, _ in
                        try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(port)", ["skip_auth_routes": "^/", "upstream_http2": "true", "upstream_timeout_ms": "10000"]) { two, _ in
                            var disagreements = 0
                            var malformed = 0
                            for answer in answers {
                                var failures: [String] = []
                                for method in ["GET", "HEAD"] {
                                    let request = "\(method) /gen/\(answer.index) HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
                                    let byTwo = try await Self.fetch(two, request)
                                    switch kinds[answer.index] ?? .carried {
                                    case .malformed(let why):
                                        malformed += 1
                                        if byTwo.status != 502 { failures.append("\(method): malformed over HTTP/2 (\(why)), answered \(byTwo)") }
                                    case .carried:
                                        let byOne = try await Self.fetch(one, request)
                                        if comparable(byTwo) != comparable(byOne) { failures.append("\(method): from HTTP/2 \(byTwo) ≠ from HTTP/1.1 \(byOne)") }
                                        let model = method == "HEAD" ? answer.expectedForHead : answer.expected
                                        let passed = model.fields.filter { !$0.lowercased().hasPrefix("content-encoding") && !$0.lowercased().hasPrefix("x-hop-") }
                                        let missing = comparable(Seen(status: 0, fields: passed, body: "")).fields.filter { !comparable(byTwo).fields.contains($0) }
                                        if byTwo.status != answer.status || !missing.isEmpty { failures.append("\(method): \(byTwo) lacks \(missing) or its status") }
                                        if byTwo.fields.contains(where: { $0.lowercased().contains("siwa_session") || $0.lowercased().hasPrefix("x-t:") || $0.hasPrefix("Server: upstream") }) {
                                            failures.append("\(method): a cookie of siwa's, a trailer or the upstream's Server reached the head: \(byTwo)")
                                        }
                                    }
                                }
                                if !failures.isEmpty {
                                    disagreements += 1
                                    Issue.record("answer \(answer.index) (\(answer.summary)):\n\(failures.joined(separator: "\n"))")
                                }
                                if disagreements > 5 { break }
                            }
                            #expect(malformed >= 30, "the malformed answers were sent: \(malformed)")
                        }
                    }
                }
            }
        }
    }

    enum H2Kind { case carried, malformed(String) }

    @Test("a 101 to a WebSocket handshake that asked for it passes the upstream's end-to-end fields and none of its hop's, as any answer does")
    func switchAskedFor() async throws {
        let answers = (0..<12).map { GeneratedAnswer(index: 1000 + $0) }
        var scripted: [String: (bytes: String, close: Bool)] = [:]
        for answer in answers {
            var out = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
            for field in answer.fields { out += field.line + "\r\n" }
            scripted["GET /ws/\(answer.index)"] = (out + "Content-Length: 0\r\n\r\n", false)
        }
        try await ScriptedUpstream.run(extra: scripted) { upstream in
            try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(upstream.port)", ["skip_auth_routes": "^/"]) { site, _ in
                for answer in answers {
                    let request = "GET /ws/\(answer.index) HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
                    let text = try await RawSocket.exchange(port: site.port, request) { $0.contains("\r\n\r\n") }
                    let head = text.components(separatedBy: "\r\n\r\n")[0]
                    #expect(head.hasPrefix("HTTP/1.1 101"), "\(head)")
                    let lines = head.components(separatedBy: "\r\n").dropFirst().map { $0.lowercased() }
                    for field in answer.fields {
                        let line = field.line.lowercased()
                        if field.passes {
                            #expect(lines.contains(line), "\(answer.index): \(field.line) did not reach the client: \(head)")
                        } else if !line.hasPrefix("upgrade:") && !line.hasPrefix("connection:") && !line.hasPrefix("date:") {
                            #expect(!lines.contains(line), "\(answer.index): \(field.line) reached the client: \(head)")
                        }
                    }
                    #expect(!lines.contains { $0.hasPrefix("content-length:") || $0.hasPrefix("server: upstream") }, "\(head)")
                    #expect(lines.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="), "\(head)")
                }
            }
        }
    }

    /// An answer as the client got it: status, fields (`Date` left out) sorted by lowercased name with the order of
    /// each name's values kept, and the body with its chunked framing undone.
    struct Seen: Equatable, CustomStringConvertible {
        let status: Int
        let fields: [String]
        let body: String
        var description: String { "\(status) \(fields) body \(body.utf8.count) bytes" }
    }

    static func fetch(_ site: LocalSite, _ request: String) async throws -> Seen {
        let text = try await RawSocket.exchange(port: site.port, request)
        guard let end = text.range(of: "\r\n\r\n") else { throw EndToEndError("no answer head: \(text)") }
        let lines = text[..<end.lowerBound].split(separator: "\r\n", omittingEmptySubsequences: false)
        let status = Int(lines.first?.dropFirst(9).prefix(3) ?? "") ?? 0
        let fields = lines.dropFirst().map { line -> String in
            let name = line.prefix { $0 != ":" }
            return "\(name): \(line.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces))"
        }
        let rest = String(text[end.upperBound...])
        let chunked = fields.contains { $0.lowercased() == "transfer-encoding: chunked" } && !request.hasPrefix("HEAD ")
        do {
            return Seen(status: status, fields: Self.sorted(fields.filter { !$0.lowercased().hasPrefix("date:") }), body: chunked ? try Self.unchunked(rest) : rest)
        } catch {
            throw EndToEndError("\(error) in the answer to \(request.prefix { $0 != "\r" }):\n\(text.prefix(1500))")
        }
    }

    static func sorted(_ fields: [String]) -> [String] {
        fields.enumerated().sorted { a, b in
            let (x, y) = (a.element.prefix { $0 != ":" }.lowercased(), b.element.prefix { $0 != ":" }.lowercased())
            return x == y ? a.offset < b.offset : x < y
        }.map(\.element)
    }

    /// A chunked body's data; throws unless it ends with the last chunk. Read as bytes: `"\r\n"` is one Character.
    static func unchunked(_ text: String) throws -> String {
        let bytes = Array(text.utf8)
        var at = 0
        var data: [UInt8] = []
        while true {
            guard let end = (at..<max(at, bytes.count - 1)).first(where: { bytes[$0] == 13 && bytes[$0 + 1] == 10 }) else {
                throw EndToEndError("chunked body cut: \(text.suffix(200))")
            }
            let sizeText = String(decoding: bytes[at..<end].prefix { $0 != UInt8(ascii: ";") }, as: UTF8.self)
            guard let size = Int(sizeText, radix: 16) else { throw EndToEndError("bad chunk size: \(sizeText)") }
            at = end + 2
            if size == 0 { return String(decoding: data, as: UTF8.self) }
            guard bytes.count >= at + size + 2 else { throw EndToEndError("chunk cut: \(text.suffix(200))") }
            data += bytes[at..<(at + size)]
            at += size + 2
        }
    }
}

/// One upstream answer drawn from a seeded generator, with what a proxy must pass on of it (the model).
struct GeneratedAnswer {
    enum Framing: CaseIterable { case length, lengthTwice, chunked, gzipChunked, close }

    let index: Int
    let status: Int
    let reason: String
    let interim: String
    let framing: Framing
    /// The fields, in order, each with whether it reaches the client.
    let fields: [(line: String, passes: Bool)]
    let body: String
    let chunkExtensions: Bool
    let trailers: Bool

    init(index: Int) {
        var random = SplitMix(seed: UInt64(index) &* 0x9E37_79B9 &+ 7)
        self.index = index
        let statuses: [(Int, String)] = [(200, "OK"), (200, "OK"), (201, "Created"), (203, "Non-Authoritative Information"), (204, "No Content"),
            (302, "Found"), (304, "Not Modified"), (404, "Not Found"), (410, "Gone"), (500, "Internal Server Error"), (503, "Service Unavailable"), (200, ""),
            (101, "Switching Protocols")]
        (status, reason) = statuses[random.below(statuses.count)]
        interim = ["", "", "", "HTTP/1.1 100 Continue\r\n\r\n", "HTTP/1.1 102 Processing\r\n\r\n",
            "HTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload\r\n\r\n", "HTTP/1.1 104 Upload Resumption Supported\r\n\r\n",
            "HTTP/1.1 199 Unknown\r\nX-Interim: 1\r\n\r\n"][random.below(8)]
        framing = Framing.allCases[random.below(Framing.allCases.count)]
        chunkExtensions = random.below(2) == 0
        trailers = random.below(2) == 0
        let size = [0, 1, 17, 900, 5000, 40_000][random.below(6)]
        body = String((0..<size).map { _ in Character(UnicodeScalar(UInt8(97 + random.below(26)))) })
        var fields: [(String, Bool)] = []
        let hopName = "X-Hop-\(index)"
        var pool: [(String, Bool)] = [
            ("Content-Type: text/plain; charset=utf-8", true), ("Cache-Control: no-cache", true), ("ETag: \"e\(index)\"", true),
            ("X-App-\(index): v\(index)", true), ("Vary: Accept", true), ("Set-Cookie: app=\(index); Path=/", true),
            ("Keep-Alive: timeout=5", false), ("Proxy-Connection: keep-alive", false), ("TE: trailers", false), ("Trailer: X-T", false),
            ("Upgrade: h2c", false), ("Connection: \(hopName)", false), ("\(hopName): secret", false),
            ("Set-Cookie: siwa_session=planted; Path=/", false), ("Set-Cookie: __Host-siwa_session=planted; Path=/", false),
            ("Server: upstream/\(index)", false), ("Date: Thu, 01 Jan 1970 00:00:00 GMT", false), ("x-ODD-case-\(index): Kept", true),
        ]
        if status == 302 { pool.append(("Location: /elsewhere/\(index)", true)) }
        for _ in 0..<(3 + random.below(8)) where !pool.isEmpty { fields.append(pool.remove(at: random.below(pool.count))) }
        // The hop's own field is end-to-end unless `Connection` names it.
        let named = fields.contains { $0.0 == "Connection: \(hopName)" }
        self.fields = fields.map { $0.0 == "\(hopName): secret" ? ($0.0, !named) : $0 }
    }

    var bodiless: Bool { status == 204 || status == 304 || status == 101 }
    var broken: Bool { status == 101 || (framing == .lengthTwice && !bodiless) }
    var closes: Bool { framing == .close && !bodiless }
    var summary: String { "\(status), \(framing), \(body.utf8.count) bytes\(interim.isEmpty ? "" : ", interim")" }

    /// The upstream's bytes, to a `GET` or (`head`) a `HEAD`.
    func bytes(head: Bool) -> String {
        var out = interim + "HTTP/1.1 \(status) \(reason)\r\n"
        for field in fields { out += field.line + "\r\n" }
        if bodiless { return out + "\r\n" }
        switch framing {
        case .length: out += "Content-Length: \(body.utf8.count)\r\n"
        case .lengthTwice: out += "Content-Length: \(body.utf8.count)\r\ncontent-length: \(body.utf8.count)\r\n"
        case .chunked: out += "Transfer-Encoding: chunked\r\n"
        case .gzipChunked: out += "Transfer-Encoding: gzip, chunked\r\n"
        case .close: if head { out += "Content-Length: \(body.utf8.count)\r\n" }
        }
        out += "\r\n"
        if head { return out }
        switch framing {
        case .length, .lengthTwice, .close:
            return out + body
        case .chunked, .gzipChunked:
            var rest = Substring(body)
            var piece = 1
            while !rest.isEmpty {
                let part = rest.prefix(piece * 700)
                out += String(part.utf8.count, radix: 16) + (chunkExtensions ? ";ext=\(piece)" : "") + "\r\n" + part + "\r\n"
                rest = rest.dropFirst(part.count)
                piece += 1
            }
            return out + "0\r\n" + (trailers ? "X-T: 1\r\nSet-Cookie: siwa_session=from-a-trailer\r\n" : "") + "\r\n"
        }
    }

    /// What a client must get: the end-to-end fields as sent, in order; `Content-Encoding` for a transfer coding
    /// other than `chunked`; siwa's `Server`; the body's framing (`chunked` for any length siwa does not know);
    /// `Connection: close` (the client asked); the body as sent.
    var expected: AnswerDifferentialTests.Seen { model(head: false) }

    /// The same answer to a `HEAD`: the upstream's head said the length it knew for a close-delimited body; no body.
    var expectedForHead: AnswerDifferentialTests.Seen { model(head: true) }

    private func model(head: Bool) -> AnswerDifferentialTests.Seen {
        // A switch nobody asked for, or two Content-Length fields, is a broken upstream: siwa's 502 page, the same
        // from every carrier.
        if broken { return .init(status: 502, fields: [], body: "") }
        var lines = fields.filter(\.passes).map(\.line)
        if !bodiless {
            switch framing {
            case .length, .lengthTwice: lines.append("Content-Length: \(body.utf8.count)")
            case .close where head: lines.append("Content-Length: \(body.utf8.count)")
            case .chunked, .close: lines.append("transfer-encoding: chunked")
            case .gzipChunked: lines += ["Content-Encoding: gzip", "transfer-encoding: chunked"]
            }
        }
        lines += ["Server: siwa", "Connection: close"]
        return .init(status: status, fields: AnswerDifferentialTests.sorted(lines), body: bodiless || head ? "" : body)
    }
}

/// TestSupport's seeded generator: the same answers on every run.
typealias SplitMix = SplitMix64
