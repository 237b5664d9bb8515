@testable import DoorHTTP
import Foundation
import NIOCore
import NIOEmbedded
import NIOHTTP1
@testable import SignInServer
import TestSupport
import Testing

/// The HTTP/1.1 subset the byte-level proxy path reads itself (`RawHTTP`, `ChunkedFraming`): what it takes must mean
/// the same to NIO's parser, and everything unusual must be left to NIO's parser (request) or refused (response).
@Suite("Byte-level HTTP: the subset read below the codecs")
struct RawHTTPTests {
    static func request(_ text: String) -> RawHTTP.RequestParse {
        Array(text.utf8).withUnsafeBytes { RawHTTP.request($0) }
    }

    static func response(_ bytes: [UInt8]) -> RawHTTP.ResponseParse {
        bytes.withUnsafeBytes { RawHTTP.response($0) }
    }

    static func taken(_ text: String) -> RawHTTP.RequestHead? {
        if case .head(let head) = request(text) { return head }
        return nil
    }

    static func notTaken(_ text: String) -> Bool {
        if case .notTaken = request(text) { return true }
        return false
    }

    /// The head as NIO's own parser reads it: target and header fields in order.
    static func parsedByNIO(_ text: String) throws -> (uri: String, headers: [(String, String)])? {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(HTTPRequestDecoder()))
        defer { _ = try? channel.finish() }
        try channel.writeInbound(ByteBuffer(string: text))
        guard case .head(let head)? = try channel.readInbound(as: HTTPServerRequestPart.self) else { return nil }
        return (head.uri, head.headers.map { ($0.name, $0.value) })
    }

    static let browserGET = """
        GET /reports/2026?view=full&x=%20y HTTP/1.1\r
        Host: app.example.com:8443\r
        User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36\r
        Accept: text/html,application/xhtml+xml;q=0.9,*/*;q=0.8\r
        Accept-Language: en-GB,en;q=0.9\r
        Cookie: theme=dark; siwa_session=abc123\r
        X-Forwarded-For: 10.0.0.1\r
        Connection: keep-alive\r
        Empty:\r
        Padded:   value with spaces  \t\r
        \r

        """

    @Test("a browser's GET is taken, and read as NIO's parser reads it: the same target, the same fields in the same order")
    func browserGETAsNIOReadsIt() throws {
        let head = try #require(Self.taken(Self.browserGET))
        #expect(head.length == Self.browserGET.utf8.count)
        #expect(head.target == "/reports/2026?view=full&x=%20y")
        #expect(head.host == "app.example.com:8443")
        #expect(head.cookie == "theme=dark; siwa_session=abc123")
        #expect(head.connection == ["keep-alive"])
        #expect(head.forwarded.map(\.name) == ["x-forwarded-for"])
        let nio = try #require(try Self.parsedByNIO(Self.browserGET))
        #expect(nio.uri == head.target)
        let bytes = Array(Self.browserGET.utf8)
        let ours = head.lines.map { line in
            (
                String(decoding: bytes[line.line].prefix { $0 != UInt8(ascii: ":") }, as: UTF8.self),
                String(decoding: bytes[line.value], as: UTF8.self)
            )
        }
        #expect(ours.map(\.0) == nio.headers.map(\.0))
        // RFC 9110 5.5: the blanks around a value are not part of it (NIO keeps those after it; the bytes are copied
        // to the upstream as they came either way).
        #expect(ours.map(\.1) == nio.headers.map { $0.1.trimmingCharacters(in: .whitespaces) })
        #expect(head.lines.map(\.name) == nio.headers.map { $0.0.lowercased() })
    }

    @Test("HTTP/1.0 is taken for a check, which ends the connection unless it asks to keep it; it never goes to the upstream from here")
    func http10() throws {
        let plain = try #require(Self.taken("GET /auth/check HTTP/1.0\r\nHost: a\r\n\r\n"))
        #expect(plain.isHTTP10 && plain.closesAfter)
        #expect(!plain.isTakeable(available: plain.length))
        let kept = try #require(Self.taken("GET /auth/check HTTP/1.0\r\nHost: a\r\nConnection: Keep-Alive\r\n\r\n"))
        #expect(kept.isHTTP10 && !kept.closesAfter)
        let eleven = try #require(Self.taken("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, CLOSE\r\n\r\n"))
        #expect(!eleven.isHTTP10 && eleven.closesAfter)
        #expect(try Self.parsedByNIO("GET /auth/check HTTP/1.0\r\nHost: a\r\n\r\n")?.uri == "/auth/check", "NIO reads it too")
    }

    @Test("an unfinished head waits for more bytes; bytes after it are the next request's")
    func incompleteAndPipelined() {
        for cut in [1, 3, 10, Self.browserGET.utf8.count - 1] {
            let prefix = String(decoding: Array(Self.browserGET.utf8).prefix(cut), as: UTF8.self)
            guard case .incomplete = Self.request(prefix) else {
                Issue.record("cut at \(cut) was not incomplete")
                continue
            }
        }
        let two = Self.browserGET + "GET /next HTTP/1.1\r\nHost: a\r\n\r\n"
        #expect(Self.taken(two)?.length == Self.browserGET.utf8.count)
    }

    @Test(
        "whatever is outside the subset is left to NIO's parser and the handlers",
        arguments: [
            "get / HTTP/1.1\r\nHost: a\r\n\r\n",
            "M-SEARCH / HTTP/1.1\r\nHost: a\r\n\r\n",
            "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
            "CONNECT /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
            "FOO /p HTTP/1.1\r\nHost: a\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\nx",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\nx",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1234567890123456789\r\n\r\n",
            "GET / HTTP/1.2\r\nHost: a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\t\r\n\r\nhello",
            "GET / HTTP/2.0\r\nHost: a\r\n\r\n",
            "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET /\u{e9} HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET / HTTP/1.1\nHost: a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\n\n",
            "GET / HTTP/1.1\r\nHost: a\r\n\n",
            "GET / HTTP/1.1\r\nHost: a\rX",
            "GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
            "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
            "GET / HTTP/1.1\r\nHo st: a\r\n\r\n",
            "GET / HTTP/1.1\r\n: a\r\nHost: a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX: caf\u{e9}\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX: a\u{1}b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
            "GET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost:\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nCookie: a=1\r\nCookie: b=2\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n",
        ]
    )
    func outsideTheSubset(_ text: String) {
        #expect(Self.notTaken(text))
    }

    @Test("a request of another method, or with a body of known length, is read for its framing only: the byte path hands it alone to NIO's parser")
    func framedForTheCodecs() throws {
        let post = try #require(Self.taken("POST /form HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\nContent-Type: text/plain\r\n\r\nhello world"))
        #expect(post.method == "POST" && post.contentLength == 11 && !post.isBodilessGET)
        #expect(post.length == "POST /form HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\nContent-Type: text/plain\r\n\r\n".utf8.count)
        let emptyGET = try #require(Self.taken("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"))
        #expect(emptyGET.contentLength == 0 && !emptyGET.isBodilessGET, "a GET that says it has a body goes to the codecs")
        let head = try #require(Self.taken("HEAD / HTTP/1.1\r\nHost: a\r\n\r\n"))
        #expect(head.method == "HEAD" && !head.isBodilessGET)
        #expect(try #require(Self.taken(Self.browserGET)).isBodilessGET)
        guard case .incomplete = Self.request("DELE") else {
            Issue.record("a method cut short was not incomplete")
            return
        }
    }

    @Test("a head longer than the limit, or with too many lines, is left to NIO's parser (with its own limits)")
    func limits() {
        let long = "GET / HTTP/1.1\r\nHost: a\r\nX: " + String(repeating: "a", count: RawHTTP.requestHeadLimit) + "\r\n\r\n"
        #expect(Self.notTaken(long))
        #expect(Self.notTaken(String(long.prefix(RawHTTP.requestHeadLimit + 10))), "no end in sight past the limit")
        let many = "GET / HTTP/1.1\r\nHost: a\r\n" + (0...RawHTTP.headerCountLimit).map { "X-\($0): 1\r\n" }.joined() + "\r\n"
        #expect(Self.notTaken(many))
    }

    static func framing(_ text: String) -> (RawHTTP.Framing, Bool)? {
        if case .head(let head) = response(Array(text.utf8)) { return (head.framing, head.keepAlive) }
        return nil
    }

    static func invalid(_ text: String) -> Bool {
        if case .invalid = response(Array(text.utf8)) { return true }
        return false
    }

    @Test("a response's framing: Content-Length, chunked, none for 1xx/204/304, to the connection's end otherwise; what ends the connection")
    func responseFraming() throws {
        #expect(Self.framing("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n")! == (.length(12), true))
        #expect(Self.framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")! == (.chunked, true))
        #expect(Self.framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n")! == (.close, false))
        #expect(Self.framing("HTTP/1.1 200 OK\r\n\r\n")! == (.close, false))
        #expect(Self.framing("HTTP/1.1 204 No Content\r\n\r\n")! == (.none, true))
        #expect(Self.framing("HTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n\r\n")! == (.none, true))
        #expect(Self.framing("HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n")! == (.none, true))
        #expect(Self.framing("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\n")! == (.length(1), false))
        #expect(Self.framing("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: Keep-Alive, CLOSE\r\n\r\n")! == (.length(1), false))
        #expect(Self.framing("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n")! == (.length(1), false))
        #expect(Self.framing("HTTP/1.1 200\r\nContent-Length: 1\r\n\r\n")! == (.length(1), true), "no reason phrase")
        let utf8Reason = try #require(Self.framing("HTTP/1.1 200 Tr\u{e8}s bien\r\nContent-Disposition: attachment; filename=\"\u{e9}.txt\"\r\nContent-Length: 1\r\n\r\n"))
        #expect(utf8Reason == (.length(1), true), "bytes above 0x7F in a reason or a value are the upstream's to send")
        let many = "HTTP/1.1 200 OK\r\n" + (0..<150).map { "X-\($0): 1\r\n" }.joined() + "Content-Length: 0\r\n\r\n"
        #expect(Self.framing(many)! == (.length(0), true), "an upstream's many headers are its own business")
        guard case .incomplete = Self.response(Array("HTTP/1.1 200 OK\r\nContent-Len".utf8)) else {
            Issue.record("a head cut short was not incomplete")
            return
        }
    }

    @Test(
        "a response head that is not well-formed HTTP/1.1 is a broken upstream, never guessed at",
        arguments: [
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            // Equal lengths twice too: NIO's parser refuses them on the handlers' carrier, so the byte path does.
            "HTTP/1.1 200 OK\r\nContent-Length: 12\r\nContent-Length: 12\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
            "HTTP/2 200 OK\r\n\r\n",
            "HTTP/1.1 20 OK\r\n\r\n",
            "HTTP/1.1 099 Low\r\n\r\n",
            "SSH-2.0-OpenSSH\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX: a\nY: b\r\n\r\n",
            "HTTP/1.1 200 OK\r\nBad Name: a\r\n\r\n",
        ]
    )
    func brokenResponses(_ text: String) {
        #expect(Self.invalid(text))
    }

    static func chunkedEnd(_ text: String, splitAt split: Int? = nil) -> ChunkedFraming.Progress {
        var framing = ChunkedFraming()
        let bytes = Array(text.utf8)
        guard let split else { return bytes.withUnsafeBytes { framing.consume($0) } }
        let first = bytes.prefix(split).withUnsafeBytes { framing.consume(UnsafeRawBufferPointer($0)) }
        switch first {
        case .more: break
        case .ended, .invalid: return first
        }
        switch bytes.dropFirst(split).withUnsafeBytes({ framing.consume(UnsafeRawBufferPointer($0)) }) {
        case .ended(let count): return .ended(split + count)
        case let other: return other
        }
    }

    @Test("a chunked body ends where its last chunk and trailers end, however its bytes are split; the bytes after it are not the body's")
    func chunkedEnds() {
        let body = "5\r\nhello\r\n1a;name=\"ext\"\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nTrailer-One: 1\r\n\r\n"
        let next = "HTTP/1.1 200 OK\r\n"
        for split in 0...body.utf8.count {
            #expect(Self.chunkedEnd(body + next, splitAt: split) == .ended(body.utf8.count), "split at \(split)")
        }
        var framing = ChunkedFraming()
        var data = ""
        let bytes = Array((body + next).utf8)
        _ = bytes.withUnsafeBytes { buffer in framing.consume(buffer) { data += String(decoding: buffer[$0], as: UTF8.self) } }
        #expect(data == "helloabcdefghijklmnopqrstuvwxyz", "the data, without sizes, extensions or trailers")
        #expect(Self.chunkedEnd("0\r\n\r\n") == .ended(5))
        #expect(Self.chunkedEnd("5\r\nhel") == .more)
        #expect(Self.chunkedEnd("0\r\nTrailer: x\r\n") == .more)
    }

    @Test(
        "a chunked body that breaks its framing is refused",
        arguments: ["x\r\n", "\r\n", ";ext\r\n", "5\nhello\r\n", "5\r\nhelloX\r\n", "5\r\nhello\r\r", "0\r\nTrailer\n", "0\r\n\rX", "FFFFFFFFFFFFFFFFF\r\n"]
    )
    func chunkedRefused(_ text: String) {
        #expect(Self.chunkedEnd(text) == .invalid)
    }
}

