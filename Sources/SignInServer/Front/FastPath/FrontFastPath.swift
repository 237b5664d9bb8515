import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1

/// The front's hot paths, answered on the connection's event loop: `GET /auth/check` and, with `--upstream`, a
/// `GET` passed to the upstream, both for a session this instance holds in memory (`FastPathAnswers` decides). It
/// sits in each HTTP/1 connection's pipeline ahead of Hummingbird's handlers and hands them every other request
/// untouched, so their answers, pages and refusals are the only ones; what it answers itself, it answers as they
/// would, with the same headers. A request passed to the upstream here crosses no task and no thread: the
/// upstream's connection (`UpstreamPool`) lives on the same event loop, and the answer streams back as it comes,
/// reading the upstream only as fast as the client takes it.
///
/// Requests on one connection are answered in order: while the handlers owe an answer, or an exchange with the
/// upstream is in progress, the next request the client sends waits for its end (and is then decided like any
/// other: a client that sends its next request as soon as it has read an answer of the handlers, before their
/// task has ended it here, is still answered from memory).
final class FrontFastPath: ChannelDuplexHandler, RemovableChannelHandler, UpstreamExchangeDelegate {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let answers: FastPathAnswers
    private var context: ChannelHandlerContext?
    /// The context of Hummingbird's HTTP/1 codec (the handler before this one): the upstream's answer, already in
    /// HTTP/1 form, is written from there, so it is not converted to HTTP types and back.
    private var http1: ChannelHandlerContext?
    private var peer: String?
    /// The byte path ahead of the codecs (with `--upstream`), told when an answer has ended.
    private weak var raw: RawFrontPath?

    /// Requests handed to the handlers whose answer has not been written to its end.
    private var handedOn = 0
    /// The request being read was answered here: its end is dropped (it has no body).
    private var readingTaken = false
    /// The exchange with the upstream in progress.
    private var exchange: Exchange?
    /// What arrived during an exchange or while the handlers owed an answer (a next request, the end of the
    /// client's input, a shutdown notice), taken in order once it is over.
    private var held = CircularBuffer<Held>()
    /// A read asked for during an exchange, issued once it is over.
    private var readHeld = false

    private enum Held {
        case part(HTTPRequestPart)
        case event(Any)
        case error(any Error)
    }

    /// The handlers' answer in progress ends the connection (`Connection: close`): what waits for it is dropped.
    private var closingAfterAnswer = false

    /// One request on its way to the upstream and back.
    private struct Exchange {
        /// The client's request (for siwa's page when the upstream does not answer).
        var request: HTTPRequest
        var head: HTTPRequestHead
        var attempt = UpstreamAttempt<HTTPClientResponsePart>()
        /// The upstream's response head has been passed on.
        var answered = false
        /// The upstream keeps the connection open after this answer.
        var keepAlive = true
        /// The client asked for `Connection: close`.
        var closeClient: Bool
        var timeout: Scheduled<Void>?
    }

    init(answers: FastPathAnswers) {
        self.answers = answers
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        http1 = try? context.pipeline.syncOperations.context(handlerType: HTTP1ToHTTPServerCodec.self)
        raw = try? context.pipeline.syncOperations.handler(type: RawFrontPath.self)
        peer = context.channel.remoteAddress?.ipAddress
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        abandonExchange()
        self.context = nil
        http1 = nil
    }

    /// Writes one part of the upstream's answer towards the client, below the HTTP-types codec.
    private func relay(_ part: HTTPServerResponsePart, flush: Bool = false) {
        guard let http1 else { return }
        flush ? http1.writeAndFlush(NIOAny(part), promise: nil) : http1.write(NIOAny(part), promise: nil)
    }

    func channelActive(context: ChannelHandlerContext) {
        peer = context.channel.remoteAddress?.ipAddress
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        abandonExchange()
        held.removeAll()
        context.fireChannelInactive()
    }

