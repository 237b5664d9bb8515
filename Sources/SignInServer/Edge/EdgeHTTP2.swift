import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOHTTPTypes
import NIOHTTPTypesHTTP1

/// HTTP/2 on a TLS connection (issue 36), with the limits of `HTTP2Limits`. NIO's HTTP/2 handler enforces the
/// protocol's own bounds (HPACK's table at the size siwa advertises, CONTINUATION without end, frames buffered for a
/// peer that does not read); siwa sets the stream and header limits, the rates of resets and control frames, and ends
/// a connection that stalls.
///
/// Each stream is carried as one HTTP/1.1 exchange (`HTTP2StreamBridge`) through the handlers an HTTP/1.1
/// connection has: the byte path (`RawFrontPath`, sharing the connection's `ConnectionMemory`) answers on the event
/// loop what it answers from memory and passes to the upstream over its raw pool; what it does not take goes through
/// NIO's HTTP/1 codecs to the same responder as HTTP/1.1 (the door, `FrontDoor`), in a task started only then
/// (`StreamLauncher`). One reader of requests and one policy, whatever the client spoke.
struct EdgeHTTP2: Sendable {
    typealias Stream = NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>

    struct Value: ServerChildChannelValue {
        let channel: any Channel
        /// The streams that go to the responder, or open a WebSocket, as they start.
        let streams: AsyncStream<Launched>
    }

    /// A stream the byte path did not take.
    enum Launched: Sendable {
        /// A request for the responder.
        case request(Stream)
        /// A WebSocket opened over the stream (RFC 8441), carried as the HTTP/1.1 upgrade (`UpstreamWebSocketChannel`).
        case webSocket(UpstreamWebSocketChannel.Value)
    }

    let responder: HTTPChannelHandler.Responder
    let limits: HTTP2Limits
    /// A connection with no stream open this long is closed (`client_idle_timeout_ms`).
    let idleTimeout: TimeAmount
    /// A request's body silent this long while read, before its answer, ends its stream with a 408
    /// (`client_body_timeout_ms`).
    let bodyTimeout: TimeAmount
    let metrics: ServerMetrics
    /// The byte path's answers (the same as HTTP/1.1's).
    let fastPath: FastPathAnswers
    /// In front of an upstream: WebSockets over HTTP/2 (RFC 8441), passed as HTTP/1.1's are. Nil: none announced.
    var webSockets: UpstreamWebSocketChannel? = nil

