import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
@testable import SignInServer
import Testing
import TestSupport

/// siwa reads a stream's fields once (`HTTP2RequestHead`) and turns NIO's own check of them off. Here that reading
/// meets NIO's: generated heads and trailers, some well-formed and most not, each judged by both.
@Suite("HTTP/2 request heads: siwa's one reading of the fields agrees with NIO's validation")
struct HTTP2RequestHeadTests {
    typealias Fields = [(String, String)]

    /// The head frames a stream saw, collected from every stream of the connection.
    final class Seen: ChannelInboundHandler, Sendable {
        typealias InboundIn = HTTP2Frame.FramePayload
        let heads = NIOLockedValueBox(0)

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            if case .headers = unwrapInboundIn(data) { heads.withLockedValue { $0 += 1 } }
        }
    }

    /// RFC 9113 §4.1: a frame's 9-byte header, then its payload.
    static func frame(_ type: UInt8, flags: UInt8, stream: UInt32, _ payload: ByteBuffer = ByteBuffer()) -> ByteBuffer {
        var out = ByteBuffer()
        let length = UInt32(payload.readableBytes)
        out.writeInteger(UInt8(length >> 16))
        out.writeInteger(UInt16(length & 0xFFFF))
        out.writeInteger(type)
        out.writeInteger(flags)
        out.writeInteger(stream)
        var payload = payload
        out.writeBuffer(&payload)
        return out
    }

    /// The HPACK blocks of a head and its trailers, encoded as a client does (one encoder, its table carried from
    /// the head to the trailers: a name may go as a reference to one in the table, whatever its case), and the
    /// fields they decode to, which is what a server reads. Nil fields: HPACK itself refuses them (an empty name).
    static func blocks(_ head: Fields, trailers: Fields?) throws -> (head: ByteBuffer, trailers: ByteBuffer?, read: (HPACKHeaders, HPACKHeaders?)?) {
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator(), useHuffmanEncoding: false)
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        func block(_ fields: Fields) throws -> ByteBuffer {
            var out = ByteBuffer()
            try encoder.encode(headers: HPACKHeaders(fields), to: &out)
            return out
        }
        let first = try block(head)
        let last = try trailers.map(block)
        var read: (HPACKHeaders, HPACKHeaders?)?
        var headBytes = first
        if let readHead = try? decoder.decodeHeaders(from: &headBytes) {
            if var trailerBytes = last {
                read = (try? decoder.decodeHeaders(from: &trailerBytes)).map { (readHead, $0) }
            } else {
                read = (readHead, nil)
            }
        }
        return (first, last, read)
    }

    /// NIO's verdict: a server `NIOHTTP2Handler` reads a client's preface, SETTINGS (and the acknowledgement of its
    /// own), the head on stream 1 and, when given, trailers. True when the stream saw them all. `validating`: NIO
    /// checks the fields (its default); without, it checks content lengths only, as siwa runs it.
    static func nioAccepts(_ head: Fields, trailers: Fields?, extendedConnect: Bool, validating: Bool = true) throws -> Bool {
        let channel = EmbeddedChannel()
        defer { _ = try? channel.finish() }
        var connection = NIOHTTP2Handler.ConnectionConfiguration()
        connection.headerBlockValidation = validating ? .enabled : .disabled
        if extendedConnect { connection.initialSettings.append(HTTP2Setting(parameter: .enableConnectProtocol, value: 1)) }
        let seen = Seen()
        _ = try channel.pipeline.syncOperations.configureHTTP2Pipeline(mode: .server, connectionConfiguration: connection, streamConfiguration: .init()) { stream in
            stream.eventLoop.makeCompletedFuture { try stream.pipeline.syncOperations.addHandler(seen) }
        }
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        let (headBlock, trailersBlock, _) = try blocks(head, trailers: trailers)
        var bytes = ByteBuffer(string: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        var settings = frame(0x4, flags: 0, stream: 0)
        var ack = frame(0x4, flags: 0x1, stream: 0)
        bytes.writeBuffer(&settings)
        bytes.writeBuffer(&ack)
        // END_HEADERS, and END_STREAM on the last block.
        var first = frame(0x1, flags: trailersBlock == nil ? 0x5 : 0x4, stream: 1, headBlock)
        bytes.writeBuffer(&first)
        if let trailersBlock {
            var last = frame(0x1, flags: 0x5, stream: 1, trailersBlock)
            bytes.writeBuffer(&last)
        }
        do {
            try channel.writeInbound(bytes)
        } catch {
            // A connection error: NIO refused the block.
            return false
        }
        channel.embeddedEventLoop.run()
        return seen.heads.withLockedValue { $0 } == (trailers == nil ? 1 : 2)
    }

    /// siwa's verdict on the same: NIO as siwa runs it, then siwa's reading of the fields as they were received.
    static func siwaAccepts(_ head: Fields, trailers: Fields?, extendedConnect: Bool) throws -> Bool {
        guard try nioAccepts(head, trailers: trailers, extendedConnect: extendedConnect, validating: false),
            let (readHead, readTrailers) = try blocks(head, trailers: trailers).read
        else { return false }
        return HTTP2RequestHead(readHead, extendedConnect: extendedConnect) != nil && (readTrailers.map(HTTP2RequestHead.isTrailers) ?? true)
    }

    static let base: Fields = [(":method", "GET"), (":scheme", "https"), (":authority", "auth.example.com"), (":path", "/a?b=1"), ("accept", "*/*"), ("cookie", "a=1")]
    static let pseudoNames = [":method", ":scheme", ":path", ":authority", ":protocol", ":status", ":foo", ":Path", ":"]
    static let names = [
        "x-note", "X-Note", "accept", "cookie", "host", "content-length", "te", "connection", "keep-alive", "proxy-connection", "transfer-encoding",
        "upgrade", "x note", "x:note", "x\"note", "x(note)", "x\u{e9}", "x_note", "x.note~|`^", "1", "!#$%&'*+-.^_`|~", "x/note", "x,note", "x;note",
        "x=note", "x@note", "x[note]", "x\\note", "x{note}", "x?note", "x\u{7f}", "x\u{1}note", "x\tnote",
    ]
    static let values = [
        "", "1", "trailers", "gzip", "trailers, gzip", "a b", " lead", "tab\there", "a\rb", "a\nb", "a\u{0}b", "\r\n", "del\u{7f}", "caf\u{e9}",
        "/x", "CONNECT", "GET", "websocket", "https", "a\u{1}b",
    ]

    /// A head made from the well-formed one by one to three of: a field moved, repeated or taken out; a pseudo-header
    /// or a field added with a name and value from the lists above, or a field any reading takes; the method made CONNECT (with `:protocol` or not);
    /// a pseudo-header's value changed.
    static func generated(_ random: inout SplitMix64) -> Fields {
        var fields = base
        for _ in 0...(random.next() % 3) {
            let at = fields.isEmpty ? 0 : random.below(fields.count)
            switch random.next() % 8 {
            case 0 where fields.count > 1:
                let other = random.below(fields.count)
                fields.swapAt(at, other)
            case 1 where !fields.isEmpty:
                fields.insert(fields[at], at: random.below(fields.count + 1))
            case 2 where !fields.isEmpty:
                fields.remove(at: at)
            case 3:
                fields.insert((random.pick(pseudoNames), random.pick(values)), at: random.below(fields.count + 1))
            case 4:
                // A field any reading takes (a blank, a tab, a byte past ASCII inside a value among them).
                fields.append((random.pick(["x-note", "accept", "x_note", "x.note~|`^", "!#$%&'*+-.^_`|~", "1"]), random.pick(["1", "a b", "caf\u{e9}", "tab\there", " lead", ""])))
            case 5:
                fields.append((random.pick(names), random.pick(values)))
            case 6:
                fields = fields.map { $0.0 == ":method" ? ($0.0, "CONNECT") : $0 }
                if random.next() % 2 == 0 { fields.insert((":protocol", random.pick(["websocket", "connect-udp", ""])), at: 1) }
                if random.next() % 2 == 0 { fields.removeAll { $0.0 == ":scheme" || $0.0 == ":path" } }
            default:
                if let index = fields.firstIndex(where: { $0.0.hasPrefix(":") && random.next() % 2 == 0 }) { fields[index].1 = random.pick(values) }
            }
        }
        return fields
    }

    @Test("4,000 generated heads (pseudo-headers moved, repeated, missing, unknown; CONNECT with and without :protocol, announced or not; names and values of every kind) and trailers: siwa and NIO accept the same ones")
    func agreesWithNIO() throws {
        var random = SplitMix64(seed: 9113)
        var (accepted, refused) = (0, 0)
        var disagreements: [String] = []
        for _ in 0..<4000 {
            let head = Self.generated(&random)
            let trailers: Fields? =
                switch random.next() % 4 {
                case 0: [(random.pick(Self.names), random.pick(Self.values))]
                case 1: [("x-sum", "1"), (random.pick(Self.pseudoNames), "1")]
                default: nil
                }
            let extendedConnect = random.next() % 2 == 0
            let nio = try Self.nioAccepts(head, trailers: trailers, extendedConnect: extendedConnect)
            let siwa = try Self.siwaAccepts(head, trailers: trailers, extendedConnect: extendedConnect)
            if nio != siwa, disagreements.count < 10 {
                disagreements.append("NIO \(nio), siwa \(siwa): \(head) trailers \(String(describing: trailers)) extended CONNECT \(extendedConnect)")
            }
            if nio { accepted += 1 } else { refused += 1 }
        }
        #expect(disagreements.isEmpty, "\(disagreements.joined(separator: "\n"))")
        // Both verdicts are common enough for the comparison to mean something.
        #expect(accepted > 400 && refused > 400, "accepted \(accepted), refused \(refused)")
    }

    @Test("the well-formed head, a CONNECT and an extended CONNECT are read by both; each rule of RFC 9113 §8.2-8.3 alone refuses a head in both")
    func eachRule() throws {
        let connect: Fields = [(":method", "CONNECT"), (":authority", "db.example.com:5432")]
        let webSocket: Fields = [(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "https"), (":path", "/ws"), (":authority", "a.example")]
        for (head, extended) in [(Self.base, false), (connect, false), (webSocket, true)] {
            #expect(try Self.nioAccepts(head, trailers: nil, extendedConnect: extended) && Self.siwaAccepts(head, trailers: nil, extendedConnect: extended), "\(head)")
        }
        let malformed: [(String, Fields, Fields?, Bool)] = [
            ("a pseudo-header after a field", [(":method", "GET"), (":scheme", "https"), ("accept", "*/*"), (":path", "/")], nil, false),
            ("two :path", [(":method", "GET"), (":scheme", "https"), (":path", "/a"), (":path", "/b"), ("accept", "*/*")], nil, false),
            ("no :scheme", Self.base.filter { $0.0 != ":scheme" }, nil, false),
            ("no :path", Self.base.filter { $0.0 != ":path" }, nil, false),
            ("no :method", Self.base.filter { $0.0 != ":method" }, nil, false),
            ("an empty :path", Self.base.map { $0.0 == ":path" ? ($0.0, "") : $0 }, nil, false),
            (":status in a request", [(":status", "200")] + Self.base, nil, false),
            ("an unknown pseudo-header", [(":foo", "1")] + Self.base, nil, false),
            ("a blank in :path", Self.base.map { $0.0 == ":path" ? ($0.0, "/a b") : $0 }, nil, false),
            (":protocol not announced", webSocket, nil, false),
            (":protocol on a GET", [(":method", "GET"), (":protocol", "websocket"), (":scheme", "https"), (":path", "/ws")], nil, true),
            ("a CONNECT with :path", connect + [(":path", "/")], nil, false),
            ("an uppercase name", Self.base + [("X-Note", "1")], nil, false),
            ("TE other than trailers", Self.base + [("te", "gzip")], nil, false),
            ("a connection's field", Self.base + [("keep-alive", "5")], nil, false),
            ("LF in a value", Self.base + [("x-note", "a\nb")], nil, false),
            ("CR in a value", Self.base + [("x-note", "a\rb")], nil, false),
            ("NUL in a value", Self.base + [("x-note", "a\u{0}b")], nil, false),
            ("a comma in a name", Self.base + [("x,note", "1")], nil, false),
            ("a CONNECT without :authority", [(":method", "CONNECT")], nil, false),
            ("an extended CONNECT without :scheme", webSocket.filter { $0.0 != ":scheme" }, nil, true),
            ("two :protocol", [webSocket[0], webSocket[1], (":protocol", "websocket"), webSocket[2], webSocket[3], webSocket[4]], nil, true),
            ("a pseudo-header in trailers", Self.base, [(":path", "/")], false),
            ("a connection's field in trailers", Self.base, [("connection", "close")], false),
            ("an uppercase name in trailers", Self.base, [("X-Sum", "1")], false),
            ("LF in a trailer's value", Self.base, [("x-sum", "1\nx: 2")], false),
        ]
        for (what, head, trailers, extended) in malformed {
            #expect(try !Self.nioAccepts(head, trailers: trailers, extendedConnect: extended), "NIO took \(what)")
            #expect(try !Self.siwaAccepts(head, trailers: trailers, extendedConnect: extended), "siwa took \(what)")
            // The rule is siwa's own, not NIO's left on.
            #expect(try Self.nioAccepts(head, trailers: trailers, extendedConnect: extended, validating: false), "NIO without its validation refused \(what)")
        }
    }

    @Test("an upstream's trailers go to an HTTP/2 client only as fields it can read: no connection field, no name that is not a token as it came (a Kelvin sign lowercases to k), no NUL in a value")
    func answerTrailers() throws {
        let section = ByteBuffer(string: "X-Sum: 1\r\n\u{212A}ey: 2\r\nconnection: close\r\nx-bad: a\u{0}b\r\ngrpc-status: 0\r\n")
        let fields = try #require(HTTP2StreamBridge.trailerFields(section))
        #expect(fields.map { "\($0.name): \($0.value)" } == ["x-sum: 1", "grpc-status: 0"])
    }
}
