import DoorHTTP
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// The upstream's side of a WebSocket passed through: its connection, already switched to the WebSocket protocol,
/// and its `101` answer.
struct UpstreamWebSocket: Sendable {
    /// The connection to the upstream, carrying WebSocket frames as bytes from here on.
    let connection: NIOAsyncChannel<ByteBuffer, ByteBuffer>
    /// The upstream's `101 Switching Protocols` head.
    let answer: HTTPResponseHead
    /// Its place at the upstream (`upstream_max_connections`), freed when the relay has ended and this is let go.
    let place: UpstreamAdmission.Pass

    /// Adds to `headers` (the client's `101`) what of the upstream's `101` the client must see:
    /// `Sec-WebSocket-Accept`, the subprotocol and extensions it chose, and any other end-to-end header, as any
    /// answer of the upstream is passed on (`AnswerFilter`: never the hop-by-hop ones, which NIO writes
    /// itself, nor a `Set-Cookie` of siwa's cookies).
    func addHandshakeHeaders(to headers: inout HTTPHeaders) {
        var filter = AnswerFilter(connection: answer.headers["connection"], switching: true)
        for (name, value) in answer.headers where filter.keeps(name.lowercased(), value: { value }) { headers.add(name: name, value: value) }
        filter.finish(to: &headers)
    }
}

extension UpstreamForwarder {
    /// Opens the upstream's side of the WebSocket that `request` (the client's upgrade request) asks for: the same
    /// handshake, its headers cleaned as for any proxied request and `identity` added. Succeeds only when the upstream
    /// switches protocols within `upstream_timeout_ms`.
    func openWebSocket(_ request: Request, target: RequestTarget, context: ServerContext, identity: [HTTPField]) async throws(Failure) -> UpstreamWebSocket {
        guard let place = await admission.pass(waitingAtMost: .milliseconds(Int64(settings.timeoutMS))) else { throw .busy }
        let headers = upstreamHeaders(request, context: context, identity: identity)
        let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: settings.requestTarget(target.forwarded), headers: headers)
        let timeout = TimeAmount.milliseconds(Int64(settings.timeoutMS))
        let tls: NIOSSLContext?
        if settings.usesTLS {
            guard let webSocketTLS else { throw .unreachable(UpstreamWebSocketRefused(reason: "no TLS context for an https upstream")) }
            tls = webSocketTLS
        } else {
            tls = nil
        }
        let host = settings.host
        let handshake: UpstreamHandshake
        do {
            // The same connect timeout as the HTTP client's; then upstream_timeout_ms for the 101.
            let switched = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(UpstreamClient.connectTimeout(settings))
                .connect(host: settings.host, port: settings.port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        if let tls {
                            try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: tls, serverHostname: host.contains(":") ? nil : host))
                        }
                        let upgrade = NIOTypedHTTPClientUpgradeConfiguration<UpstreamHandshake>(
                            upgradeRequestHead: head, upgraders: [UpstreamWebSocketUpgrader()],
                            notUpgradingCompletionHandler: { channel in
                                // The answer is read whole (NIO hands it on once this returns), then the connection ends.
                                channel.eventLoop.makeCompletedFuture {
                                    let reader = DeclinedUpgradeReader(promise: channel.eventLoop.makePromise(), timeout: timeout)
                                    try channel.pipeline.syncOperations.addHandler(reader)
                                    return .declined(reader.answer)
                                }
                            }
                        )
                        var pipeline = NIOUpgradableHTTPClientPipelineConfiguration(upgradeConfiguration: upgrade)
                        pipeline.leftOverBytesStrategy = .forwardBytes
                        let switched = try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(configuration: pipeline)
                        // No 101 in time: closing the connection fails the handshake.
                        let deadline = channel.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
                        switched.whenComplete { _ in deadline.cancel() }
                        return switched
                    }
                }
            handshake = try await switched.get()
        } catch {
            throw .unreachable(error)
        }
        switch handshake {
        case .upgraded(let connection, let answer):
            return UpstreamWebSocket(connection: connection, answer: answer, place: place)
        case .declined(let answer):
            let declined: DeclinedUpgrade
            do {
                declined = try await answer.get()
            } catch {
                throw .unreachable(UpstreamWebSocketRefused(reason: "the upstream answered the WebSocket upgrade without switching protocols, and its answer broke off: \(error)"))
            }
            throw .declined(declined)
        }
    }
}