    var configuration: NIOHTTP2Handler.Configuration {
        var configuration = NIOHTTP2Handler.Configuration()
        configuration.connection.initialSettings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: limits.maxConcurrentStreams),
            HTTP2Setting(parameter: .maxHeaderListSize, value: limits.maxHeaderListSize),
            HTTP2Setting(parameter: .initialWindowSize, value: 65_535),
        ]
        if webSockets != nil { configuration.connection.initialSettings.append(HTTP2Setting(parameter: .enableConnectProtocol, value: 1)) }
        // The fields of a head are checked once, by the bridge as it reads them (`HTTP2RequestHead`, held to NIO's
        // verdicts by `HTTP2RequestHeadTests`); NIO's check of the same took over a tenth of an HTTP/2 request's time.
        // What siwa sends is made of fields already read as HTTP/1.1's (`RawHTTP`). Content lengths NIO still checks.
        configuration.connection.headerBlockValidation = .disabled
        configuration.connection.controlFrameRateLimit.maximumCount = limits.maxControlFrames
        configuration.connection.controlFrameRateLimit.windowLength = .seconds(30)
        configuration.stream.streamResetFrameRateLimit.maximumCount = limits.maxResets
        configuration.stream.streamResetFrameRateLimit.windowLength = .seconds(30)
        return configuration
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let limits = limits
        let metrics = metrics
        let idle = idleTimeout
        let body = bodyTimeout
        let fastPath = fastPath
        let configuration = configuration
        let extendedConnect = webSockets != nil
        return channel.eventLoop.makeCompletedFuture {
            let (streams, launched) = AsyncStream.makeStream(of: Launched.self)
            let launch = CodecInstaller.Launch(launched: launched, webSockets: webSockets, logger: logger)
            channel.closeFuture.whenComplete { _ in launched.finish() }
            let watch = ConnectionWatch(
                idleTimeout: idle, stallTimeout: .milliseconds(Int64(limits.stallTimeoutMS)), bodyTimeout: body, maxRefusals: limits.maxResets, metrics: metrics
            )
            let watched = NIOLoopBound(watch, eventLoop: channel.eventLoop)
            try channel.pipeline.syncOperations.addHandler(watch)
            let delegate = ConnectionWatch.Streams(watch: watched)
            // What the connection's requests repeat (its cookie, its person's fields) is read once for all its streams.
            let remembered = ConnectionMemory(answers: fastPath)
            remembered.learnPeer(channel.remoteAddress?.ipAddress)
            remembered.buildsBehind = { context in try CodecInstaller.build(after: context, launch: launch) }
            let memory = NIOLoopBound(remembered, eventLoop: channel.eventLoop)
            // The streams' deadlines share the connection's timer, stopped once with the connection.
            channel.closeFuture.whenComplete { _ in memory.value.timer.cancel() }
            _ = try channel.pipeline.syncOperations.configureHTTP2Pipeline(
                mode: .server, connectionConfiguration: configuration.connection, streamConfiguration: configuration.stream, streamDelegate: delegate
            ) { stream in
                stream.eventLoop.makeCompletedFuture {
                    let pipeline = stream.pipeline.syncOperations
                    try pipeline.addHandler(HTTP2StreamBridge(watch: watched.value, extendedConnect: extendedConnect))
                    try pipeline.addHandler(RawFrontPath(answers: fastPath, memory: memory.value))
                }
            }
            let closer = ConnectionErrorCloser(watch: watch, metrics: metrics, logger: logger)
            watch.closer = closer
            try channel.pipeline.syncOperations.addHandler(closer)
            return Value(channel: channel, streams: streams)
        }
    }

    func handle(value: Value, logger: Logger) async {
        await withDiscardingTaskGroup { group in
            for await launched in value.streams {
                switch launched {
                case .request(let stream):
                    group.addTask { await self.handle(stream: stream, logger: logger) }
                case .webSocket(let opened):
                    guard let webSockets else {
                        opened.channel.close(promise: nil)
                        continue
                    }
                    group.addTask { await webSockets.handle(value: opened, logger: logger) }
                }
            }
        }
    }

    /// The metric's name for a connection error.
    static func limitName(_ error: any Error) -> String {
        // The type, and what it wraps (an HPACK error comes inside the frame decoder's).
        let text = String(describing: type(of: error)) + " " + String(reflecting: error)
        switch text {
        case let name where name.contains("ExcessiveRST"): return "h2_max_resets"
        case let name where name.contains("ExcessiveControlFrames") || name.contains("ExcessiveOutboundControl"): return "h2_max_control_frames"
        case let name where name.contains("ExcessiveContinuation"): return "continuation"
        case let name where name.contains("ExcessivelyLargeHeaderBlock") || name.contains("HeaderList"): return "h2_max_header_list_size"
        case let name where name.contains("MaxStreams") || name.contains("StreamLimit"): return "h2_max_concurrent_streams"
        case let name where name.contains("Glitch"): return "glitches"
        // A header block HPACK cannot decode (a table past the size allowed among them): GOAWAY COMPRESSION_ERROR.
        case let name where name.contains("UnableToParseFrame") || name.contains("HPACK"): return "frame"
        default: return "protocol"
        }
    }

    /// Whether a request head says it comes without a body: a method that has none as a rule, no `Content-Length`
    /// (or 0), no `Content-Type`.
    static func saysNoBody(_ head: HTTPRequest) -> Bool {
        switch head.method {
        case .get, .head, .delete, .options: break
        default: return false
        }
        if let length = head.headerFields[.contentLength], length != "0" { return false }
        return head.headerFields[.contentType] == nil
    }

    /// One request: its head, a body fed from the stream as the responder reads it, and the answer.
    private func handle(stream: Stream, logger: Logger) async {
        do {
            try await stream.executeThenClose { inbound, outbound in
                var iterator = inbound.makeAsyncIterator()
                guard let part = try await iterator.next() else { return }
                guard case .head(let head) = part else { return }
                // A request that says it has no body (a GET, a HEAD, a DELETE… without Content-Length or
                // Content-Type; HTTP/2 ends its stream with the head) is answered with an empty one once its end has
                // come with the head. One that sends a body after all goes the way of any other.
                var first: HTTPRequestPart?
                if Self.saysNoBody(head) {
                    first = try await iterator.next()
                    if case .end = first {
                        try await responder(Request(head: head, body: RequestBody(buffer: ByteBuffer())), ResponseWriter(outbound: outbound), stream.channel)
                        return
                    }
                }
                // The body is read from the stream as the responder reads it, and no further: one the responder leaves
                // unread holds nothing once it has answered (the stream is closed then, RST_STREAM to the client).
                let body = StreamBody(StreamBody.Reader(iterator: iterator, first: first))
                try await responder(Request(head: head, body: RequestBody(asyncSequence: body)), ResponseWriter(outbound: outbound), stream.channel)
            }
        } catch {
            logger.trace("HTTP/2 stream ended", metadata: ["reason": "\(error)"])
        }
    }
}

