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

/// Ends an HTTP/2 connection that has had no stream open for `idleTimeout` (since its last stream ended, or its start:
/// control frames, a PING every few seconds, do not keep a connection without requests open, as Go's server has it), and on
/// the server's graceful shutdown (`ChannelShouldQuiesceEvent`) once its open streams have ended (at once when none
/// is, `shutdown_timeout_ms` at most), so a shutdown waits for answers under way and for nothing else.
final class ConnectionWatch: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// NIO's stream delegate, on the connection's event loop: counts the open streams.
    struct Streams: NIOHTTP2StreamDelegate {
        let watch: NIOLoopBound<ConnectionWatch>

        func streamCreated(_ id: HTTP2StreamID, channel: any Channel) {
            let watch = watch.value
            watch.open += 1
            // The shutdown began while the connection was set up: its first stream is answered, and the client told
            // to open no other.
            if watch.awaitingFirstStream, let context = watch.context {
                watch.awaitingFirstStream = false
                watch.sayGoAway(context: context)
            }
        }

        func streamClosed(_ id: HTTP2StreamID, channel: any Channel) {
            let watch = watch.value
            watch.open -= 1
            watch.last = .now()
            if watch.quiescing, watch.open == 0, let context = watch.context { watch.endGracefully(context: context) }
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
    private(set) var open = 0
    fileprivate var quiescing = false
    /// The shutdown began while the connection was set up (`ShutdownDuringSetup`): GOAWAY waits for the first stream.
    fileprivate var awaitingFirstStream = false
    /// The handler after NIO's HTTP/2 handler, which writes siwa's own GOAWAY on a graceful shutdown.
    weak var closer: ConnectionErrorCloser?
    /// GOAWAY frames siwa asked for itself (a graceful shutdown), not yet seen going out: not a connection error's.
    private var ownGoAways = 0
    fileprivate var context: ChannelHandlerContext?
    private var task: RepeatedTask?
    /// Ending after a graceful shutdown (`endGracefully`): siwa's side is closed, the client's read and dropped.
    private var lingering = false

    private let stallTimeout: TimeAmount
    private let bodyTimeout: TimeAmount
    /// How long streams under way may go on once a graceful shutdown has begun (`shutdown_timeout_ms`).
    private let shutdownTimeout: TimeAmount
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

    init(idleTimeout: TimeAmount, stallTimeout: TimeAmount, bodyTimeout: TimeAmount, shutdownTimeout: TimeAmount, maxRefusals: Int, metrics: ServerMetrics) {
        self.idleTimeout = idleTimeout
        self.stallTimeout = stallTimeout
        self.bodyTimeout = bodyTimeout
        self.shutdownTimeout = shutdownTimeout
        self.maxRefusals = maxRefusals
        self.metrics = metrics
    }

    /// A stream siwa reset for the client's fault (`refusals`); `limit` names what is counted when it ends the
    /// connection (`h2_max_resets` for malformed heads, `h2_max_concurrent_streams` for streams opened past the limit).
    func refused(limit: String = "h2_max_resets") {
        let now = NIODeadline.now()
        if now - refusalsSince > .seconds(30) {
            refusalsSince = now
            refusals = 0
        }
        refusals += 1
        guard refusals > maxRefusals, !refusalLimitMet, let context else { return }
        refusalLimitMet = true
        metrics.http2LimitMet(limit)
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

    /// Ends the connection once a shutdown has no stream left on it, so that the client loses nothing: what was written
    /// goes out, then siwa's side is closed (TLS's close_notify, then FIN), and what the client still sends (a SETTINGS
    /// or PING acknowledgement, a WINDOW_UPDATE) is read and dropped until it closes its side, 2 s at most. Closed at
    /// once with those bytes unread, the connection was reset, and a client that had not yet read the last answer
    /// lost it (nginx's `lingering_close` for the same reason).
    fileprivate func endGracefully(context: ChannelHandlerContext) {
        guard !lingering else { return }
        lingering = true
        flushPending = false
        context.flush()
        let promise = context.eventLoop.makePromise(of: Void.self)
        context.close(mode: .output, promise: promise)
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        // A carrier that cannot close one side alone is closed whole.
        promise.futureResult.whenFailure { _ in bound.value.close(promise: nil) }
        context.eventLoop.scheduleTask(in: .seconds(2)) { bound.value.close(promise: nil) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // After the end, nothing the client sends is read: NIO's HTTP/2 handler would answer it on a closed side.
        guard !lingering else { return }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        task?.cancel()
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if lingering, event as? ChannelEvent == .inputClosed {
            // The client has closed its side too.
            return context.close(promise: nil)
        }
        if event is ChannelShouldQuiesceEvent, !quiescing {
            quiescing = true
            sayGoAway(context: context)
            if open == 0 { endGracefully(context: context) }
        } else if let late = event as? ShutdownDuringSetup, !quiescing {
            quiescing = true
            guard open == 0 else { return sayGoAway(context: context) }
            // A GOAWAY now would forbid the stream the client is about to open (RFC 9113 6.8): it comes with that
            // stream, and a client that opens none within the grace is closed.
            awaitingFirstStream = true
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(in: late.grace) {
                let (watch, context) = bound.value
                guard watch.awaitingFirstStream else { return }
                watch.sayGoAway(context: context)
                watch.endGracefully(context: context)
            }
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// Tells the client to open no new stream (RFC 9113 6.8: GOAWAY, NO_ERROR), so that the streams under way can end
    /// and the connection with them; without it a busy client went on opening streams until the limit below cut them.
    /// Its GOAWAY is siwa's own, not a connection error's (`scan`).
    fileprivate func sayGoAway(context: ChannelHandlerContext) {
        if let closer {
            ownGoAways += 1
            closer.goAway()
        }
        // Answers under way get `shutdown_timeout_ms`, no more: a stream that never ends does not hold the shutdown.
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.scheduleTask(in: shutdownTimeout) {
            let (watch, context) = bound.value
            watch.close(context: context, mode: .all, promise: nil)
        }
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
