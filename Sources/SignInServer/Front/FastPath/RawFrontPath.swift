import DoorHTTP
import Foundation
import HTTPTypes
import Logging
import NIOCore

/// The built-in proxy's hottest path, below NIO's HTTP codecs: first in each connection's pipeline with
/// `--upstream`, it reads the client's bytes itself (`RawHTTP`, a strict subset of HTTP/1.1) and, for a `GET` that
/// `BytePathAnswers` passes to the upstream from memory, writes the upstream's request as bytes on a kept-alive
/// connection of the same event loop (`UpstreamPool`, no codec either) and relays the answer's bytes back as they
/// come, reading only its head and framing. Nothing is converted to header types and back, which is what a request
/// through the codecs spent most of its time on.
///
/// What reaches the upstream and the client is what the codec path sends (the head is written by
/// `UpstreamForwarder.writeHead`, the answer filtered by `AnswerFilter`, for both): siwa's `Host`, the client's headers less the hop-by-hop,
/// forgeable and `Connection`-named ones and siwa's cookies, `X-Forwarded-*`, the identity and assertion; back, the
/// upstream's status and headers less the hop-by-hop ones and a `Set-Cookie` of siwa's, with siwa's `Date` and
/// `Server`, the body as sent (a chunked one relayed chunk by chunk, one that ends with the connection re-chunked).
///
/// A `GET` whose session is not in memory (the cache holds one for `check_cache_seconds`) waits while the store is
/// asked and an assertion signed, as the handlers would, off the event loop; then it is decided again. A request it
/// does not take but can frame (another method, a body with `Content-Length`, a page of siwa's, no session or a
/// person turned away, a target the front refuses) is handed alone to NIO's parser, and the next waits until its
/// answer has ended (`SaysConnectionOutcome` says so, `codecAnswered`) and its body has passed: then the byte path
/// goes on. A head outside the subset is handed with everything after it to NIO's parser, and this handler leaves the
/// pipeline: from then on the connection is Hummingbird's, as if this path did not exist.
///
/// The target is read as every way to the upstream reads it (`SiwaPaths.route`, `RequestTarget`): the decision is
/// made on the normalized target, and the normalized target is what the upstream gets.
final class RawFrontPath: ChannelDuplexHandler, RemovableChannelHandler, UpstreamExchangeDelegate, DeadlineWatcher {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let answers: BytePathAnswers
    let upstream: BytePathAnswers.Upstream?
    var context: ChannelHandlerContext?
    /// The client's time limits, told of the heads this path reads and the answers it ends.
    weak var clientTimer: ClientTimer?
    /// What this connection's requests are answered with from memory, and what it remembers of them.
    private var memory: ConnectionMemory
    /// What the client sent that has not been taken yet.
    var pending: ByteBuffer?
    /// The connection ends after an answer that said so: nothing the client sends after it is taken.
    var ended = false
    var exchange: ByteExchange?
    /// A read asked for during an exchange with much already pending, issued once it is over.
    var readHeld = false
    /// Requests handed to the codecs whose answer has not ended.
    private var codecOwes = 0
    /// Body bytes of the request handed to the codecs still to come from the client: they go on to the codecs.
    private var bodyToCodecs = 0
    /// Body bytes went to the codecs in this read, without their end of read yet (`channelReadComplete`).
    private var passedOn = false
    /// The store is being asked for the session of the request at the front of `pending` (`warm`).
    private var warming = false
    /// That request has been decided once after the store was asked: not from memory now means the handlers decide.
    private var warmed = false
    /// The exchange's deadline, on the connection's timer (`ConnectionTimer`, shared by an HTTP/2 connection's streams).
    var timer: ConnectionTimer { memory.timer }
    /// The client half-closed while something was in progress or waiting: the connection ends once it is answered.
    private var inputClosed = false
    /// The server is shutting down: the connection ends after the exchange in progress.
    private var closeWhenIdle = false
    /// The shutdown began while the connection was set up (`ShutdownDuringSetup`): its first request is answered as
    /// one that said `Connection: close`.
    private var closeAfterNext = false
    /// The handlers behind this one have been built (`ConnectionMemory.buildsBehind`).
    private var builtBehind = false

