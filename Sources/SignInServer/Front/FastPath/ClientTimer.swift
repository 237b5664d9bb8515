import NIOCore

/// The limits on a client's time, first in each connection's pipeline: a request head must arrive whole within
/// `client_header_timeout_ms` of its first byte (a client that sends it a byte at a time holds nothing for long:
/// 408, and the connection ends), and a kept-alive connection with no request in progress ends after
/// `client_idle_timeout_ms` without one. While a request is in progress (its head read, its answer not ended)
/// neither runs: the upstream's limits govern then.
///
/// Whoever reads requests says when a head and its body have been read (`headRead`, `requestRead`: the byte path
/// for the requests it takes, the handler after NIO's parser for the others), and whoever ends answers
/// (`answerEnded`: the byte path, `SaysConnectionOutcome`); a request is in progress until both its answer and its
/// body have passed (an answer may come before the body's end: a 401 to an upload). A WebSocket, once switched, is
/// a request that never ends here (its relay has the upstream's idle limit).
final class ClientTimer: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let limits: ClientLimits
    private var context: ChannelHandlerContext?
    /// Heads read whose answers have not ended.
    private var inProgress = 0
    /// Heads read whose bodies have not all been read.
    private var bodiesOwed = 0
    /// The first byte of a head has come, and the head is not whole yet.
    private var awaitingHead = false
    /// The head did not come in time: what the client still sends is read and dropped until the connection ends.
    private var over = false
    /// When the connection ends unless something happens first; nil while a request is in progress.
    private var deadline: NIODeadline?
    /// The one timer of the connection. It is never scheduled further ahead than the shorter limit, so a deadline
    /// set after it (the next head's, the next idle wait's) is never earlier than it: setting a deadline costs no
    /// scheduling on a busy connection (scheduling and cancelling a timer per request showed in profiles), and a
    /// timer that fires before the deadline is armed again.
    private var timer: Scheduled<Void>?

    init(limits: ClientLimits) {
        self.limits = limits
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive { wait(idle: true) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        wait(idle: true)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if over { return }
        if inProgress == 0, bodiesOwed == 0, !awaitingHead {
            awaitingHead = true
            wait(idle: false)
        }
        context.fireChannelRead(data)
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
        if inProgress == 0, bodiesOwed == 0 { wait(idle: true) }
    }

    /// The answer to a request has ended (the connection stays open).
    func answerEnded() {
        inProgress = max(0, inProgress - 1)
        if inProgress == 0, bodiesOwed == 0 { wait(idle: true) }
    }

    /// A head counted by `headRead` that another reader will count again (the byte path counted it while it asked
    /// the store, then handed the request to NIO's parser): forgotten, with no wait begun.
    func headForgotten() {
        inProgress = max(0, inProgress - 1)
        bodiesOwed = max(0, bodiesOwed - 1)
    }

    /// Sets the deadline of a wait for a head's end (or, `idle`, for the next request), and the timer if none runs.
    private func wait(idle: Bool) {
        deadline = .now() + .milliseconds(Int64(idle ? limits.idleTimeoutMS : limits.headerTimeoutMS))
        if timer == nil { arm() }
    }

    private func arm() {
        guard let context, let deadline else { return }
        let soonest = NIODeadline.now() + .milliseconds(Int64(min(limits.headerTimeoutMS, limits.idleTimeoutMS)))
        timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: min(deadline, soonest)) {
            self.timer = nil
            guard let due = self.deadline else { return }
            if due <= .now() {
                self.expired()
            } else {
                self.arm()
            }
        }
    }

    private func expired() {
        guard let context, inProgress == 0, bodiesOwed == 0 else { return }
        guard awaitingHead else {
            context.close(promise: nil)
            return
        }
        // Written here, ahead of every codec: whatever of the head has come is not a request. The connection ends
        // as every closing answer ends it (`SaysConnectionOutcome.end`), and what the client still sends is dropped.
        over = true
        deadline = nil
        SaysConnectionOutcome.end(context, after: context.writeAndFlush(NIOAny(ByteBuffer(string: Self.timedOut))))
    }

    /// The answer to a head that did not arrive in time.
    static let timedOut: String = {
        let body = "The request did not arrive in time. Please try again.\n"
        return "HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n" + body
    }()
}