/// Why the upstream's WebSocket did not open, for the log.
struct UpstreamWebSocketRefused: Error, CustomStringConvertible {
    let reason: String
    var description: String { reason }
}

/// How the upstream answered the WebSocket handshake.
enum UpstreamHandshake: Sendable {
    /// `101`: the connection now carries the WebSocket.
    case upgraded(NIOAsyncChannel<ByteBuffer, ByteBuffer>, HTTPResponseHead)
    /// Anything else: the upstream's answer, once read whole.
    case declined(EventLoopFuture<DeclinedUpgrade>)
}

/// The upstream's answer to a WebSocket upgrade it did not switch for, read whole (at most `limit` bytes of body).
struct DeclinedUpgrade: Sendable {
    let head: HTTPResponseHead
    let body: ByteBuffer
    /// The largest body read; a longer one ends the exchange (a 502).
    static let limit = 1 << 20

    /// As the client gets it: the status, the fields through the one answer filter, the body.
    var response: Response {
        var fields = UpstreamForwarder.responseHeaders(head.headers)
        fields[.contentLength] = String(body.readableBytes)
        return Response(status: HTTPResponse.Status(code: Int(head.status.code)), headers: fields, body: ResponseBody(byteBuffer: body))
    }
}

/// Reads the answer NIO's upgrade handler hands on when the upstream did not switch protocols, within `timeout`.
final class DeclinedUpgradeReader: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart

    private let promise: EventLoopPromise<DeclinedUpgrade>
    private let timeout: TimeAmount
    private var head: HTTPResponseHead?
    private var body = ByteBuffer()
    private var timer: Scheduled<Void>?
    private var done = false
    var answer: EventLoopFuture<DeclinedUpgrade> { promise.futureResult }

    init(promise: EventLoopPromise<DeclinedUpgrade>, timeout: TimeAmount) {
        self.promise = promise
        self.timeout = timeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let channel = context.channel
        timer = context.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let received):
            // A 1xx before the answer is no answer (the status rule every carrier follows).
            if AnswerFilter.rule(status: Int(received.status.code), method: "GET", askedToSwitch: true) != .interim { head = received }
        case .body(var part):
            guard body.readableBytes + part.readableBytes <= DeclinedUpgrade.limit else {
                return finish(.failure(UpstreamWebSocketRefused(reason: "the upstream's answer to the upgrade is larger than \(DeclinedUpgrade.limit) bytes")), context: context)
            }
            body.writeBuffer(&part)
        case .end:
            guard let head else { return }
            finish(.success(DeclinedUpgrade(head: head, body: body)), context: context)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        finish(.failure(UpstreamWebSocketRefused(reason: "the upstream closed the connection before its answer ended")), context: context)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        finish(.failure(error), context: context)
    }

    private func finish(_ result: Result<DeclinedUpgrade, any Error>, context: ChannelHandlerContext) {
        guard !done else { return }
        done = true
        timer?.cancel()
        timer = nil
        promise.completeWith(result)
        context.close(promise: nil)
    }
}

/// NIO's client side of the upgrade for a handshake whose headers are the client's own (its key, version,
/// subprotocols and extensions): any `101` to `websocket` is taken, since the client checks the upstream's
/// `Sec-WebSocket-Accept` against its own key, and the connection is handed on as bytes.
private struct UpstreamWebSocketUpgrader: NIOTypedHTTPClientProtocolUpgrader {
    typealias UpgradeResult = UpstreamHandshake
    let supportedProtocol = "websocket"
    let requiredUpgradeHeaders: [String] = []

    func addCustom(upgradeRequestHeaders: inout HTTPHeaders) {}

    func shouldAllowUpgrade(upgradeResponse: HTTPResponseHead) -> Bool {
        true
    }

    func upgrade(channel: any Channel, upgradeResponse: HTTPResponseHead) -> EventLoopFuture<UpstreamHandshake> {
        channel.eventLoop.makeCompletedFuture {
            .upgraded(try NIOAsyncChannel(wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true)), upgradeResponse)
        }
    }
}
