import DoorHTTP
import NIOCore
import NIOHTTP1

/// Ends the connection after the answer to a request that does not keep it, and says so in that answer, as RFC 9112
/// §9.3 and §9.6 ask: an HTTP/1.0 request without keep-alive, or one whose `Connection` lists `close` in any case,
/// gets `Connection: close` and the connection ends after it; an HTTP/1.0 request that asked to keep it gets
/// `Connection: keep-alive`. Before, Hummingbird ended the connection only for a `Connection` of exactly `close`,
/// without saying so in the answer, and kept an HTTP/1.0 one open: a proxy keeping its connections to siwa alive
/// (nginx with `keepalive` in its upstream and HTTP/1.0, its default) took such an answer as a kept connection, sent
/// its next request on it and found it closed, a 502 for a `POST`, which nginx does not send again. The same holds
/// for an answer written while the server shuts down (the connection ends after it) and for one with no request
/// before it here (a refused WebSocket upgrade, whose request NIO's upgrader kept). The connection ends gracefully:
/// siwa's side is shut once the answer is out, so a request body not yet read cannot turn into a reset that loses
/// the answer, and the connection is closed when the client closes its side, or after `lingerLimit`. Sits between
/// NIO's HTTP/1 codec and the conversion to HTTP types, which drops the request's version.
final class SaysConnectionOutcome: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// The requests read and not yet answered, in order: whether each keeps the connection, and is HTTP/1.0.
    private var unanswered = CircularBuffer<(keepAlive: Bool, http10: Bool)>(initialCapacity: 2)
    /// The answer being written is to a request that does not keep the connection: it ends after the answer.
    private var closeAfterAnswer = false
    /// The server is shutting down: the connection ends after the answer in progress.
    private var quiescing = false
    /// How long a client may keep its side open once siwa has shut its own after a closing answer.
    static let lingerLimit = TimeAmount.seconds(5)

    /// Ends the connection after the answer `written` is out, the one way every carrier ends one: siwa's side is
    /// shut then, so a request body or a next request not yet read cannot turn into a reset that loses the answer,
    /// and the connection is closed when the client closes its side, or after `lingerLimit`.
    static func end(_ context: ChannelHandlerContext, after written: EventLoopFuture<Void>) {
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        written.whenComplete { _ in
            let context = bound.value
            context.close(mode: .output, promise: nil)
            let channel = context.channel
            context.eventLoop.scheduleTask(in: lingerLimit) { channel.close(promise: nil) }
        }
    }
    /// The byte path ahead of the codecs, told when an answer of theirs has ended so that it takes the next request.
    private weak var raw: RawFrontPath?
    /// The client's time limits, told when an answer has ended and, `countsHeads`, when a head has been read (with
    /// `--upstream`, `DoorRequestHeads` reads them first, ahead of NIO's upgrade handler).
    private weak var timer: ClientTimer?
    private let countsHeads: Bool

    init(countsHeads: Bool) {
        self.countsHeads = countsHeads
    }

    func handlerAdded(context: ChannelHandlerContext) {
        raw = try? context.pipeline.syncOperations.handler(type: RawFrontPath.self)
        timer = try? context.pipeline.syncOperations.handler(type: ClientTimer.self)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent { quiescing = true }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            unanswered.append((head.isKeepAlive, head.version == .http1_0))
            if countsHeads { timer?.headRead() }
        case .end:
            if countsHeads { timer?.requestRead() }
        case .body:
            break
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        // An interim answer (100, 101) is not the request's answer; the final one follows.
        case .head(var head) where head.status.code >= 200:
            // No request before it here: an answer NIO's upgrader took the request of, after which the connection ends.
            let request = unanswered.popFirst() ?? (keepAlive: false, http10: false)
            let said = head.headers["connection"]
            let saysClose = RawHTTP.listsClose(said)
            if !request.keepAlive || quiescing || saysClose {
                closeAfterAnswer = true
                if !saysClose { head.headers.add(name: "Connection", value: "close") }
            } else if request.http10, said.isEmpty {
                head.headers.add(name: "Connection", value: "keep-alive")
            }
            context.write(wrapOutboundOut(.head(head)), promise: promise)
            return
        case .end where closeAfterAnswer:
            closeAfterAnswer = false
            let written = context.writeAndFlush(data)
            Self.end(context, after: written)
            if let promise { written.cascade(to: promise) }
            return
        case .end:
            context.write(data, promise: promise)
            timer?.answerEnded()
            raw?.codecAnswered()
            return
        default:
            break
        }
        context.write(data, promise: promise)
    }
}