/// The word-at-a-time reading of a head (`RawHTTP.headEnd`, the values in `RawHTTP.headerLines`) held to the byte loop
/// it replaced, kept here as the reference: on generated words and heads made mostly of the bytes where the two could
/// part (CR, LF, tab, SP, controls, DEL, obs-text), cut at every length.
@Suite("Byte-level HTTP: a head read eight bytes at a time, as byte by byte")
struct RawHTTPWordTests {
    /// The bytes where a word test could go wrong, and ordinary text.
    static let edges: [UInt8] = [0x00, 0x01, 0x09, 0x0A, 0x0C, 0x0D, 0x0E, 0x0F, 0x1F, 0x20, 0x21, 0x3A, 0x41, 0x61, 0x7E, 0x7F, 0x80, 0x8D, 0xA0, 0xFF]

    static func byte(_ random: inout SplitMix64) -> UInt8 {
        random.next() % 3 == 0 ? UInt8(truncatingIfNeeded: random.next()) : edges[Int(random.next() % UInt64(edges.count))]
    }

    @Test("a word's first byte below 0x0E, and its first byte outside 0x20 to 0x7E, found where they are; none flagged when there is none")
    func wordTests() {
        var random = SplitMix64(seed: 0x776f_7264)
        var sawEach = (lineEnd: 0, text: 0)
        for _ in 0..<200_000 {
            // A third of the words plain text, where the word tests must say so.
            let plain = random.next() % 3 == 0
            let bytes = (0..<8).map { _ in plain && random.next() % 16 != 0 ? UInt8(0x20 + random.next() % 0x5F) : Self.byte(&random) }
            // Loaded as the parser loads it, in the machine's order.
            let word = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
            let firstLow = bytes.firstIndex { $0 < 0x0E }
            let firstOther = bytes.firstIndex { !(0x20...0x7E).contains($0) }
            let lineEnd = RawHTTP.lineEndMask(word), nonText = RawHTTP.nonTextMask(word)
            #expect((lineEnd == 0 ? nil : RawHTTP.firstFlagged(lineEnd)) == firstLow, "\(bytes)")
            #expect((nonText == 0 ? nil : RawHTTP.firstFlagged(nonText)) == firstOther, "\(bytes)")
            let mayEnd = firstLow != nil, text = firstOther == nil
            if mayEnd { sawEach.lineEnd += 1 }
            if text { sawEach.text += 1 }
        }
        #expect(sawEach.lineEnd > 10_000 && sawEach.text > 1_000, "both answers generated often: \(sawEach)")
        #expect(RawHTTP.statusLineStart == Array("HTTP/1.\0".utf8).withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) })
    }