/// After NIO's HTTP/2 handler: a connection error it met (a flood past a limit, a protocol error) has had its GOAWAY
/// sent; this counts it by limit and closes the connection, so the client is not left holding it. NIO reports a
/// stream's error the same way (after its RST_STREAM, the connection going on): only an error after a GOAWAY, which
/// `ConnectionWatch` sees go out, ends the connection; an I/O error (a reset) closes it without counting a limit.
final class ConnectionErrorCloser: ChannelInboundHandler {
    typealias InboundIn = Any

    private let watch: ConnectionWatch
    private let metrics: ServerMetrics
    private let logger: Logger
    private var closing = false

    init(watch: ConnectionWatch, metrics: ServerMetrics, logger: Logger) {
        self.watch = watch
        self.metrics = metrics
        self.logger = logger
    }

    private var context: ChannelHandlerContext?

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    /// Writes siwa's GOAWAY (NO_ERROR by default, the largest stream id: streams already opened are answered) through
    /// NIO's HTTP/2 handler.
    func goAway(_ errorCode: NIOHTTP2.HTTP2ErrorCode = .noError) {
        guard let context, !closing else { return }
        let frame = HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: .maxID, errorCode: errorCode, opaqueData: nil))
        context.writeAndFlush(NIOAny(frame), promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard !closing else { return }
        let module = String(reflecting: type(of: error))
        let http2 = module.hasPrefix("NIOHTTP2.") || module.hasPrefix("NIOHPACK.")
        // A stream's error: NIO has reset that stream alone.
        if http2, !watch.goAwaySent { return }
        closing = true
        guard http2 else {
            context.close(promise: nil)
            return
        }
        let limit = EdgeHTTP2.limitName(error)
        metrics.http2LimitMet(limit)
        logger.info("HTTP/2 connection ended", metadata: ["limit": "\(limit)", "reason": "\(error)", "peer": "\(context.remoteAddress?.ipAddress ?? "?")"])
        // After the GOAWAY NIO has written.
        context.channel.flush()
        context.close(promise: nil)
    }
}

/// Behind the byte path on a stream: before the first bytes it hands on (a request it does not take), the byte path
/// has NIO's HTTP/1 codecs and the launcher built after it (`ConnectionMemory.buildsBehind`). A stream the byte path
/// answers never builds them, nor a handler that would wait for them. A stream that opens a WebSocket (RFC 8441,
/// `HTTP2StreamBridge.opensWebSocket`) gets the HTTP/1.1 upgrade's pipeline instead, as a connection to siwa in front
/// of an upstream has it (`UpstreamWebSocketChannel`): the same decision, the same handshake with the upstream, the
/// same relay.
enum CodecInstaller {
    /// Where a connection's streams go, made once per connection: each stream's byte path holds one reference (through
    /// the connection's memory), not a copy of each part.
    final class Launch: Sendable {
        let launched: AsyncStream<EdgeHTTP2.Launched>.Continuation
        let webSockets: UpstreamWebSocketChannel?
        let logger: Logger

        init(launched: AsyncStream<EdgeHTTP2.Launched>.Continuation, webSockets: UpstreamWebSocketChannel?, logger: Logger) {
            self.launched = launched
            self.webSockets = webSockets
            self.logger = logger
        }
    }