    /// This handler reads a connection of its own (HTTP/1.1): it learns its peer and finds its client timer. On an
    /// HTTP/2 stream the connection's `memory` knows the peer, and the connection's limits are HTTP/2's.
    private let ownsConnection: Bool

    /// `memory`: what the connection remembers, shared by its HTTP/2 streams (which learned the peer); a connection
    /// of its own by default.
    init(answers: BytePathAnswers, memory: ConnectionMemory? = nil) {
        self.answers = answers
        upstream = answers.upstream
        self.memory = memory ?? ConnectionMemory(answers: answers)
        ownsConnection = memory == nil
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        guard ownsConnection else { return }
        clientTimer = try? context.pipeline.syncOperations.handler(type: ClientTimer.self)
        learnPeer(context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        abandonExchange()
        leaveTimer()
        self.context = nil
    }

    /// A connection of its own stops its timer; a stream leaves the connection's to its other streams.
    private func leaveTimer() {
        if ownsConnection {
            timer.cancel()
        } else {
            timer.forget(self)
        }
    }

    private func learnPeer(_ context: ChannelHandlerContext) {
        memory.learnPeer(context.channel.remoteAddress?.ipAddress)
    }

    func channelActive(context: ChannelHandlerContext) {
        if ownsConnection { learnPeer(context) }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        abandonExchange()
        leaveTimer()
        pending = nil
        context.fireChannelInactive()
    }

    // MARK: The client's side

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if ended { return }
        var buffer = unwrapInboundIn(data)
        if bodyToCodecs > 0 {
            // The body of the request the codecs are reading goes to them as it comes.
            let passed = min(bodyToCodecs, buffer.readableBytes)
            bodyToCodecs -= passed
            if let body = buffer.readSlice(length: passed) {
                context.fireChannelRead(wrapInboundOut(body))
                passedOn = true
            }
            guard buffer.readableBytes > 0 else { return }
        }
        if pending == nil {
            pending = buffer
        } else {
            pending?.writeBuffer(&buffer)
        }
        if isIdle { takePending(context) }
    }

    /// The end of a read is the codecs' only when bytes of it went to them: a read this path took whole ends here, not
    /// in every handler behind it (which showed in profiles of `/auth/check`).
    func channelReadComplete(context: ChannelHandlerContext) {
        if passedOn {
            passedOn = false
            context.fireChannelReadComplete()
        }
    }

    /// Nothing is in progress: no exchange, no store lookup, no request with the codecs.
    private var isIdle: Bool {
        exchange == nil && !warming && codecOwes == 0 && bodyToCodecs == 0
    }

    /// The codecs' answer to a request handed to them has ended (`SaysConnectionOutcome` calls this once per answer). Called
    /// from within their write: what waits is taken up after it.
    func codecAnswered() {
        codecOwes = max(0, codecOwes - 1)
        guard let context, isIdle else { return }
        context.eventLoop.assumeIsolated().execute {
            guard self.isIdle, let context = self.context else { return }
            if self.readHeld {
                self.readHeld = false
                context.read()
            }
            self.takePending(context)
        }
    }