    @Test("the token bytes are RFC 9110's tchar, every byte asked")
    func tokenBytes() {
        let tchar = Set(Array("!#$%&'*+-.^_`|~".utf8) + Array(UInt8(ascii: "0")...UInt8(ascii: "9")) + Array(UInt8(ascii: "A")...UInt8(ascii: "Z")) + Array(UInt8(ascii: "a")...UInt8(ascii: "z")))
        #expect(tchar.count == 77)
        for byte in UInt8.min...UInt8.max { #expect(RawHTTP.isTokenByte(byte) == tchar.contains(byte), "\(byte)") }
    }

    @Test("a comma list's members, and whether Connection values list a token, read over the bytes as Swift's split reads them, on generated values")
    func listsTokenAsMembers() {
        var random = SplitMix64(seed: 0x636c_6f73)
        let pieces = ["close", "Close", "CLOSE", "keep-alive", "Keep-Alive", "closer", "clos", "upgrade", "x-close", " ", "\t", ",", ",,", "cl ose", "é", "closé", "Upgrade", "X-Name", "KEEP-ALIVE "]
        var listed = 0
        for _ in 0..<20_000 {
            let values = (0..<Int(random.next() % 3)).map { _ in (0..<Int(random.next() % 5)).map { _ in pieces[Int(random.next() % UInt64(pieces.count))] }.joined() }
            // The members as Swift's own `split` reads them: the reference for the byte walk both read through.
            let split = values.map { value in
                value.split(separator: ",").map { $0.drop { $0 == " " || $0 == "\t" } }.map { member in
                    member.reversed().drop { $0 == " " || $0 == "\t" }.reversed()
                }.map { String($0) }.filter { !$0.isEmpty }
            }
            #expect(values.map { RawHTTP.commaList($0).map(String.init) } == split, "\(values)")
            for token: StaticString in ["close", "keep-alive"] {
                let members = split.joined().contains { RawHTTP.equalsIgnoringCase($0[...], token) }
                #expect(RawHTTP.listsToken(values, token) == members, "\(values) \(token)")
                if members { listed += 1 }
            }
            // The fields they name (siwa's filter keeps none of them): every member but close and keep-alive.
            let named = split.joined().filter { !RawHTTP.equalsIgnoringCase($0[...], "close") && !RawHTTP.equalsIgnoringCase($0[...], "keep-alive") }
            #expect(AnswerFilter.connectionNamed(values) == Set(named.map { $0.lowercased() }), "\(values)")
        }
        #expect(listed > 2_000, "values that list a token generated often: \(listed)")
    }

    @Test("generated header lines written into a buffer's room (ByteHead.fields), with room made for all of them, too little or none: the bytes are those written line by line, the buffer's earlier bytes kept, whatever the room")
    func linesIntoRoom() {
        var random = SplitMix64(seed: 0x726f_6f6d)
        let names = ["Host", "X-Auth-Request-User", "X-Siwa-Assertion", "Cookie", "a", "Accept-Language", "X-Auth-Request-Groups"]
        var retried = 0
        for _ in 0..<3_000 {
            let lines = (0..<Int(random.next() % 14)).map { _ in
                (names[Int(random.next() % UInt64(names.count))], String(repeating: "v", count: Int(random.next() % 600)) + (random.next() % 5 == 0 ? "é" : ""))
            }
            let before = String(repeating: "b", count: Int(random.next() % 40))
            var expected = ByteBuffer(string: before)
            for (name, value) in lines { ByteHead.writeField(&expected, name, value) }
            let total = expected.readableBytes - before.utf8.count
            // None, a little, almost enough, just enough, plenty.
            let rooms = [0, Int(random.next() % 64), max(total - 1, 0), total, total + 1_000]
            for room in rooms {
                var out = ByteBuffer(string: before)
                var calls = 0
                ByteHead.fields(into: &out, expected: room) { sink in
                    calls += 1
                    for (name, value) in lines { sink.add(name: name, value: value) }
                }
                #expect(out == expected, "room \(room) for \(total) bytes")
                if room >= total { #expect(calls == 1, "room \(room) for \(total) bytes: \(calls) writes") }
                if calls > 1 { retried += 1 }
            }
        }
        #expect(retried > 3_000, "too little room generated rarely: \(retried)")
    }

    @Test("generated field names (known ones in any case, each with one byte changed, other tokens), anywhere in a buffer, at its very end too: knownName gives the known name exactly when the lowercased bytes are one, as a literal of the same bytes")
    func knownNamesByWords() {
        let known = Set(RawHTTP.knownNames.map(\.name))
        let tokenBytes = (0...255).map(UInt8.init).filter(RawHTTP.isTokenByte)
        var random = SplitMix64(seed: 0x6b6e_6f77_6e)
        var found = 0, missed = 0
        for _ in 0..<50_000 {
            var name: [UInt8]
            if random.next() % 3 != 0 {
                name = Array(RawHTTP.knownNames[Int(random.next() % UInt64(RawHTTP.knownNames.count))].name.utf8)
                if random.next() % 3 == 0 { name[Int(random.next() % UInt64(name.count))] = tokenBytes[Int(random.next() % UInt64(tokenBytes.count))] }
            } else {
                name = (0..<(1 + Int(random.next() % 40))).map { _ in tokenBytes[Int(random.next() % UInt64(tokenBytes.count))] }
            }
            name = name.map { random.next() % 2 == 0 && (0x61...0x7A).contains($0) ? $0 - 0x20 : $0 }
            let before = Int(random.next() % 12), after = random.next() % 3 == 0 ? 0 : Int(random.next() % 12)
            let buffer = [UInt8](repeating: 0x41, count: before) + name + [UInt8](repeating: 0x5A, count: after)
            let lowered = String(decoding: name, as: UTF8.self).lowercased()
            let expected = known.contains(lowered) ? lowered : nil
            let got = buffer.withUnsafeBytes { RawHTTP.knownName($0, at: before, count: name.count) }
            #expect(got == expected, "\(String(decoding: name, as: UTF8.self)) at \(before) of \(buffer.count)")
            if expected == nil { missed += 1 } else { found += 1 }
        }
        #expect(found > 20_000 && missed > 15_000, "both outcomes generated: \(found) known, \(missed) not")
    }

    /// The byte loop `headEnd` was.
    static func referenceHeadEnd(_ bytes: UnsafeRawBufferPointer, limit: Int) -> RawHTTP.HeadEnd {
        let searched = min(bytes.count, limit)
        var index = 0
        while index < searched {
            switch bytes[index] {
            case UInt8(ascii: "\n"):
                guard index > 0, bytes[index - 1] == UInt8(ascii: "\r") else { return .malformed }
                if index >= 3, bytes[index - 2] == UInt8(ascii: "\n") { return .at(index + 1) }
            case UInt8(ascii: "\r"):
                if index + 1 < bytes.count, bytes[index + 1] != UInt8(ascii: "\n") { return .malformed }
            default:
                break
            }
            index += 1
        }
        return .notYet
    }

    /// The byte loop `headerLines` was.
    static func referenceLines(_ bytes: UnsafeRawBufferPointer, from start: Int, end: Int, allowsObsText: Bool) -> [RawHTTP.Line]? {
        var lines: [RawHTTP.Line] = []
        var index = start
        while index < end - 2 {
            let lineStart = index
            while index < end, RawHTTP.isTokenByte(bytes[index]) { index += 1 }
            guard index > lineStart, index < end, bytes[index] == UInt8(ascii: ":") else { return nil }
            let name = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[lineStart..<index]), as: UTF8.self).lowercased()
            index += 1
            while bytes[index] == UInt8(ascii: " ") || bytes[index] == 0x09 { index += 1 }
            let valueStart = index
            var valueEnd = index
            while bytes[index] != UInt8(ascii: "\r") {
                let byte = bytes[index]
                guard byte == 0x09 || (byte >= 0x20 && byte != 0x7F), allowsObsText || byte < 0x80 else { return nil }
                index += 1
                if byte != UInt8(ascii: " "), byte != 0x09 { valueEnd = index }
            }
            guard bytes[index + 1] == UInt8(ascii: "\n") else { return nil }
            lines.append(RawHTTP.Line(name: name, line: lineStart..<index, value: valueStart..<valueEnd))
            index += 2
        }
        return index == end - 2 ? lines : nil
    }

