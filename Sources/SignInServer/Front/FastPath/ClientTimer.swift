import NIOCore

/// The limits on a client's time, first in each connection's pipeline: a request head must arrive whole within
/// `client_header_timeout_ms` of its first byte (a client that sends it a byte at a time holds nothing for long:
/// 408, and the connection ends), and a kept-alive connection with no request in progress ends after
/// `client_idle_timeout_ms` without one. While a request is in progress (its head read, its answer not ended)
/// neither runs: the upstream's limits govern then, and two of the client's own:
/// - `client_body_timeout_ms`: a body being read may go this long without a byte (nginx's `client_body_timeout`).
///   The wait is counted only while the handlers ask for more of it (a `read` passes here): an upload held back
///   because its upstream reads slowly is not the client's delay. Past it, a 408 when nothing of the answer has been
///   written, and the connection ends; before, a client that sent half a body held its connection, and the upstream
///   connection it went to, for ever.
/// - `client_send_timeout_ms`: an answer the client takes none of (NIO's buffer past its high-water mark, and not one
///   byte of it taken by the socket) ends its connection after this (nginx's `send_timeout`): a client that stops
///   reading a long answer holds no upstream connection for longer. A slow reader that takes some is not cut.
///
/// Whoever reads requests says when a head and its body have been read (`headRead`, `requestRead`: the byte path
/// for the requests it takes, the handler after NIO's parser for the others), and whoever ends answers
/// (`answerEnded`: the byte path, `SaysConnectionOutcome`); a request is in progress until both its answer and its
/// body have passed (an answer may come before the body's end: a 401 to an upload). A WebSocket, once switched, is
/// a request that never ends here (its relay has the upstream's idle limit).
///
/// Once a graceful shutdown has begun (`ChannelShouldQuiesceEvent`, or `ShutdownDuringSetup`), the connection ends
/// after `shutdown_timeout_ms` whatever is under way: the handlers behind end it after the answer in progress, and an
/// answer without end (server-sent events passed from the upstream) held the shutdown for as long as the client
/// stayed, as HTTP/2's streams (`ConnectionWatch`) no longer could.
final class ClientTimer: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let limits: ClientLimits
    private let metrics: ServerMetrics
    private var context: ChannelHandlerContext?
    /// Heads read whose answers have not ended.
    private var inProgress = 0
    /// Heads read whose bodies have not all been read.
    private var bodiesOwed = 0
    /// The first byte of a head has come, and the head is not whole yet.
    private var awaitingHead = false
    /// A limit was passed: what the client still sends is read and dropped, and nothing more is written, until the
    /// connection ends.
    private var over = false
    /// When the connection ends unless something happens first; nil while a request is in progress.
    private var deadline: NIODeadline?
    /// When the body owed must have sent its next byte: set when the handlers ask for more of it, cleared when a
    /// byte comes.
    private var bodyDeadline: NIODeadline?
    /// Something of the answer to the request in progress has been written (a body's limit then ends the connection
    /// without a 408).
    private var answerBegun = false
    /// The connection has not been writable since `since` without the client taking a byte, and NIO's buffer held
    /// `last` bytes when last looked at.
    private var held: (since: NIODeadline, last: Int)?
    /// The one timer of the connection. It is never scheduled further ahead than the shortest limit, so a deadline
    /// set after it (the next head's, the next idle wait's) is never earlier than it: setting a deadline costs no
    /// scheduling on a busy connection (scheduling and cancelling a timer per request showed in profiles), and a
    /// timer that fires before the deadline is armed again.
    private var timer: Scheduled<Void>?
    /// The end of the time a graceful shutdown leaves the connection.
    private var shutdownCap: Scheduled<Void>?

    init(limits: ClientLimits, metrics: ServerMetrics) {
        self.limits = limits
        self.metrics = metrics
    }

    private var bodyTimeout: TimeAmount { .milliseconds(Int64(limits.bodyTimeoutMS)) }
    private var sendTimeout: TimeAmount { .milliseconds(Int64(limits.sendTimeoutMS)) }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive { wait(idle: true) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        shutdownCap?.cancel()
        self.context = nil
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if shutdownCap == nil, event is ChannelShouldQuiesceEvent || event is ShutdownDuringSetup {
            let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
            shutdownCap = context.eventLoop.scheduleTask(in: .milliseconds(Int64(limits.shutdownTimeoutMS))) { bound.value.close(promise: nil) }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelActive(context: ChannelHandlerContext) {
        wait(idle: true)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        shutdownCap?.cancel()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if over { return }
        bodyDeadline = nil
        if inProgress == 0, bodiesOwed == 0, !awaitingHead {
            awaitingHead = true
            wait(idle: false)
        }
        context.fireChannelRead(data)
    }

    func read(context: ChannelHandlerContext) {
        // The handlers ask for more: while a body is owed, its next byte is waited for from now.
        if bodiesOwed > 0, bodyDeadline == nil, !answerBegun, !over {
            bodyDeadline = .now() + bodyTimeout
            if timer == nil { arm() }
        }
        context.read()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if over {
            promise?.fail(ChannelError.outputClosed)
            return
        }
        if inProgress > 0 {
            // From its answer's first byte the exchange is the upstream's to time (a body may go on with it).
            answerBegun = true
            bodyDeadline = nil
        }
        context.write(data, promise: promise)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            held = nil
        } else if held == nil {
            held = (.now(), buffered(context))
            if timer == nil { arm() }
        }
        context.fireChannelWritabilityChanged()
    }

    /// The bytes NIO holds for the socket (written, not yet taken by it).
    private func buffered(_ context: ChannelHandlerContext) -> Int {
        (try? context.channel.syncOptions?.getOption(.bufferedWritableBytes)) ?? 0
    }

    /// A request head has been read whole.
    func headRead() {
        inProgress += 1
        bodiesOwed += 1
        awaitingHead = false
        deadline = nil
    }

    /// A request has been read whole, its body with its head (the byte path takes only such).
    func wholeRequestRead() {
        headRead()
        requestRead()
    }

    /// A request's body has been read to its end (at once for one without a body).
    func requestRead() {
        bodiesOwed = max(0, bodiesOwed - 1)
        if bodiesOwed == 0 { bodyDeadline = nil }
        if inProgress == 0, bodiesOwed == 0 { wait(idle: true) }
    }

    /// The answer to a request has ended (the connection stays open).
    func answerEnded() {
        inProgress = max(0, inProgress - 1)
        answerBegun = false
        if inProgress == 0, bodiesOwed == 0 { wait(idle: true) }
    }

    /// A head counted by `headRead` that another reader will count again (the byte path counted it while it asked
    /// the store, then handed the request to NIO's parser): forgotten, with no wait begun.
    func headForgotten() {
        inProgress = max(0, inProgress - 1)
        bodiesOwed = max(0, bodiesOwed - 1)
        if bodiesOwed == 0 { bodyDeadline = nil }
    }

    /// Sets the deadline of a wait for a head's end (or, `idle`, for the next request), and the timer if none runs.
    private func wait(idle: Bool) {
        deadline = .now() + .milliseconds(Int64(idle ? limits.idleTimeoutMS : limits.headerTimeoutMS))
        if timer == nil { arm() }
    }

    /// The earliest of the deadlines set; a held connection is looked at every quarter of its limit, to see whether
    /// the client took some of the answer.
    private func nextDue() -> NIODeadline? {
        var due = deadline
        if let body = bodyDeadline { due = due.map { min($0, body) } ?? body }
        if let held {
            let look = min(held.since + sendTimeout, .now() + .nanoseconds(sendTimeout.nanoseconds / 4))
            due = due.map { min($0, look) } ?? look
        }
        return due
    }

    private func arm() {
        guard let context, let due = nextDue() else { return }
        let shortest = min(limits.headerTimeoutMS, limits.idleTimeoutMS, limits.bodyTimeoutMS, max(limits.sendTimeoutMS / 4, 1))
        let soonest = NIODeadline.now() + .milliseconds(Int64(shortest))
        timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: min(due, soonest)) {
            self.timer = nil
            self.fired()
        }
    }

    private func fired() {
        guard let context, !over else { return }
        let now = NIODeadline.now()
        if let held {
            // Fewer bytes held than when last looked at: the client took some (a write made since, the byte path's read
            // in flight when it stopped reading the upstream, may hide it once; the next look sees it).
            let buffered = buffered(context)
            if buffered < held.last {
                self.held = (now, buffered)
            } else if now - held.since >= sendTimeout {
                return sendTimedOut(context)
            } else {
                self.held = (held.since, buffered)
            }
        }
        if let due = bodyDeadline, due <= now, bodiesOwed > 0 { return bodyTimedOut(context) }
        if let due = deadline, due <= now {
            deadline = nil
            expired(context)
        }
        if !over, timer == nil { arm() }
    }

    private func expired(_ context: ChannelHandlerContext) {
        guard inProgress == 0, bodiesOwed == 0 else { return }
        guard awaitingHead else {
            context.close(promise: nil)
            return
        }
        metrics.clientLimitMet("client_header_timeout_ms")
        timedOut(context, answer: Self.timedOut)
    }

    /// A body owed sent nothing for `client_body_timeout_ms` while it was asked for: a 408 when the request has
    /// nothing of its answer written yet, else the connection just ends (its answer, or part of it, went before).
    private func bodyTimedOut(_ context: ChannelHandlerContext) {
        metrics.clientLimitMet("client_body_timeout_ms")
        // A 408 only for the one request in progress, before its answer: with another before it (pipelined, its answer
        // not begun), the 408 would be read as that one's answer.
        guard inProgress == 1, !answerBegun else {
            over = true
            context.close(promise: nil)
            return
        }
        timedOut(context, answer: Self.bodyTimedOut)
    }

    /// An answer held back for `client_send_timeout_ms` without a byte taken: the connection ends.
    private func sendTimedOut(_ context: ChannelHandlerContext) {
        metrics.clientLimitMet("client_send_timeout_ms")
        over = true
        context.close(promise: nil)
    }

    /// Writes `answer` here, ahead of every codec: whatever of the request has come is not answered otherwise. The
    /// connection ends as every closing answer ends it (`SaysConnectionOutcome.end`), and what the client still sends
    /// is dropped, and what the handlers still write.
    private func timedOut(_ context: ChannelHandlerContext, answer: String) {
        over = true
        deadline = nil
        bodyDeadline = nil
        SaysConnectionOutcome.end(context, after: context.writeAndFlush(NIOAny(ByteBuffer(string: answer))))
    }

    /// The answer to a head that did not arrive in time.
    static let timedOut: String = timeoutAnswer("The request did not arrive in time. Please try again.\n")

    /// What a 408 for a body that stopped arriving says (HTTP/2 streams too, `HTTP2StreamBridge.bodyTimedOut`).
    static let bodyTimedOutText = "The request's body stopped arriving. Please try again.\n"

    /// The answer to a body that stopped arriving.
    static let bodyTimedOut: String = timeoutAnswer(bodyTimedOutText)

    private static func timeoutAnswer(_ body: String) -> String {
        "HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n" + body
    }
}
