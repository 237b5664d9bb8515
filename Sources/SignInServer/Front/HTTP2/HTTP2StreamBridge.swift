import Crypto
import DoorHTTP
import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2

/// One HTTP/2 stream as one HTTP/1.1 exchange in bytes, so that a request over HTTP/2 meets the very handlers an
/// HTTP/1.1 connection meets: the byte path (`RawFrontPath`, with its decisions from memory and its raw upstream pool)
/// and, for what it does not take, NIO's HTTP/1 codecs and the handlers. The door has one reader of requests and one
/// policy whatever the client spoke; HTTP/2 is a transport beneath it (issue 36), as nghttpx and Envoy carry HTTP/2
/// to an HTTP/1 core.
///
/// Inbound, the stream's head becomes a request head (`:method`, `:path` and `:authority` as the request line and
/// `Host`; the `Cookie` fields joined, RFC 9113 §8.2.3) and its DATA the body: as it comes with a `Content-Length`,
/// chunked without one, the client's trailers as the chunked body's. A head no HTTP/1.1 reader could take the same
/// way (a byte outside a token in a name or method, CR, LF or NUL in a value, a target that is not visible ASCII, a
/// connection-specific field, a `Host` that names another authority) is malformed (RFC 9113 §8.1.1): the stream
/// is reset with PROTOCOL_ERROR and nothing reaches the handlers. Outbound, the HTTP/1.1 answer becomes a HEADERS
/// frame (its status, its fields less the connection's) and DATA frames (its body unframed), a chunked body's
/// trailers a last HEADERS frame.
final class HTTP2StreamBridge: ChannelDuplexHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = HTTP2Frame.FramePayload

    private enum Inbound {
        case head
        /// The body follows; `chunked` when the head had no `Content-Length`.
        case body(chunked: Bool)
        /// A WebSocket over the stream (RFC 8441): its DATA passes as it comes, its end as the end of input.
        case tunnel
        case ended
    }

    private enum Outbound {
        /// The answer's head, until whole (interim answers skipped).
        case head
        case length(remaining: Int)
        case chunked(ChunkedFraming)
        /// Ends when the writer ends its side.
        case untilClose
        /// A WebSocket switched (RFC 8441): the bytes that follow the `101` pass as DATA until the writer ends its side.
        case tunnel
        case ended
    }

    private var inbound = Inbound.head
    private var outbound = Outbound.head
    /// What has come of the answer's head, or of a chunked body's trailer section.
    private var pending: ByteBuffer?
    private var trailers: ByteBuffer?
    /// The request's method: a `HEAD` is answered without a body.
    private var method = ""
    /// A gRPC answer's HEADERS, until its first DATA or its end (`emitGRPCHead`).
    private var grpcHead: HPACKHeaders?
    /// The frame made last in a write, held so that the write's promise goes with the last of them.
    private var held: HTTP2Frame.FramePayload?
    /// The stream opens a WebSocket (RFC 8441's extended CONNECT, `:protocol` `websocket`), carried as the HTTP/1.1
    /// upgrade handshake it stands for (`CodecInstaller` builds the upgrade's pipeline for it).
    private(set) var opensWebSocket = false
    /// The `Sec-WebSocket-Key` siwa made for the upstream's handshake: its `Sec-WebSocket-Accept` is checked here,
    /// since the HTTP/2 client has no key to check it against.
    private var webSocketKey = ""

    /// The connection's watch, which looks at `since` while this stream is in the pipeline (`h2_stall_timeout_ms`).
    private let watch: ConnectionWatch
    /// Followed frames not yet handed to the connection (`follow`).
    private var outstanding = 0
    /// When the answer last moved while something of it was outstanding; nil when nothing is.
    private(set) var since: NIODeadline?
    /// Since when the handlers have asked for more of the request's body and none has come, while nothing of the
    /// answer has been written (`client_body_timeout_ms`, looked at by the watch); nil otherwise.
    private(set) var bodySince: NIODeadline?
    /// The request is a gRPC call (`content-type: application/grpc…`): a client-streaming or bidirectional call's client
    /// may send nothing for long before the service answers (a subscription), and gRPC's own deadlines govern it, so no
    /// body limit applies.
    private var grpc = false
    private var context: ChannelHandlerContext?
    /// Who waits for every frame to be handed to the connection (`drained`).
    private var drainWaiters: [EventLoopPromise<Void>] = []
    /// The last frame written, not passed on yet: it goes on at the next write, or followed at the flush.
    private var unflushed: (frame: HTTP2Frame.FramePayload, promise: EventLoopPromise<Void>?)?

    /// SETTINGS_ENABLE_CONNECT_PROTOCOL was announced: a head may carry `:protocol` (RFC 8441), from the connection's
    /// start (siwa's SETTINGS go first; NIO's own check waited for the client's acknowledgement of them).
    private let extendedConnect: Bool

    init(watch: ConnectionWatch, extendedConnect: Bool) {
        self.watch = watch
        self.extendedConnect = extendedConnect
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        watch.watch(self)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        watch.forget(self)
        // A frame never flushed, the stream gone.
        unflushed?.promise?.fail(ChannelError.ioOnClosedChannel)
        unflushed = nil
        wakeDrainWaiters()
    }

    // MARK: The request

    func read(context: ChannelHandlerContext) {
        // The handlers ask for more of the body: its next DATA is waited for from now, while the answer has not begun
        // (once it has, the exchange is a stream of both sides, which the upstream's limits govern: a gRPC call's client
        // may send nothing for long while its answer goes on).
        if case .body = inbound, bodySince == nil, case .head = outbound, pending == nil, !grpc { bodySince = .now() }
        context.read()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        // Only the body's bytes, its end or trailers count as the body arriving: a WINDOW_UPDATE every so often, or an
        // empty DATA frame, does not keep a body that never comes waiting.
        switch frame {
        case .headers: bodySince = nil
        case .data(let data) where data.endStream || data.data.readableBytes > 0: bodySince = nil
        default: break
        }
        switch frame {
        case .headers(let headers):
            switch inbound {
            case .head:
                guard let (head, chunked) = request(headers.headers, endStream: headers.endStream, allocator: context.channel.allocator) else {
                    return refuse(context: context)
                }
                grpc = Self.isGRPC(headers.headers)
                inbound = headers.endStream ? .ended : opensWebSocket ? .tunnel : .body(chunked: chunked)
                context.fireChannelRead(wrapInboundOut(head))
            case .body(let chunked):
                // Trailers: the chunked body's, after its last chunk.
                guard HTTP2RequestHead.isTrailers(headers.headers) else { return refuse(context: context) }
                inbound = .ended
                guard chunked else { return context.fireChannelRead(wrapInboundOut(ByteBuffer())) }
                var end = context.channel.allocator.buffer(capacity: 64)
                end.writeString("0\r\n")
                for (name, value, _) in headers.headers { ByteHead.writeField(&end, name, value) }
                end.writeString("\r\n")
                context.fireChannelRead(wrapInboundOut(end))
            case .tunnel:
                // Trailers on a WebSocket's stream: its end.
                guard HTTP2RequestHead.isTrailers(headers.headers) else { return refuse(context: context) }
                inbound = .ended
                context.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
            case .ended:
                break
            }
        case .data(let frame):
            if case .tunnel = inbound {
                if case .byteBuffer(let bytes) = frame.data, bytes.readableBytes > 0 { context.fireChannelRead(wrapInboundOut(bytes)) }
                if frame.endStream {
                    inbound = .ended
                    context.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
                }
                return
            }
            guard case .body(let chunked) = inbound else { return }
            guard case .byteBuffer(let bytes) = frame.data else { return }
            if chunked {
                if bytes.readableBytes > 0 {
                    var chunk = context.channel.allocator.buffer(capacity: bytes.readableBytes + 12)
                    chunk.writeString(String(bytes.readableBytes, radix: 16))
                    chunk.writeString("\r\n")
                    chunk.writeImmutableBuffer(bytes)
                    chunk.writeString("\r\n")
                    if frame.endStream { chunk.writeString("0\r\n\r\n") }
                    context.fireChannelRead(wrapInboundOut(chunk))
                } else if frame.endStream {
                    context.fireChannelRead(wrapInboundOut(ByteBuffer(string: "0\r\n\r\n")))
                }
            } else if bytes.readableBytes > 0 {
                context.fireChannelRead(wrapInboundOut(bytes))
            }
            if frame.endStream { inbound = .ended }
        default:
            break
        }
    }

    /// A malformed request: its stream is reset with PROTOCOL_ERROR, counted by the connection's watch (a client that
    /// makes siwa reset too many is ended).
    private func refuse(context: ChannelHandlerContext) {
        inbound = .ended
        outbound = .ended
        send(.rstStream(.protocolError), promise: nil, context: context)
        flush(context: context)
        closeStream(context: context, mode: .all, promise: nil)
        watch.refused()
    }

    /// The HTTP/1.1 head of a stream's `headers`, and whether its body is chunked; nil when the head is malformed
    /// (`HTTP2RequestHead`, the one check of the fields), or not one an HTTP/1.1 reader could take the same way.
    /// `HTTP2RequestHead` reads `headers` once, checking them and finding what the request line and `Host` are made
    /// of; the cookies, then the other fields, are written after them, into one buffer.
    private func request(_ headers: HPACKHeaders, endStream: Bool, allocator: ByteBufferAllocator) -> (ByteBuffer, chunked: Bool)? {
        // One `Content-Length`, digits alone: NIO reads an empty one as none and a list of equal ones as one, where
        // an HTTP/1.1 reader would read other framing.
        guard let read = HTTP2RequestHead(headers, extendedConnect: extendedConnect), read.hosts <= 1, read.lengths <= 1, read.lengthsAreDigits else { return nil }
        var method = read.method
        guard RawHTTP.isToken(method) else { return nil }
        let (path, authority, host, connectProtocol) = (read.path, read.authority, read.host, read.connectProtocol)
        // RFC 8441: an extended CONNECT (`:protocol`) opens a WebSocket on the stream, and stands for the HTTP/1.1
        // handshake (a GET asking for the upgrade; HTTP/2 has no `Sec-WebSocket-Key`, so one is made for the
        // upstream's HTTP/1.1). `:protocol` comes through only when siwa announced SETTINGS_ENABLE_CONNECT_PROTOCOL,
        // which it does in front of an upstream; another protocol is not carried.
        if let connectProtocol {
            // A tunnel the client ends with its head, or one with a length (CONNECT has no content, RFC 9110 §9.3.6),
            // is no WebSocket.
            guard method == "CONNECT", RawHTTP.equalsIgnoringCase(Substring(connectProtocol), "websocket"), !endStream, !read.hasLength else { return nil }
            method = "GET"
            opensWebSocket = true
        }
        // CONNECT names an authority, not a path (RFC 9113 §8.5).
        guard let target = method == "CONNECT" ? authority : path, Self.isTarget(target) else { return nil }
        if let host, let authority, host.lowercased() != authority.lowercased() { return nil }
        let hostName = authority ?? host
        if let hostName, !Self.isTarget(hostName) { return nil }
        self.method = method
        var out = allocator.buffer(capacity: read.size)
        out.writeString(method)
        out.writeStaticString(" ")
        out.writeString(target)
        out.writeStaticString(" HTTP/1.1\r\n")
        if let hostName {
            out.writeStaticString("host: ")
            out.writeString(hostName)
            out.writeStaticString("\r\n")
        }
        // The `Cookie` fields joined in one (RFC 9113 §8.2.3).
        if read.cookies > 0 {
            out.writeStaticString("cookie: ")
            var first = true
            for (name, value, _) in headers where name == "cookie" {
                if !first { out.writeStaticString("; ") }
                first = false
                out.writeString(value)
            }
            out.writeStaticString("\r\n")
        }
        for (name, value, _) in headers where !name.hasPrefix(":") {
            switch name {
            case "cookie", "host": continue
            // RFC 8441 §5: a WebSocket over HTTP/2 has no key of its own; siwa makes the one its handshake needs.
            case "sec-websocket-key" where connectProtocol != nil: continue
            default: ByteHead.writeField(&out, name, value)
            }
        }
        if opensWebSocket {
            webSocketKey = Data((0..<16).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
            out.writeStaticString("upgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-key: ")
            out.writeString(webSocketKey)
            out.writeStaticString("\r\n")
        }
        let chunked = !endStream && !read.hasLength && !opensWebSocket
        if chunked { out.writeStaticString("transfer-encoding: chunked\r\n") }
        out.writeStaticString("\r\n")
        return (out, chunked)
    }

    /// RFC 6455 §4.2.2: the `Sec-WebSocket-Accept` that answers `key`.
    static func webSocketAccept(_ key: String) -> String {
        Data(Insecure.SHA1.hash(data: Data((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").utf8))).base64EncodedString()
    }

    /// A request target (or authority) that an HTTP/1.1 request line carries as it is: visible ASCII, not empty.
    static func isTarget(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy { (0x21...0x7E).contains($0) }
    }

    // MARK: The answer

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        bodySince = nil
        var bytes = unwrapOutboundIn(data)
        answer(&bytes, context: context)
        if let held {
            self.held = nil
            send(held, promise: promise, context: context)
        } else {
            promise?.succeed()
        }
    }

    /// Makes the frames of `bytes`, the answer's next.
    private func answer(_ bytes: inout ByteBuffer, context: ChannelHandlerContext) {
        while true {
            switch outbound {
            case .head:
                if pending == nil { pending = bytes } else { pending?.writeBuffer(&bytes) }
                guard var answer = pending else { return }
                let parse = answer.withUnsafeReadableBytes { RawHTTP.response($0) }
                guard case .head(let head) = parse else {
                    if case .invalid = parse { return reset(context: context) }
                    return
                }
                pending = nil
                if head.status == 101, opensWebSocket {
                    // Switched: over HTTP/2 that is a 200 (RFC 8441 §5), without the handshake's own fields (nor a
                    // length: a 2xx to a CONNECT has none, RFC 9110 §9.3.6), and the stream carries the WebSocket's
                    // bytes from here. The upstream's accept must answer the key siwa made.
                    let accept = head.lines.first { $0.name == "sec-websocket-accept" }.map { Self.value(of: $0, in: answer) }
                    guard accept == Self.webSocketAccept(webSocketKey) else { return reset(context: context) }
                    let fields = Self.fields(of: head, in: answer, status: 200, leaving: ["sec-websocket-accept", "content-length"])
                    answer.moveReaderIndex(forwardBy: head.length)
                    pending = nil
                    outbound = .tunnel
                    emit(.headers(.init(headers: fields)), context: context)
                    bytes = answer
                    continue
                }
                // A WebSocket not opened is answered with its refusal (401, 403, 502…); one that would read as a 2xx
                // (a path of siwa's own, answered as a page) would tell the client its WebSocket is open: reset.
                if opensWebSocket, (200..<300).contains(head.status) { return reset(context: context) }
                if head.status < 200 {
                    // An interim answer: the answer follows.
                    guard head.status != 101 else { return reset(context: context) }
                    answer.moveReaderIndex(forwardBy: head.length)
                    bytes = answer
                    continue
                }
                // A 204 says no length (RFC 9110 8.6), though upstreams do: over HTTP/2 its HEADERS end the stream, and a
                // length no DATA follows is a stream error NIO refuses to send, which left the client waiting.
                let fields = Self.fields(of: head, in: answer, status: head.status, leaving: head.status == 204 ? ["content-length"] : [])
                answer.moveReaderIndex(forwardBy: head.length)
                bytes = answer
                switch head.framing {
                case _ where method == "HEAD" || head.status == 204 || head.status == 304:
                    outbound = .ended
                case .none, .length(0):
                    outbound = .ended
                case .length(let length):
                    outbound = .length(remaining: length)
                case .chunked:
                    outbound = .chunked(ChunkedFraming())
                case .close:
                    outbound = .untilClose
                }
                // A bodiless answer ends its stream with its head.
                guard case .ended = outbound else {
                    if case .chunked = outbound, Self.isGRPC(fields) {
                        // A gRPC answer's head waits for its first message: an error is answered Trailers-Only, one
                        // HEADERS frame with END_STREAM carrying `grpc-status` (gRPC's HTTP/2 protocol), which the
                        // HTTP/1.1 answer carried as a head and an empty chunked body. HEADERS then an empty DATA would
                        // read as an answer without trailers (gRPC's INTERNAL).
                        grpcHead = fields
                        continue
                    }
                    emit(.headers(.init(headers: fields)), context: context)
                    continue
                }
                return emit(.headers(.init(headers: fields, endStream: true)), context: context)
            case .length(let remaining):
                guard bytes.readableBytes > 0 else { return }
                let taken = min(remaining, bytes.readableBytes)
                guard let slice = bytes.readSlice(length: taken) else { return }
                outbound = taken == remaining ? .ended : .length(remaining: remaining - taken)
                emit(.data(.init(data: .byteBuffer(slice), endStream: taken == remaining)), context: context)
                return
            case .chunked(var framing):
                guard bytes.readableBytes > 0 else { return }
                var data: [Range<Int>] = []
                var trailer: [Range<Int>] = []
                let progress = bytes.withUnsafeReadableBytes { framing.consume($0, data: { data.append($0) }, trailer: { trailer.append($0) }) }
                let start = bytes.readerIndex
                if !data.isEmpty { emitGRPCHead(context: context) }
                for range in data {
                    if let slice = bytes.getSlice(at: start + range.lowerBound, length: range.count) { emit(.data(.init(data: .byteBuffer(slice))), context: context) }
                }
                for range in trailer {
                    guard var slice = bytes.getSlice(at: start + range.lowerBound, length: range.count) else { continue }
                    if trailers == nil { trailers = slice } else { trailers?.writeBuffer(&slice) }
                }
                switch progress {
                case .invalid:
                    return reset(context: context)
                case .more:
                    outbound = .chunked(framing)
                case .ended:
                    outbound = .ended
                    if let fields = trailers.flatMap(Self.trailerFields), !fields.isEmpty {
                        emitGRPCHead(context: context)
                        emit(.headers(.init(headers: fields, endStream: true)), context: context)
                    } else if let head = grpcHead {
                        // Trailers-Only: the one HEADERS frame ends the stream.
                        grpcHead = nil
                        emit(.headers(.init(headers: head, endStream: true)), context: context)
                    } else {
                        emit(.data(.init(data: .byteBuffer(ByteBuffer()), endStream: true)), context: context)
                    }
                    trailers = nil
                }
                return
            case .untilClose, .tunnel:
                guard bytes.readableBytes > 0 else { return }
                emit(.data(.init(data: .byteBuffer(bytes))), context: context)
                return
            case .ended:
                return
            }
        }
    }

    /// The HEADERS of an answer `head` (at the front of `answer`), with `status`: its fields less the connection's
    /// (hop-by-hop, and those its `Connection` names) and less `leaving`.
    private static func fields(of head: RawHTTP.ResponseHead, in answer: ByteBuffer, status: Int, leaving: Set<String> = []) -> HPACKHeaders {
        var fields = HPACKHeaders()
        fields.reserveCapacity(head.lines.count + 1)
        fields.add(name: ":status", value: String(status))
        let named = AnswerFilter.connectionNamed(head.connection)
        for line in head.lines where !AnswerFilter.hopByHop.contains(line.name) && !named.contains(line.name) && !leaving.contains(line.name) {
            fields.add(name: line.name, value: value(of: line, in: answer))
        }
        return fields
    }

    /// The value of a field `line` of the head at the front of `answer`.
    private static func value(of line: RawHTTP.Line, in answer: ByteBuffer) -> String {
        answer.getString(at: answer.readerIndex + line.value.lowerBound, length: line.value.count) ?? ""
    }

    /// The fields of a chunked body's trailer section (its lines, CRLF each), less those of the connection.
    static func trailerFields(_ section: ByteBuffer) -> HPACKHeaders? {
        var fields = HPACKHeaders()
        for line in String(buffer: section).split(separator: "\r\n") {
            // A token as it came: Unicode's lowercasing would make one of some names that are not (the Kelvin sign's).
            guard let colon = line.firstIndex(of: ":"), RawHTTP.isToken(line[..<colon]) else { continue }
            let name = line[..<colon].lowercased()
            let value = String(line[line.index(after: colon)...].trimmingBlanks)
            // NIO's HTTP/2 handler does not check what siwa sends (`HTTP2RequestHead`): a field no client could read
            // stays behind. (The name, a token as it came, is one lowercased.)
            guard HTTP2RequestHead.isValue(value), !AnswerFilter.hopByHop.contains(name) else { continue }
            fields.add(name: name, value: value)
        }
        return fields
    }

    /// Whether `fields` are a gRPC call's or answer's (`content-type: application/grpc…`).
    static func isGRPC(_ fields: HPACKHeaders) -> Bool {
        fields.first(name: "content-type")?.lowercased().hasPrefix("application/grpc") == true
    }

    /// A gRPC answer's HEADERS, held until now (its first message, or trailers after none).
    private func emitGRPCHead(context: ChannelHandlerContext) {
        guard let head = grpcHead else { return }
        grpcHead = nil
        emit(.headers(.init(headers: head)), context: context)
    }

    /// Writes the frame held before, and holds `frame`: the last of a write goes out with its promise.
    private func emit(_ frame: HTTP2Frame.FramePayload, context: ChannelHandlerContext) {
        if let held { send(held, promise: nil, context: context) }
        held = frame
    }

    /// An answer that cannot be carried: the stream is reset, which the client reads as a failed request.
    private func reset(context: ChannelHandlerContext) {
        outbound = .ended
        pending = nil
        grpcHead = nil
        if let held {
            self.held = nil
            send(held, promise: nil, context: context)
        }
        send(.rstStream(.internalError), promise: nil, context: context)
        flush(context: context)
        closeStream(context: context, mode: .all, promise: nil)
    }

    /// The writer ends its side (`SaysConnectionOutcome` after a closing answer): an answer that ends with the
    /// connection ends its stream; the stream closes once the client has ended its side too.
    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        guard mode == .output else { return closeStream(context: context, mode: mode, promise: promise) }
        switch outbound {
        case .untilClose, .tunnel:
            outbound = .ended
            send(.data(.init(data: .byteBuffer(ByteBuffer()), endStream: true)), promise: nil, context: context)
            flush(context: context)
        case .head, .length, .chunked, .ended:
            break
        }
        promise?.succeed()
    }

    // MARK: Limits on the client's time (the watch's timer calls these)

    /// The request's body sent nothing for `client_body_timeout_ms` while it was asked for, and nothing of the answer
    /// has been written: a 408 ends the stream (then RST_STREAM NO_ERROR, which asks the client to stop sending,
    /// RFC 9113 §8.1), and the connection's other streams go on. What the handlers write after it is dropped.
    func bodyTimedOut() {
        guard let context, bodySince != nil else { return }
        bodySince = nil
        inbound = .ended
        outbound = .ended
        pending = nil
        let body = ByteBuffer(string: ClientTimer.bodyTimedOutText)
        let fields = HPACKHeaders([(":status", "408"), ("content-type", "text/plain; charset=utf-8"), ("content-length", String(body.readableBytes))])
        send(.headers(.init(headers: fields)), promise: nil, context: context)
        send(.data(.init(data: .byteBuffer(body), endStream: true)), promise: nil, context: context)
        flush(context: context)
        drained(on: context.eventLoop).assumeIsolated().whenComplete { _ in
            context.writeAndFlush(self.wrapOutboundOut(.rstStream(.noError)), promise: nil)
            context.close(promise: nil)
        }
    }

    /// The answer did not move for `h2_stall_timeout_ms` while the connection's other streams did, or another stream
    /// is open and not held back (the client keeps this stream's window shut): this stream alone is reset (CANCEL), and
    /// what it held is dropped. A connection on which every stream is held back and nothing moves is ended whole by
    /// the watch.
    func stalledOut() {
        guard let context else { return }
        inbound = .ended
        outbound = .ended
        pending = nil
        grpcHead = nil
        unflushed?.promise?.fail(ChannelError.ioOnClosedChannel)
        unflushed = nil
        // Closed at once, not after the frames held back (`closeStream` would wait for them): NIO resets the stream.
        context.close(promise: nil)
    }

    // MARK: The stall watch

    // A stream whose answer does not go out (the client's window stays shut, or it stops reading) for
    // `h2_stall_timeout_ms` ends its whole connection (`ConnectionWatch` looks at `since` on its timer): a client that
    // stops reading holds no answer, and no upstream connection, for longer. A frame is outstanding from its flush
    // until NIO has handed it to the connection, which it does only as the client's flow-control window allows.
    // HEADERS are followed too, though not flow-controlled: a client that stops reading its connection holds them
    // back as well, and a stream whose body has not started (a long poll) would otherwise hold its upstream
    // connection until `upstream_idle_timeout_ms`. While the answer goes out as it is written, only the last frame
    // before each flush is followed: a stream's frames reach the connection in the order written, so when that one has,
    // so have those before it. Once something is held back, every frame is followed, so that each one the client
    // reads counts as movement (a slow but steady reader is not taken for a stalled one).

    /// Writes `frame`: the one held before goes on, and this one is held until the next write or the flush.
    private func send(_ frame: HTTP2Frame.FramePayload, promise: EventLoopPromise<Void>?, context: ChannelHandlerContext) {
        if let unflushed {
            if outstanding > 0 {
                follow(unflushed.frame, promise: unflushed.promise, context: context)
            } else {
                context.write(wrapOutboundOut(unflushed.frame), promise: unflushed.promise)
            }
        }
        unflushed = (frame, promise)
    }

    func flush(context: ChannelHandlerContext) {
        if let unflushed {
            self.unflushed = nil
            follow(unflushed.frame, promise: unflushed.promise, context: context)
        }
        context.flush()
    }

    /// Passes `frame` on, followed until NIO has handed it to the connection.
    private func follow(_ frame: HTTP2Frame.FramePayload, promise: EventLoopPromise<Void>?, context: ChannelHandlerContext) {
        outstanding += 1
        if since == nil { since = .now() }
        let written = promise ?? context.eventLoop.makePromise()
        written.futureResult.assumeIsolated().whenComplete { _ in
            self.outstanding -= 1
            self.since = self.outstanding == 0 ? nil : .now()
            if self.outstanding == 0 { self.wakeDrainWaiters() }
        }
        context.write(wrapOutboundOut(frame), promise: written)
    }

    /// A stream closed while a frame is outstanding (the client's flow-control window holds part of the answer) is
    /// closed once that frame has gone to the connection, whoever closes it: the handlers' task when its responder
    /// returns, a WebSocket's relay at its end, this bridge after a reset. Closed at once, NIO would reset it
    /// (CANCEL) and drop the rest of the answer. A client that never opens its window is ended by
    /// `h2_stall_timeout_ms`, which fails the writes.
    private func closeStream(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        // A frame not flushed goes before the close, not followed: unflushed, it is not waited for.
        if let unflushed {
            self.unflushed = nil
            context.write(wrapOutboundOut(unflushed.frame), promise: unflushed.promise)
        }
        guard mode == .all, outstanding > 0 else { return context.close(mode: mode, promise: promise) }
        drained(on: context.eventLoop).assumeIsolated().whenComplete { _ in context.close(mode: mode, promise: promise) }
    }

    /// Succeeds once every frame followed so far has been handed to the connection (at once when none is
    /// outstanding), or has failed with the stream.
    private func drained(on loop: any EventLoop) -> EventLoopFuture<Void> {
        guard outstanding > 0 else { return loop.makeSucceededVoidFuture() }
        let promise = loop.makePromise(of: Void.self)
        drainWaiters.append(promise)
        return promise.futureResult
    }

    private func wakeDrainWaiters() {
        let waiters = drainWaiters
        drainWaiters = []
        for waiter in waiters { waiter.succeed() }
    }
}
