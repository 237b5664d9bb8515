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

/// siwa's HTTP/2 with its clients (issue 36): over TLS on the HTTPS port, and as h2c with prior knowledge on the plain
/// port (`PlainChannel`), with the limits of `HTTP2Limits`. NIO's HTTP/2 handler enforces the
/// protocol's own bounds (HPACK's table at the size siwa advertises, CONTINUATION without end, frames buffered for a
/// peer that does not read); siwa sets the stream and header limits, the rates of resets and control frames, and ends
/// a connection that stalls.
///
/// Each stream is carried as one HTTP/1.1 exchange (`HTTP2StreamBridge`) through the handlers an HTTP/1.1
/// connection has: the byte path (`RawFrontPath`, sharing the connection's `ConnectionMemory`) answers on the event
/// loop what it answers from memory and passes to the upstream over its raw pool; what it does not take goes through
/// NIO's HTTP/1 codecs to the same responder as HTTP/1.1 (the door, `FrontDoor`), in a task started only then
/// (`StreamLauncher`). One reader of requests and one policy, whatever the client spoke.
struct ClientHTTP2: Sendable {
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
    /// How long streams under way may go on once a graceful shutdown has begun (`shutdown_timeout_ms`).
    let shutdownTimeout: TimeAmount
    let metrics: ServerMetrics
    /// The byte path's answers (the same as HTTP/1.1's).
    let fastPath: BytePathAnswers
    /// In front of an upstream: WebSockets over HTTP/2 (RFC 8441), passed as HTTP/1.1's are. Nil: none announced.
    var webSockets: UpstreamWebSocketChannel? = nil

    var configuration: NIOHTTP2Handler.Configuration {
        var configuration = NIOHTTP2Handler.Configuration()
        configuration.connection.initialSettings = [
            // NIO's limit is wider than the one advertised (`HTTP2StreamLimit`, which writes that one on the wire and
            // refuses the streams between the two alone).
            HTTP2Setting(parameter: .maxConcurrentStreams, value: HTTP2StreamLimit.nioLimit(for: limits.maxConcurrentStreams)),
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
        let shutdown = shutdownTimeout
        let fastPath = fastPath
        let configuration = configuration
        let extendedConnect = webSockets != nil
        return channel.eventLoop.makeCompletedFuture {
            let (streams, launched) = AsyncStream.makeStream(of: Launched.self)
            let launch = CodecInstaller.Launch(launched: launched, webSockets: webSockets, logger: logger)
            channel.closeFuture.whenComplete { _ in launched.finish() }
            let watch = ConnectionWatch(
                idleTimeout: idle, stallTimeout: .milliseconds(Int64(limits.stallTimeoutMS)), bodyTimeout: body, shutdownTimeout: shutdown, maxRefusals: limits.maxResets,
                metrics: metrics
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
            try channel.pipeline.syncOperations.addHandler(HTTP2StreamLimit(limit: limits.maxConcurrentStreams))
            let streamLimit = limits.maxConcurrentStreams
            _ = try channel.pipeline.syncOperations.configureHTTP2Pipeline(
                mode: .server, connectionConfiguration: configuration.connection, streamConfiguration: configuration.stream, streamDelegate: delegate
            ) { stream in
                stream.eventLoop.makeCompletedFuture {
                    // A stream past the advertised limit (NIO's own is wider) is refused alone. NIO tells the delegate of a stream
                    // after its initializer: `open` counts the streams before this one.
                    if watched.value.open >= streamLimit {
                        // A client that goes on opening streams past the limit is ended as one that makes siwa reset
                        // stream after stream (`h2_max_resets` such refusals in 30 s).
                        metrics.http2StreamRefused()
                        HTTP2StreamLimit.refuse(stream)
                        return watched.value.refused(limit: "h2_max_concurrent_streams")
                    }
                    // The bridge and the byte path come behind the gRPC check when the stream is not one it answers.
                    try stream.pipeline.syncOperations.addHandler(GRPCCheckFromMemory(memory: memory.value) {
                        [HTTP2StreamBridge(watch: watched.value, extendedConnect: extendedConnect), RawFrontPath(answers: fastPath, memory: memory.value)]
                    })
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
        let limit = ClientHTTP2.limitName(error)
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
        let launched: AsyncStream<ClientHTTP2.Launched>.Continuation
        let webSockets: UpstreamWebSocketChannel?
        let logger: Logger

        init(launched: AsyncStream<ClientHTTP2.Launched>.Continuation, webSockets: UpstreamWebSocketChannel?, logger: Logger) {
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
/// channel handed to the connection's task (`ClientHTTP2.handle`), which answers it with the responder.
final class StreamLauncher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    private let launched: AsyncStream<ClientHTTP2.Launched>.Continuation
    private var started = false

    init(launched: AsyncStream<ClientHTTP2.Launched>.Continuation) {
        self.launched = launched
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if !started {
            started = true
            do {
                let stream = try ClientHTTP2.Stream(wrappingChannelSynchronously: context.channel)
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
                    throw StreamError(description: "a second request head on one stream")
                case nil:
                    ended = true
                    throw StreamError(description: "the client's stream ended before its request body did")
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

/// A client's HTTP/2 stream that broke the exchange it carried, said to the operator.
struct StreamError: Error, CustomStringConvertible {
    let description: String
}