    /// A head of a few field lines, most of them well-formed, some with a generated byte anywhere.
    static func head(_ random: inout SplitMix64) -> [UInt8] {
        var head = Array("GET /p HTTP/1.1\r\n".utf8)
        // Half the heads with no generated byte in their values but text.
        let edgy = random.next() % 2 == 0
        for _ in 0..<(1 + Int(random.next() % 6)) {
            // Known names (`RawHTTP.knownNames`) in any case, near misses of them, and others.
            let names = [
                "Host", "Accept", "X-Forwarded-For", "Cookie", "a", "Content-Type", "HOST", "hosT", "Hosts", "Cookie2", "x-forwarded-fox",
                "X-FORWARDED-PROTO", "content-lengtH", "Content_Length", "Accept-Encodinh", "TE", "tE", "T", "X-Siwa-Assertion",
                "upgrade-insecure-requests", "Access-Control-Request-Methoe", "Set-Cookie",
            ]
            var line = Array(names[Int(random.next() % UInt64(names.count))].utf8) + Array(":".utf8)
            line += Array(String(repeating: " ", count: Int(random.next() % 3)).utf8)
            for _ in 0..<Int(random.next() % 40) {
                line.append(edgy && random.next() % 10 == 0 ? Self.byte(&random) : UInt8(0x20 + random.next() % 0x5F))
            }
            if random.next() % 4 == 0 { line += [0x20, 0x09, 0x20].prefix(Int(random.next() % 4)) }
            head += line + [0x0D, 0x0A]
        }
        head += [0x0D, 0x0A]
        // Now and then a byte anywhere changed, CR and LF among the likeliest.
        if random.next() % 3 == 0 {
            let at = Int(random.next() % UInt64(head.count))
            head[at] = random.next() % 2 == 0 ? [0x0D, 0x0A, 0x09, 0x00][Int(random.next() % 4)] : Self.byte(&random)
        }
        return head
    }