    /// Builds the handlers after `context` (the byte path's, last in the stream's pipeline) that take what it hands on.
    static func build(after context: ChannelHandlerContext, launch: Launch) throws {
        let pipeline = context.pipeline.syncOperations
        if let webSockets = launch.webSockets, (try? pipeline.handler(type: HTTP2StreamBridge.self))?.opensWebSocket == true {
            let opened = try webSockets.configureUpgrades(channel: context.channel, logger: launch.logger)
            guard case .enqueued = launch.launched.yield(.webSocket(opened)) else { throw ChannelError.ioOnClosedChannel }
            return
        }
        let handlers: [any ChannelHandler] = [
            HTTPResponseEncoder(), ByteToMessageHandler(HTTPRequestDecoder()), HTTPServerProtocolErrorHandler(),
            SaysConnectionOutcome(countsHeads: false), HTTP1ToHTTPServerCodec(secure: true), StreamLauncher(launched: launch.launched),
        ]
        var after = context.handler
        for handler in handlers {
            try pipeline.addHandler(handler, position: .after(after))
            after = handler
        }
    }
}

/// The last handler of a stream the byte path did not take: at the request's head, the stream becomes an async
/// channel handed to the connection's task (`EdgeHTTP2.handle`), which answers it with the responder.
final class StreamLauncher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    private let launched: AsyncStream<EdgeHTTP2.Launched>.Continuation
    private var started = false

    init(launched: AsyncStream<EdgeHTTP2.Launched>.Continuation) {
        self.launched = launched
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if !started {
            started = true
            do {
                let stream = try EdgeHTTP2.Stream(wrappingChannelSynchronously: context.channel)
                guard case .enqueued = launched.yield(.request(stream)) else {
                    // The connection is over.
                    return context.close(promise: nil)
                }
            } catch {
                return context.close(promise: nil)
            }
        }
        context.fireChannelRead(data)
    }
}

/// A request's body over HTTP/2, read from its stream's parts as the responder asks for it: the buffers of its DATA,
/// ended by the stream's end. A stream that closes before its end (the client reset it) fails the read, so that a cut
/// body never passes for a whole one.
struct StreamBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer

    /// The stream's reader, used by one task at a time (the responder's reads of the body).
    final class Reader: @unchecked Sendable {
        private var iterator: NIOAsyncChannelInboundStream<HTTPRequestPart>.AsyncIterator
        private var first: HTTPRequestPart?
        private var ended = false

        init(iterator: NIOAsyncChannelInboundStream<HTTPRequestPart>.AsyncIterator, first: HTTPRequestPart?) {
            self.iterator = iterator
            self.first = first
        }

        func next() async throws -> ByteBuffer? {
            while !ended {
                let part: HTTPRequestPart?
                if let pending = first {
                    first = nil
                    part = pending
                } else {
                    part = try await iterator.next()
                }
                switch part {
                case .body(let buffer)?:
                    return buffer
                case .end?:
                    ended = true
                case .head?:
                    ended = true
                    throw EdgeError(description: "a second request head on one stream")
                case nil:
                    ended = true
                    throw EdgeError(description: "the client's stream ended before its request body did")
                }
            }
            return nil
        }
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        let reader: Reader
        mutating func next() async throws -> ByteBuffer? { try await reader.next() }
    }

    let reader: Reader

    init(_ reader: Reader) {
        self.reader = reader
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(reader: reader) }
}

