import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import ServiceLifecycle
import Synchronization

/// siwa's HTTP/1 connections when it fronts an upstream: plain HTTP as Hummingbird serves it, and WebSocket upgrades
/// passed through. A connection whose first request asks for a WebSocket on a path that is the upstream's gets the
/// `UpstreamGate`'s verdict before anything reaches the upstream; when it may pass (and the upstream switches
/// protocols too), the client is answered `101` with the upstream's handshake headers and the two connections are
/// joined: from then on siwa relays bytes both ways, so frames, pings and close codes go end to end, as through
/// nginx. A refused upgrade is answered by the same responder as any request (401, 403, or 502 when the upstream
/// refused), never switched.
struct UpstreamWebSocketChannel: ServerChildChannel, HTTPChannelHandler {
    /// What became of a connection's first request.
    enum Outcome: Sendable {
        /// Plain HTTP; `refusedUpgrade` when the first request was a WebSocket upgrade that did not pass.
        case http(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, refusedUpgrade: Bool)
        /// Switched: the client's connection, to be joined with the upstream's.
        case relay(NIOAsyncChannel<ByteBuffer, ByteBuffer>)
    }

    struct Value: ServerChildChannelValue {
        let outcome: EventLoopFuture<Outcome>
        let opened: OpenedUpstream
        let channel: any Channel
    }

    let responder: HTTPChannelHandler.Responder
    let gate: UpstreamGate
    /// The paths siwa answers itself, where no upgrade is passed on.
    let owned: SiwaPaths

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            let opened = OpenedUpstream()
            let attempted = NIOLoopBoundBox(false, eventLoop: channel.eventLoop)
            let upgrader = ClientUpgrader(gate: gate, owned: owned, opened: opened, logger: logger) { attempted.value = true }
            let upgrade = NIOTypedHTTPServerUpgradeConfiguration<Outcome>(upgraders: [upgrader]) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(HTTP1ToHTTPServerCodec(secure: false))
                    try channel.pipeline.syncOperations.addHandler(HTTPConnectionStateHandler(idleTimeout: nil, logger: logger))
                    let http = try NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>(
                        wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true)
                    )
                    return .http(http, refusedUpgrade: attempted.value)
                }
            }
            var pipeline = NIOUpgradableHTTPServerPipelineConfiguration(upgradeConfiguration: upgrade)
            // As Hummingbird's own HTTP/1 channel: requests are taken one at a time by the async channel, errors and
            // header validation are Hummingbird's.
            pipeline.enablePipelining = false
            pipeline.enableErrorHandling = false
            pipeline.enableResponseHeaderValidation = false
            let outcome = try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(configuration: pipeline)
            return Value(outcome: outcome, opened: opened, channel: channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        let outcome: Outcome
        do {
            outcome = try await value.outcome.get()
        } catch {
            // The client left between siwa's 101 and the switch: the upstream's side is closed unused.
            try? await value.opened.take()?.connection.channel.close()
            logger.debug("WebSocket upgrade not completed", metadata: ["error": "\(error)"])
            return
        }
        switch outcome {
        case .http(let http, let refusedUpgrade):
            await UpstreamWebSocketChannel(responder: Self.answering(responder, refusedUpgrade: refusedUpgrade), gate: gate, owned: owned)
                .handleHTTP(asyncChannel: http, logger: logger)
        case .relay(let client):
            guard let upstream = value.opened.take() else {
                try? await client.channel.close()
                return
            }
            await Self.relay(client, upstream.connection, logger: logger)
        }
    }

    /// The HTTP side of an upgradable connection. A refused WebSocket upgrade (the first request) is answered by
    /// `responder` (401, 403, 502) like any request; a later request on a kept-alive connection that asks for a
    /// WebSocket is sent back to the same URL on a new connection (`307`, `Connection: close`, as
    /// hummingbird-websocket does), since only a connection's first request can switch protocols.
    static func answering(_ responder: @escaping HTTPChannelHandler.Responder, refusedUpgrade: Bool) -> HTTPChannelHandler.Responder {
        let first = FirstRequest(refusedUpgrade)
        return { (request: Request, writer: consuming ResponseWriter, channel: any Channel) in
            if !first.take(), request.isWebSocketUpgrade {
                let target = request.uri.path + (request.uri.query.map { "?" + $0 } ?? "")
                try await writer.writeResponse(HTTPResponse(status: .temporaryRedirect, headerFields: [.connection: "close", .location: target, .contentLength: "0"]))
                throw ConnectionEnds()
            }
            try await responder(request, writer, channel)
        }
    }

    /// Joins the client's and the upstream's connections until both directions have ended. Either side's end of
    /// input is passed on as an end of output; siwa's graceful shutdown closes both.
    static func relay(_ client: NIOAsyncChannel<ByteBuffer, ByteBuffer>, _ upstream: NIOAsyncChannel<ByteBuffer, ByteBuffer>, logger: Logger) async {
        do {
            try await withGracefulShutdownHandler {
                try await client.executeThenClose { fromClient, toClient in
                    try await upstream.executeThenClose { fromUpstream, toUpstream in
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            group.addTask {
                                for try await bytes in fromClient { try await toUpstream.write(bytes) }
                                toUpstream.finish()
                            }
                            group.addTask {
                                for try await bytes in fromUpstream { try await toClient.write(bytes) }
                                toClient.finish()
                            }
                            try await group.waitForAll()
                        }
                    }
                }
            } onGracefulShutdown: {
                client.channel.close(promise: nil)
                upstream.channel.close(promise: nil)
            }
        } catch {
            logger.debug("WebSocket relay ended", metadata: ["error": "\(error)"])
        }
        upstream.channel.close(promise: nil)
        client.channel.close(promise: nil)
    }
}