    func read(context: ChannelHandlerContext) {
        // While something is in progress the client may send its next requests; past a limit it is no longer read.
        if !isIdle, bodyToCodecs == 0, (pending?.readableBytes ?? 0) >= RawHTTP.requestHeadLimit {
            readHeld = true
            return
        }
        context.read()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // Shutting down: Hummingbird's connection handler would close a connection it sees as idle at once, under an
        // exchange in progress here. This path ends its connection itself once it is idle.
        if event is ChannelShouldQuiesceEvent {
            return quiesce(context)
        }
        if let late = event as? ShutdownDuringSetup {
            // Told before anything was taken (the version's first bytes come after it): the first request is answered,
            // and the connection ends with it; one that has not come within the grace will not be.
            guard ownsConnection, isIdle, !closeAfterNext else { return quiesce(context) }
            closeAfterNext = true
            let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(in: late.grace) {
                let handler = handler.value
                if handler.isIdle, let context = handler.context { context.close(promise: nil) }
            }
            return
        }
        // The client has sent all it will (a half-close): what it sent before is answered first, then the
        // connection ends. Without anything of this path's in progress or waiting, the codecs decide, as ever.
        if event as? ChannelEvent == .inputClosed, exchange != nil || warming || pending != nil {
            inputClosed = true
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// The server is shutting down: the exchange in progress is finished (Hummingbird's, when the codecs have the
    /// request), nothing after it is taken, and the connection ends.
    private func quiesce(_ context: ChannelHandlerContext) {
        if codecOwes > 0 || bodyToCodecs > 0 {
            // Hummingbird ends the connection after the answer it owes; nothing after it is taken.
            pending = nil
            closeWhenIdle = true
            context.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        } else if isIdle {
            // Nothing in progress (what is pending is a head not yet whole).
            context.close(promise: nil)
        } else {
            closeWhenIdle = true
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, let exchange, let connection = exchange.attempt.connection {
            if exchange.body != nil, exchange.deadline == nil {
                exchange.deadline = idleDeadline()
                armTimer(context)
            }
            connection.readUpstream(true)
        }
        context.fireChannelWritabilityChanged()
    }

    /// Takes the requests waiting, one at a time, until one goes to the upstream or to the handlers.
    func takePending(_ context: ChannelHandlerContext) {
        taking: while isIdle, !closeWhenIdle, var buffer = pending {
            guard buffer.readableBytes > 0 else {
                pending = nil
                break
            }
            let parse = buffer.withUnsafeReadableBytes { RawHTTP.request($0) }
            switch parse {
            case .incomplete:
                break taking
            case .notTaken:
                // Hummingbird's handler, told of the shutdown after the request, ends the connection after its answer.
                if closeAfterNext { closeWhenIdle = true }
                return handOn(context)
            case .head(let head):
                let close = head.closesAfter || closeAfterNext
                if head.hasNoBody,
                    let answer = head.isBodilessGET
                        ? memory.checkAnswer(head, from: buffer, closing: close, allocator: context.channel.allocator)
                            ?? memory.extAuthzAnswer(head, closing: close, allocator: context.channel.allocator)
                            ?? memory.pageAnswer(head, from: buffer, closing: close, allocator: context.channel.allocator)
                        // Envoy asks with the original method and `Content-Length: 0`.
                        : memory.extAuthzAnswer(head, closing: close, allocator: context.channel.allocator)
                {
                    // `/auth/check` or `/auth/forward`, or the sign-in or session page, from memory: answered at once,
                    // as the codec path would.
                    buffer.moveReaderIndex(forwardBy: head.length)
                    pending = buffer.readableBytes > 0 ? buffer : nil
                    warmed = false
                    clientTimer?.wholeRequestRead()
                    // Only a closing answer is waited for: a promise for the others would be made and followed for
                    // nothing (over TLS, by NIO's TLS handler too).
                    if close { return endConnection(context, after: context.writeAndFlush(wrapOutboundOut(answer))) }
                    context.writeAndFlush(wrapOutboundOut(answer), promise: nil)
                    clientTimer?.answerEnded()
                    continue
                }
                let route = upstream?.owned.route(head.target, host: head.host)
                let takeable = head.isTakeable(available: buffer.readableBytes)
                guard takeable, case .upstream(let target)? = route, let request = memory.upstreamRequest(head, target: target, from: buffer, allocator: context.channel.allocator) else {
                    if takeable, !warmed, let presented = memory.presentedToLookUp(head), case .upstream(let target)? = route {
                        return warm(
                            presented, request: AccessRequest(host: head.host, method: head.method, path: target.path), authorization: head.authorization,
                            client: memory.clientAddress(head), context: context
                        )
                    }
                    // Counted while the store was asked: NIO's reader of heads counts it again.
                    if warmed { clientTimer?.headForgotten() }
                    warmed = false
                    handToCodecs(head, from: &buffer, context: context)
                    if closeAfterNext { return quiesce(context) }
                    continue
                }
                guard let headBytes = buffer.readSlice(length: head.length) else { return handOn(context) }
                // The body, whole (`isTakeable`), went into the upstream's request.
                buffer.moveReaderIndex(forwardBy: head.contentLength ?? 0)
                pending = buffer.readableBytes > 0 ? buffer : nil
                exchange = ByteExchange(head: head, headBytes: headBytes, request: request, closeClient: close)
                exchange?.attempt.idempotent = head.isIdempotent
                // Its body came whole with it. A head that waited for the store was counted then.
                if !warmed {
                    clientTimer?.wholeRequestRead()
                }
                warmed = false
                answers.metrics.fastProxiedBytes.increment()
                admit()
            }
        }
        // Shutting down, or the client will send nothing more: what is left is at most a head that will not be whole.
        if isIdle, closeWhenIdle || inputClosed { context.close(promise: nil) }
    }

    /// Hands the request at the front of `buffer` (its head, and as much of its body as has come) to NIO's parser;
    /// the rest of its body follows as it comes, and the next request waits for the codecs' answer.
    private func handToCodecs(_ head: RawHTTP.RequestHead, from buffer: inout ByteBuffer, context: ChannelHandlerContext) {
        guard buildBehind(context) else { return }
        let body = head.contentLength ?? 0
        let passed = min(buffer.readableBytes, head.length + body)
        guard let request = buffer.readSlice(length: passed) else { return }
        pending = buffer.readableBytes > 0 ? buffer : nil
        codecOwes += 1
        bodyToCodecs = head.length + body - passed
        context.fireChannelRead(wrapInboundOut(request))
        context.fireChannelReadComplete()
    }

    /// Asks the store for the session or the bearer token's record (and has an assertion signed) off the event loop,
    /// then decides the request at the front of `pending` again, once.
    private func warm(
        _ presented: BytePathAnswers.Presented, request: AccessRequest, authorization: String?, client: String, context: ChannelHandlerContext
    ) {
        warming = true
        // The head is whole: the client's header limit no longer runs while the store is asked.
        clientTimer?.wholeRequestRead()
        let answers = answers
        let loop = context.eventLoop
        let handler = NIOLoopBound(self, eventLoop: loop)
        Task {
            await answers.warmUpstream(presented, request: request, authorization: authorization, client: client)
            loop.execute { handler.value.warmedUp() }
        }
    }

    private func warmedUp() {
        warming = false
        guard let context, context.channel.isActive else { return }
        warmed = true
        if readHeld {
            readHeld = false
            context.read()
        }
        takePending(context)
    }

    /// Hands what is pending to NIO's parser and leaves the pipeline: the connection is Hummingbird's from here on.
    private func handOn(_ context: ChannelHandlerContext) {
        guard buildBehind(context) else { return }
        let rest = pending
        pending = nil
        // Handed on before leaving: a context that has left the pipeline reaches no handler.
        if let rest {
            context.fireChannelRead(wrapInboundOut(rest))
            context.fireChannelReadComplete()
        }
        if closeWhenIdle { context.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent()) }
        let askRead = readHeld
        readHeld = false
        let channel = context.channel
        _ = context.pipeline.syncOperations.removeHandler(context: context)
        if askRead { channel.read() }
    }

    /// Builds the handlers behind this one, once, before bytes are first handed on to them; false when they could not
    /// be built (the connection, or the stream, is closed).
    private func buildBehind(_ context: ChannelHandlerContext) -> Bool {
        guard !builtBehind, let build = memory.buildsBehind else { return true }
        builtBehind = true
        do {
            try build(context)
            return true
        } catch {
            ended = true
            pending = nil
            context.close(promise: nil)
            return false
        }
    }
}