/// Ends an HTTP/2 connection that has had no stream open for `idleTimeout` (since its last stream ended, or its start:
/// control frames, a PING every few seconds, do not keep a connection without requests open, as Go's server has it), and on
/// the server's graceful shutdown (`ChannelShouldQuiesceEvent`) once its open streams have ended (at once when none
/// is), so a shutdown waits for answers under way and for nothing else.
final class ConnectionWatch: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// NIO's stream delegate, on the connection's event loop: counts the open streams.
    struct Streams: NIOHTTP2StreamDelegate {
        let watch: NIOLoopBound<ConnectionWatch>

        func streamCreated(_ id: HTTP2StreamID, channel: any Channel) {
            watch.value.open += 1
        }

        func streamClosed(_ id: HTTP2StreamID, channel: any Channel) {
            let watch = watch.value
            watch.open -= 1
            watch.last = .now()
            if watch.quiescing, watch.open == 0 { watch.context?.close(promise: nil) }
        }
    }

    private let idleTimeout: TimeAmount
    private let metrics: ServerMetrics
    /// Whether NIO's HTTP/2 handler has written a GOAWAY (a connection error), read from the frames going out.
    private(set) var goAwaySent = false
    /// The frame being written: how many bytes of its 9-byte header have been seen, its length and type read from
    /// them so far, then how much of its payload is left.
    private var headerSeen = 0
    private var frameLength = 0
    private var frameType: UInt8 = 0
    private var payloadLeft = 0
    fileprivate var last = NIODeadline.now()
    fileprivate var open = 0
    fileprivate var quiescing = false
    /// The handler after NIO's HTTP/2 handler, which writes siwa's own GOAWAY on a graceful shutdown.
    weak var closer: ConnectionErrorCloser?
    /// GOAWAY frames siwa asked for itself (a graceful shutdown), not yet seen going out: not a connection error's.
    private var ownGoAways = 0
    fileprivate var context: ChannelHandlerContext?
    private var task: RepeatedTask?

    private let stallTimeout: TimeAmount
    private let bodyTimeout: TimeAmount
    /// The open streams' answers and bodies, checked on the same timer as the idle time. Each stream's bridge
    /// (`HTTP2StreamBridge`, which follows its writes) joins when added to its stream and leaves when removed (held
    /// strongly: a weak reference would cost each stream an allocation of its own).
    private var stalls: [HTTP2StreamBridge] = []
    /// DATA with a payload went out, the connection writable, since the timer last looked; `moved`, when it last did.
    private var dataWent = false
    private var moved = NIODeadline.now()

    /// Streams siwa reset for the client's fault (a malformed head or trailers, `HTTP2StreamBridge.refuse`) in the
    /// current 30 s. NIO counts the resets a client sends (`h2_max_resets`) and its own stream errors, not these: the
    /// bridge checks heads, NIO's check being off. Past `maxRefusals` the connection ends (GOAWAY ENHANCE_YOUR_CALM),
    /// counted as `h2_max_resets`: a client that makes siwa reset stream after stream (MadeYouReset, CVE-2025-8671)
    /// costs it as little as one that resets them itself (rapid reset), and is stopped the same way.
    private var refusals = 0
    private var refusalsSince = NIODeadline.now()
    private let maxRefusals: Int
    private var refusalLimitMet = false

    init(idleTimeout: TimeAmount, stallTimeout: TimeAmount, bodyTimeout: TimeAmount, maxRefusals: Int, metrics: ServerMetrics) {
        self.idleTimeout = idleTimeout
        self.stallTimeout = stallTimeout
        self.bodyTimeout = bodyTimeout
        self.maxRefusals = maxRefusals
        self.metrics = metrics
    }

    /// A stream siwa reset for the client's fault (`refusals`).
    func refused() {
        let now = NIODeadline.now()
        if now - refusalsSince > .seconds(30) {
            refusalsSince = now
            refusals = 0
        }
        refusals += 1
        guard refusals > maxRefusals, !refusalLimitMet, let context else { return }
        refusalLimitMet = true
        metrics.http2LimitMet("h2_max_resets")
        closer?.goAway(.enhanceYourCalm)
        // Through this handler's own `close`, which sends the GOAWAY's pending flush first (its context's `close` would
        // pass it by).
        close(context: context, mode: .all, promise: nil)
    }

    /// Watches a stream's answer for `h2_stall_timeout_ms`.
    func watch(_ stall: HTTP2StreamBridge) {
        stalls.append(stall)
    }

    /// Stops watching a stream that has ended.
    func forget(_ stall: HTTP2StreamBridge) {
        if let index = stalls.lastIndex(where: { $0 === stall }) { stalls.remove(at: index) }
    }

    /// The streams' limits on the client's time. A stream whose body has not come for `bodyTimeout` (before its
    /// answer) gets its 408. A stream whose answer has not moved for `stallTimeout`: when every open stream is so and
    /// nothing has moved on the connection for as long (a client that stops reading, or keeps the connection's window
    /// shut), the connection ends, so that it holds no answer, and no upstream connection, for longer; when other
    /// streams' answers went on, or another stream is open and not held back, only that stream is reset (a paused
    /// video's, whose window the browser keeps shut), and the others go on.
    /// Returns false when the connection was ended.
    private func checkStreams(now: NIODeadline, context: ChannelHandlerContext) -> Bool {
        var late: [HTTP2StreamBridge] = []
        var stalled: [HTTP2StreamBridge] = []
        for stream in stalls {
            if let since = stream.bodySince, now - since >= bodyTimeout {
                late.append(stream)
            } else if let since = stream.since, now - since >= stallTimeout {
                stalled.append(stream)
            }
        }
        // Stuck: every open stream's answer is held back, and nothing has moved for as long. An open stream that is not
        // held back (an idle SSE stream, a long poll, a body still coming) says the client is there.
        if !stalled.isEmpty, stalled.count == stalls.count, now - moved >= stallTimeout {
            metrics.http2LimitMet("h2_stall_timeout_ms")
            context.close(promise: nil)
            return false
        }
        for stream in late {
            metrics.clientLimitMet("client_body_timeout_ms")
            stream.bodyTimedOut()
        }
        for stream in stalled {
            metrics.clientLimitMet("h2_stall_timeout_ms")
            stream.stalledOut()
        }
        return true
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        moved = .now()
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let shortest = min(idleTimeout.nanoseconds, stallTimeout.nanoseconds, bodyTimeout.nanoseconds)
        let every = TimeAmount.nanoseconds(max(shortest / 4, TimeAmount.milliseconds(100).nanoseconds))
        task = context.eventLoop.scheduleRepeatedTask(initialDelay: every, delay: every) { task in
            let (handler, context) = bound.value
            let now = NIODeadline.now()
            if handler.dataWent {
                handler.dataWent = false
                handler.moved = now
            }
            if handler.open == 0, now - handler.last >= handler.idleTimeout {
                task.cancel()
                context.close(promise: nil)
            } else if !handler.checkStreams(now: now, context: context) {
                task.cancel()
            }
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        task?.cancel()
        self.context = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        task?.cancel()
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            quiescing = true
            if open == 0 { return context.close(promise: nil) }
            // The client is told to open no new stream (RFC 9113 6.8: GOAWAY, NO_ERROR), so that the streams under way
            // can end and the connection with them; without it a busy client went on opening streams until the 30 s
            // below cut them. Its GOAWAY is siwa's own, not a connection error's (`scan`).
            if let closer {
                ownGoAways += 1
                closer.goAway()
            }
            // Answers under way get 30 s, no more: a stream that never ends does not hold the shutdown.
            let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(in: .seconds(30)) { bound.value.close(promise: nil) }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if !goAwaySent { scan(unwrapOutboundIn(data)) }
        context.write(data, promise: promise)
    }

    /// A flush asked for while one is pending (streams answered one after another, as their upstream connections
    /// are read in one turn of the event loop) goes out with it, at the end of the turn: one TLS record and one
    /// write for all of them, not one per stream.
    private var flushPending = false

    func flush(context: ChannelHandlerContext) {
        guard !flushPending else { return }
        flushPending = true
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.execute {
            let (handler, context) = bound.value
            guard handler.flushPending else { return }
            handler.flushPending = false
            context.flush()
        }
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        // What was written goes out before the close (a GOAWAY first of all).
        if flushPending {
            flushPending = false
            context.flush()
        }
        context.close(mode: mode, promise: promise)
    }

    /// Follows the outgoing frames (RFC 9113 4.1: a 24-bit length, a type, flags, a stream) to see a GOAWAY (type 7).
    private func scan(_ buffer: ByteBuffer) {
        var bytes = buffer.readableBytesView[...]
        while !bytes.isEmpty {
            if payloadLeft > 0 {
                let skipped = min(payloadLeft, bytes.count)
                payloadLeft -= skipped
                bytes = bytes.dropFirst(skipped)
                continue
            }
            guard let byte = bytes.popFirst() else { return }
            switch headerSeen {
            case 0...2: frameLength = frameLength << 8 | Int(byte)
            case 3: frameType = byte
            default: break
            }
            headerSeen += 1
            guard headerSeen == 9 else { continue }
            if frameType == 7 {
                if ownGoAways > 0 { ownGoAways -= 1 } else { goAwaySent = true }
            } else if frameType == 0, frameLength > 0, !dataWent, context?.channel.isWritable ?? false {
                dataWent = true
            }
            payloadLeft = frameLength
            headerSeen = 0
            frameLength = 0
        }
    }
}