    // MARK: The client's side

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        // The body of a request the handlers are reading goes to them at once; a next request waits its turn.
        let isHead = if case .head = part { true } else { false }
        if exchange != nil || !held.isEmpty || (isHead && handedOn > 0) {
            held.append(.part(part))
            return
        }
        take(part, context: context)
    }

    /// Handles one part of the client's input: its own answer, an exchange, or onward to the handlers.
    private func take(_ part: HTTPRequestPart, context: ChannelHandlerContext) {
        switch part {
        case .head(let head):
            if handedOn == 0 {
                switch answers.decide(head, peer: peer, now: Date()) {
                case .answer(let response):
                    readingTaken = true
                    context.write(wrapOutboundOut(.head(response)), promise: nil)
                    context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
                    if Self.asksToClose(head) {
                        context.close(promise: nil)
                    } else {
                        raw?.codecAnswered()
                    }
                    return
                case .proxy(let upstreamHead) where http1 != nil:
                    readingTaken = true
                    exchange = Exchange(request: head, head: upstreamHead, closeClient: Self.asksToClose(head))
                    connect(fresh: false)
                    return
                case .pass, .proxy:
                    // (A proxied answer is written below Hummingbird's codec; without one, the handlers pass it.)
                    break
                }
            }
            handedOn += 1
            context.fireChannelRead(wrapInboundOut(part))
        case .body, .end:
            if readingTaken {
                if case .end = part { readingTaken = false }
                return
            }
            context.fireChannelRead(wrapInboundOut(part))
        }
    }

    /// As NIO reads it for Hummingbird's handlers: the connection ends after the answer to a request whose
    /// `Connection` lists `close` (among other tokens, in any case).
    private static func asksToClose(_ head: HTTPRequest) -> Bool {
        RawHTTP.listsClose(head.headerFields[values: .connection])
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A parse error in what was held back comes after what was held, as the request it broke.
        if !held.isEmpty {
            held.append(.error(error))
            return
        }
        context.fireErrorCaught(error)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if exchange != nil || !held.isEmpty {
            held.append(.event(event))
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        // The client takes the upstream's answer again: read the upstream again.
        if context.channel.isWritable, let connection = exchange?.attempt.connection {
            try? connection.channel.syncOptions?.setOption(.autoRead, value: true)
        }
        context.fireChannelWritabilityChanged()
    }

    func read(context: ChannelHandlerContext) {
        // Reading on during an exchange keeps the socket's registration as it is (pausing and resuming it costs two
        // system calls per request); only a client that sends much ahead is held back.
        if exchange != nil || handedOn > 0, held.count >= Self.heldLimit {
            readHeld = true
            return
        }
        context.read()
    }

    /// How many parts may wait for an exchange to end before the client's connection is no longer read.
    static let heldLimit = 16

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        var answerEnded = false
        if handedOn > 0 {
            switch unwrapOutboundIn(data) {
            case .head(let head):
                if head.status.code >= 200, head.headerFields[.connection]?.lowercased().contains("close") == true { closingAfterAnswer = true }
            case .body:
                break
            case .end:
                handedOn -= 1
                answerEnded = true
            }
        }
        context.write(data, promise: promise)
        if answerEnded, !closingAfterAnswer { raw?.codecAnswered() }
        // The handlers' answer is over: what waited for it is taken up, once this write has gone its way.
        if answerEnded, handedOn == 0, exchange == nil, !held.isEmpty {
            context.eventLoop.assumeIsolated().execute { self.takeHeld() }
        }
    }

    // MARK: The upstream's side

    private func connect(fresh: Bool) {
        guard let context, let pool = answers.upstream?.pool else { return }
        pool.acquire(on: context.eventLoop, fresh: fresh) { result in
            switch result {
            case .success(let (connection, reused)): self.connected(connection, reused: reused)
            case .failure(let failure): self.failed(failure)
            }
        }
    }

    private func connected(_ connection: UpstreamConnection<HTTPClientResponsePart>, reused: Bool) {
        guard var exchange, let context else {
            // The client left meanwhile: the connection goes back unused.
            answers.upstream?.pool.finish(connection, reusable: true)
            return
        }
        let handler = connection.handler.value
        handler.delegate = self
        exchange.attempt.connection = connection
        exchange.attempt.reused = reused
        let timeoutMS = Int64(answers.upstream?.pool.settings.timeoutMS ?? 30_000)
        exchange.timeout = context.eventLoop.assumeIsolated().scheduleTask(in: .milliseconds(timeoutMS)) { self.timedOut() }
        self.exchange = exchange
        handler.send(exchange.head)
    }

    private func timedOut() {
        guard let exchange, !exchange.answered else { return }
        answers.upstream?.pool.finish(exchange.attempt.connection, reusable: false)
        failed(.timedOut)
    }

    /// No answer came from the upstream: a reused connection is tried once more with a new one; otherwise siwa's
    /// 502 or 504 page, rendered by the gate as the handlers would.
    private func failed(_ failure: UpstreamForwarder.Failure) {
        guard var exchange, let context, answers.upstream != nil else { return }
        exchange.timeout?.cancel()
        exchange.timeout = nil
        let again = exchange.attempt.retries(after: failure)
        self.exchange = exchange
        if again { return connect(fresh: true) }
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        answers.failurePage(failure, for: exchange.request, on: context.eventLoop) { head, body in handler.value.answerFailure(head, body: body) }
    }

    private func answerFailure(_ head: HTTPResponse, body: ByteBuffer) {
        guard let context, exchange != nil else { return }
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(body)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        finish(reusable: false)
    }

    func upstream(read part: HTTPClientResponsePart) {
        guard var exchange, let context else { return }
        switch part {
        case .head(let head):
            // An interim answer (103) is not passed on; the final one follows on the same connection.
            if head.status.code < 200 { return }
            exchange.timeout?.cancel()
            exchange.timeout = nil
            exchange.answered = true
            exchange.keepAlive = head.isKeepAlive
            self.exchange = exchange
            var answer = head
            answer.version = .http1_1
            UpstreamForwarder.forClient(&answer.headers)
            answer.headers.replaceOrAdd(name: "Date", value: answers.dates.now)
            answer.headers.replaceOrAdd(name: "Server", value: FastPathAnswers.serverName)
            relay(.head(answer))
        case .body(let buffer):
            relay(.body(.byteBuffer(buffer)))
            // The client is slower than the upstream: stop reading the upstream until it catches up.
            if !context.channel.isWritable, let connection = exchange.attempt.connection {
                try? connection.channel.syncOptions?.setOption(.autoRead, value: false)
            }
        case .end:
            relay(.end(nil), flush: true)
            finish(reusable: exchange.keepAlive)
        }
    }

    func upstreamReadComplete() {
        context?.flush()
    }

    func upstream(failed error: (any Error)?) {
        guard let exchange else { return }
        if exchange.answered {
            // The answer broke off midway: the client cannot be told otherwise than by ending its connection.
            answers.logger.error("upstream connection ended before its answer did", metadata: ["error": "\(error.map { "\($0)" } ?? "closed")"])
            self.exchange?.attempt.connection = nil
            abandonExchange()
            context?.close(promise: nil)
            return
        }
        failed(.unreachable(error ?? UpstreamClosed()))
    }

    /// The exchange is over: its connection goes back to the pool (or is closed), and what waited is taken up.
    private func finish(reusable: Bool) {
        guard let exchange, let context else { return }
        exchange.timeout?.cancel()
        self.exchange = nil
        answers.upstream?.pool.finish(exchange.attempt.connection, reusable: reusable)
        if exchange.closeClient {
            context.close(promise: nil)
            return
        }
        raw?.codecAnswered()
        takeHeld()
    }

    /// Takes up, in order, what waited: a request only when neither an exchange nor an answer of the handlers is in
    /// progress, the parts of a request taken with it, an event when no exchange is.
    private func takeHeld() {
        guard let context else { return }
        if closingAfterAnswer {
            // The connection ends with the answer just written: nothing after it is answered.
            held.removeAll()
            return
        }
        var handedAny = false
        while exchange == nil, let next = held.first {
            if case .part(.head) = next, handedOn > 0 { break }
            held.removeFirst()
            switch next {
            case .part(let part):
                take(part, context: context)
                handedAny = true
            case .event(let event):
                context.fireUserInboundEventTriggered(event)
            case .error(let error):
                context.fireErrorCaught(error)
            }
        }
        // Hummingbird's channel takes what it was given at the end of a read.
        if handedAny { context.fireChannelReadComplete() }
        if exchange == nil, handedOn == 0 || held.count < Self.heldLimit, readHeld {
            readHeld = false
            context.read()
        }
    }

    /// Ends the exchange without an answer (the client left, or the answer broke off).
    private func abandonExchange() {
        guard let exchange else { return }
        exchange.timeout?.cancel()
        self.exchange = nil
        answers.upstream?.pool.finish(exchange.attempt.connection, reusable: false)
    }
}

/// The upstream closed the connection before answering.
struct UpstreamClosed: Error, CustomStringConvertible {
    var description: String { "the upstream closed the connection before answering" }
}
