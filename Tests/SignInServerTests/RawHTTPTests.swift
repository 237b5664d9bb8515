@testable import DoorHTTP
import Foundation
import NIOCore
import NIOEmbedded
import NIOHTTP1
@testable import SignInServer
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
