import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP2
import NIOHTTPTypes
import NIOHTTPTypesHTTP2

/// HTTP/2 on a TLS connection (issue 36): each stream is one request to the same responder as HTTP/1.1 (the door,
/// `FrontDoor`), with the limits of `HTTP2Limits`. NIO's HTTP/2 handler enforces the protocol's own bounds (HPACK's
/// table at the size siwa advertises, CONTINUATION without end, frames buffered for a peer that does not read); siwa
/// sets the stream and header limits, the rates of resets and control frames, and ends a connection that stalls.
struct EdgeHTTP2: Sendable {
    typealias Stream = NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>
    typealias Value = NIOHTTP2Handler.AsyncStreamMultiplexer<Stream>

    let responder: HTTPChannelHandler.Responder
    let limits: HTTP2Limits
    /// A connection with no byte either way this long is closed (`client_idle_timeout_ms`).
    let idleTimeout: TimeAmount
    let metrics: ServerMetrics

    var configuration: NIOHTTP2Handler.Configuration {
        var configuration = NIOHTTP2Handler.Configuration()
        configuration.connection.initialSettings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: limits.maxConcurrentStreams),
            HTTP2Setting(parameter: .maxHeaderListSize, value: limits.maxHeaderListSize),
            HTTP2Setting(parameter: .initialWindowSize, value: 65_535),
        ]
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
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(
                ConnectionWatch(idleTimeout: idle, metrics: metrics)
            )
            return try channel.pipeline.syncOperations.configureAsyncHTTP2Pipeline(mode: .server, configuration: configuration) { stream in
                stream.eventLoop.makeCompletedFuture {
                    try stream.pipeline.syncOperations.addHandler(HTTP2FramePayloadToHTTPServerCodec())
                    try stream.pipeline.syncOperations.addHandler(StallWatch(timeout: .milliseconds(Int64(limits.stallTimeoutMS)), metrics: metrics))
                    return try Stream(wrappingChannelSynchronously: stream)
                }
            }
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            try await withThrowingDiscardingTaskGroup { group in
                for try await stream in value.inbound {
                    group.addTask { await self.handle(stream: stream, logger: logger) }
                }
            }
        } catch {
            // A connection error (a flood met, a protocol error): NIO has sent GOAWAY and closed it.
            metrics.http2LimitMet(Self.limitName(error))
            logger.debug("HTTP/2 connection ended", metadata: ["reason": "\(error)"])
        }
    }

    /// The metric's name for a connection error.
    static func limitName(_ error: any Error) -> String {
        let text = String(describing: type(of: error))
        switch text {
        case let name where name.contains("ExcessiveRST"): return "h2_max_resets"
        case let name where name.contains("ExcessiveControlFrames") || name.contains("ExcessiveOutboundControl"): return "h2_max_control_frames"
        case let name where name.contains("ExcessiveContinuation"): return "continuation"
        case let name where name.contains("ExcessivelyLargeHeaderBlock") || name.contains("HeaderList"): return "h2_max_header_list_size"
        case let name where name.contains("MaxStreams") || name.contains("StreamLimit"): return "h2_max_concurrent_streams"
        case let name where name.contains("Glitch"): return "glitches"
        default: return "protocol"
        }
    }

    /// One request: its head, a body fed from the stream as the responder reads it, and the answer.
    private func handle(stream: Stream, logger: Logger) async {
        do {
            try await stream.executeThenClose { inbound, outbound in
                var iterator = inbound.makeAsyncIterator()
                guard let part = try await iterator.next() else { return }
                guard case .head(let head) = part else { return }
                let (body, source) = RequestBody.makeStream()
                let rest = Unchecked(iterator)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        var iterator = rest.value
                        do {
                            while let part = try await iterator.next() {
                                switch part {
                                case .body(let buffer): try await source.yield(buffer)
                                case .end: source.finish(); return
                                case .head: source.finish(EdgeError(description: "a second request head on one stream")); return
                                }
                            }
                            source.finish()
                        } catch {
                            source.finish(error)
                        }
                    }
                    try await responder(Request(head: head, body: body), ResponseWriter(outbound: outbound), stream.channel)
                    // The answer is written: what the client has not sent of its body is not waited for.
                    group.cancelAll()
                }
            }
        } catch {
            logger.trace("HTTP/2 stream ended", metadata: ["reason": "\(error)"])
        }
    }
}

/// Carries a value that is used by one task at a time into a child task (the stream's iterator, handed from the head's
/// reader to the body's pump).
struct Unchecked<Value>: @unchecked Sendable {
    var value: Value
    init(_ value: Value) { self.value = value }
}

/// Closes an HTTP/2 connection that neither reads nor writes a byte for `idleTimeout`.
final class ConnectionWatch: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let idleTimeout: TimeAmount
    private let metrics: ServerMetrics
    private var last = NIODeadline.now()
    private var task: RepeatedTask?

    init(idleTimeout: TimeAmount, metrics: ServerMetrics) {
        self.idleTimeout = idleTimeout
        self.metrics = metrics
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let every = TimeAmount.nanoseconds(max(idleTimeout.nanoseconds / 4, TimeAmount.milliseconds(100).nanoseconds))
        task = context.eventLoop.scheduleRepeatedTask(initialDelay: every, delay: every) { task in
            let (handler, context) = bound.value
            if NIODeadline.now() - handler.last >= handler.idleTimeout {
                task.cancel()
                context.close(promise: nil)
            }
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        task?.cancel()
    }

    func channelInactive(context: ChannelHandlerContext) {
        task?.cancel()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        last = .now()
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        last = .now()
        context.write(data, promise: promise)
    }
}

/// A stream that cannot write (the client's window stays shut) for `timeout` ends its whole connection
/// (`h2_stall_timeout_ms`): a client that stops reading holds no answer, and no upstream connection, for longer.
final class StallWatch: ChannelInboundHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    private let timeout: TimeAmount
    private let metrics: ServerMetrics
    private var timer: Scheduled<Void>?

    init(timeout: TimeAmount, metrics: ServerMetrics) {
        self.timeout = timeout
        self.metrics = metrics
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            timer?.cancel()
            timer = nil
        } else if timer == nil {
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            timer = context.eventLoop.scheduleTask(in: timeout) {
                let (handler, context) = bound.value
                guard !context.channel.isWritable else { return }
                handler.metrics.http2LimitMet("h2_stall_timeout_ms")
                context.channel.parent?.close(promise: nil)
            }
        }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        context.fireChannelInactive()
    }
}