/// The upstream's side of a connection's WebSocket, handed from the upgrader (which opens it before answering the
/// client) to the channel's handler (which relays once the client's side has switched).
final class OpenedUpstream: Sendable {
    private let value = Mutex<UpstreamWebSocket?>(nil)

    func store(_ upstream: UpstreamWebSocket) {
        value.withLock { $0 = upstream }
    }

    /// The upstream's side, once: whoever takes it closes it.
    func take() -> UpstreamWebSocket? {
        value.withLock { value in
            defer { value = nil }
            return value
        }
    }
}

/// NIO's server side of the upgrade: asks the gate, which opens the upstream's side when the request may pass; the
/// client's `101` then carries the upstream's handshake headers. Refusing fails the future, and NIO hands the
/// request to the HTTP responder instead.
private struct ClientUpgrader: NIOTypedHTTPServerProtocolUpgrader {
    typealias UpgradeResult = UpstreamWebSocketChannel.Outcome
    let gate: UpstreamGate
    let owned: SiwaPaths
    let opened: OpenedUpstream
    let logger: Logger
    let attempted: @Sendable () -> Void

    let supportedProtocol = "websocket"
    let requiredUpgradeHeaders: [String] = []

    func buildUpgradeResponse(channel: any Channel, upgradeRequest: HTTPRequestHead, initialResponseHeaders: HTTPHeaders) -> EventLoopFuture<HTTPHeaders> {
        attempted()
        let promise = channel.eventLoop.makePromise(of: HTTPHeaders.self)
        promise.completeWithTask {
            let head = try HTTPRequest(upgradeRequest, secure: false, splitCookie: false)
            guard !owned.contains(head.path.map { String($0.prefix { $0 != "?" }) } ?? "/") else { throw NotPassed() }
            let request = Request(head: head, body: RequestBody(buffer: ByteBuffer()))
            let context = ServerContext(source: ApplicationRequestContextSource(channel: channel, logger: logger))
            guard let upstream = await gate.openWebSocket(request, context: context) else { throw NotPassed() }
            opened.store(upstream)
            var headers = initialResponseHeaders
            upstream.addHandshakeHeaders(to: &headers)
            return headers
        }
        return promise.futureResult
    }

    func upgrade(channel: any Channel, upgradeRequest: HTTPRequestHead) -> EventLoopFuture<UpstreamWebSocketChannel.Outcome> {
        channel.eventLoop.makeCompletedFuture {
            .relay(try NIOAsyncChannel(wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true)))
        }
    }

    /// This upgrade is not passed on; the HTTP responder answers the request.
    struct NotPassed: Error {}
}

/// Which request of a connection's HTTP side is its first: taken once.
private final class FirstRequest: Sendable {
    private let pending: Mutex<Bool>

    init(_ pending: Bool) {
        self.pending = Mutex(pending)
    }

    func take() -> Bool {
        pending.withLock { pending in
            defer { pending = false }
            return pending
        }
    }
}

/// Ends a connection once the `307` is written.
private struct ConnectionEnds: Error {}

extension Request {
    /// Whether this is a WebSocket opening handshake (`Upgrade: websocket` and `Connection: upgrade`).
    var isWebSocketUpgrade: Bool {
        headers[values: .upgrade].contains { $0.lowercased().contains("websocket") }
            && UpstreamForwarder.connectionNamed(headers[values: .connection]).contains("upgrade")
    }
}