    @Test("generated heads, cut at every length: where the head ends, and its lines and values, as the byte loop read them")
    func headsAsByteByByte() {
        var random = SplitMix64(seed: 0x6865_6164)
        var outcomes: [String: Int] = [:]
        for _ in 0..<3_000 {
            let head = Self.head(&random)
            head.withUnsafeBytes { whole in
                for cut in stride(from: head.count, through: 0, by: -1) {
                    let bytes = UnsafeRawBufferPointer(rebasing: whole[0..<cut])
                    let limit = random.next() % 8 == 0 ? Int(random.next() % UInt64(head.count + 1)) : RawHTTP.requestHeadLimit
                    let found = RawHTTP.headEnd(bytes, limit: limit)
                    #expect(found == Self.referenceHeadEnd(bytes, limit: limit), "\(Array(bytes)) limit \(limit)")
                    guard cut == head.count, case .at(let end) = found else { continue }
                    let start = head.firstIndex(of: 0x0A).map { $0 + 1 } ?? 0
                    guard start < end else { continue }
                    for obs in [false, true] {
                        let lines = RawHTTP.headerLines(bytes, from: start, end: end, allowsObsText: obs, limit: .max)
                        #expect(lines == Self.referenceLines(bytes, from: start, end: end, allowsObsText: obs), "\(head)")
                        outcomes[lines == nil ? "refused" : "read", default: 0] += 1
                    }
                }
            }
        }
        #expect((outcomes["read"] ?? 0) > 1_000 && (outcomes["refused"] ?? 0) > 200, "both outcomes generated: \(outcomes)")
    }
}
