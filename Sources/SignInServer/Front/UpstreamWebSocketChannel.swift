import DoorHTTP
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
/// refused), never switched, and the connection ends there.
struct UpstreamWebSocketChannel: ServerChildChannel, HTTPChannelHandler {
    /// What became of a connection's first request.
    enum Outcome: Sendable {
        /// Plain HTTP (after a refused upgrade too).
        case http(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
        /// Switched: the client's connection, to be joined with the upstream's.
        case relay(NIOAsyncChannel<ByteBuffer, ByteBuffer>)
    }

    struct Value: ServerChildChannelValue {
        let outcome: EventLoopFuture<Outcome>
        let handoff: UpgradeHandoff
        let channel: any Channel
    }

    let responder: HTTPChannelHandler.Responder
    let gate: UpstreamGate
    /// The paths siwa answers itself, where no upgrade is passed on.
    let owned: SiwaPaths
    /// The requests answered on the event loop (`RawFrontPath`).
    let fastPath: BytePathAnswers
    /// The limits on a client's time (`ClientTimer`).
    let limits: ClientLimits
    let metrics: ServerMetrics

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            // Ahead of NIO's HTTP codecs: the client's time limits, then the requests passed to the upstream from
            // memory, as bytes (`RawFrontPath`).
            try channel.pipeline.syncOperations.addHandler(ClientTimer(limits: limits, metrics: metrics))
            try channel.pipeline.syncOperations.addHandler(RawFrontPath(answers: fastPath))
            return try configureUpgrades(channel: channel, logger: logger)
        }
    }

    /// NIO's HTTP/1 codecs with the WebSocket upgrade, at the end of `channel`'s pipeline: on a connection, after the
    /// byte path; on an HTTP/2 stream that opens a WebSocket (RFC 8441), after the stream's bridge, which carries it
    /// as this same handshake (`ClientHTTP2`).
    func configureUpgrades(channel: any Channel, logger: Logger) throws -> Value {
        let handoff = UpgradeHandoff()
        let upgrader = ClientUpgrader(gate: gate, owned: owned, handoff: handoff, logger: logger)
        let upgrade = NIOTypedHTTPServerUpgradeConfiguration<Outcome>(upgraders: [upgrader]) { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(SaysConnectionOutcome(countsHeads: false))
                try channel.pipeline.syncOperations.addHandler(HTTP1ToHTTPServerCodec(secure: false))
                try channel.pipeline.syncOperations.addHandler(HTTPConnectionStateHandler(idleTimeout: nil, logger: logger))
                let http = try NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>(
                    wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true)
                )
                return .http(http)
            }
        }
        var pipeline = NIOUpgradableHTTPServerPipelineConfiguration(upgradeConfiguration: upgrade)
        // As Hummingbird's own HTTP/1 channel: requests are taken one at a time by the async channel, header
        // validation is Hummingbird's.
        pipeline.enablePipelining = false
        // NIO's handler answers a request it cannot parse with 400 and ends the connection; without it, a first
        // request NIO could not read (an unknown method, say) was never answered, the connection left open.
        pipeline.enableErrorHandling = true
        pipeline.enableResponseHeaderValidation = false
        let outcome = try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(configuration: pipeline)
        let decoder = try channel.pipeline.syncOperations.context(handlerType: ByteToMessageHandler<HTTPRequestDecoder>.self)
        try channel.pipeline.syncOperations.addHandler(DoorRequestHeads(), position: .after(decoder.handler))
        try channel.pipeline.syncOperations.addHandler(ClosesOnParserError())
        return Value(outcome: outcome, handoff: handoff, channel: channel)
    }

    func handle(value: Value, logger: Logger) async {
        let outcome: Outcome
        do {
            outcome = try await value.outcome.get()
        } catch {
            // The client left before the switch (between siwa's 101 and it, or while the upstream was being opened:
            // an HTTP/2 stream reset): the upstream's side is closed unused, now or as soon as it opens.
            try? await value.handoff.abandon()?.connection.channel.close()
            logger.debug("WebSocket upgrade not completed", metadata: ["error": "\(error)"])
            try? await value.channel.close()
            return
        }
        switch outcome {
        case .http(let http):
            if let refused = value.handoff.attempt {
                await answer(refused, failure: value.handoff.failure, on: http, logger: logger)
            } else {
                await UpstreamWebSocketChannel(responder: Self.redirectingUpgrades(responder), gate: gate, owned: owned, fastPath: fastPath, limits: limits, metrics: metrics)
                    .handleHTTP(asyncChannel: http, logger: logger)
            }
        case .relay(let client):
            guard let upstream = value.handoff.takeUpstream() else {
                try? await client.channel.close()
                return
            }
            await Self.relay(client, upstream.connection, idleLimit: .milliseconds(gate.forwarder.settings.idleTimeoutMS), logger: logger)
            // Its place at the upstream is held until the relay has ended.
            withExtendedLifetime(upstream) {}
        }
    }

    /// Answers a refused upgrade request (`request`, nil when it could not be read) with the responder (401, 403,
    /// 502, or siwa's own answer on its own paths), then ends the connection. NIO consumed the request while it
    /// tried the upgrade, so it is answered from what the upgrader kept of it, with no body.
    private func answer(
        _ request: HTTPRequest?, failure: UpstreamForwarder.Failure?, on http: NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, logger: Logger
    ) async {
        do {
            try await http.executeThenClose { _, outbound in
                guard let request else { return }
                // The responder answers it; when the upstream did not switch, with that failure's page (`UpstreamGate.forward`).
                try await UpstreamGate.$switchFailure.withValue(failure) {
                    try await responder(Request(head: request, body: RequestBody(buffer: ByteBuffer())), ResponseWriter(outbound: outbound), http.channel)
                }
            }
        } catch {
            logger.debug("refused WebSocket upgrade not answered", metadata: ["error": "\(error)"])
        }
    }

    /// The HTTP side of a connection whose first request was no upgrade: a later request that asks for a WebSocket
    /// is sent back to the same URL on a new connection (`307`, `Connection: close`, as hummingbird-websocket does),
    /// since only a connection's first request can switch protocols.
    static func redirectingUpgrades(_ responder: @escaping HTTPChannelHandler.Responder) -> HTTPChannelHandler.Responder {
        { (request: Request, writer: consuming ResponseWriter, channel: any Channel) in
            if request.isWebSocketUpgrade {
                // A path that begins with two slashes would read as another host's (`//evil.example/x`, a
                // network-path reference): one slash, so the client comes back to this site.
                let path = request.uri.path.hasPrefix("//") ? "/" + request.uri.path.drop { $0 == "/" } : request.uri.path
                let target = path + (request.uri.query.map { "?" + $0 } ?? "")
                try await writer.writeResponse(HTTPResponse(status: .temporaryRedirect, headerFields: [.connection: "close", .location: target, .contentLength: "0"]))
                throw ConnectionEnds()
            }
            try await responder(request, writer, channel)
        }
    }

    /// Joins the client's and the upstream's connections until both directions have ended. Either side's end of
    /// input is passed on as an end of output; siwa's graceful shutdown closes both, and so does `idleLimit`
    /// (`upstream_idle_timeout_ms`) without a byte either way.
    static func relay(
        _ client: NIOAsyncChannel<ByteBuffer, ByteBuffer>, _ upstream: NIOAsyncChannel<ByteBuffer, ByteBuffer>, idleLimit: Duration, logger: Logger
    ) async {
        let lastByte = LastActivity()
        do {
            try await withGracefulShutdownHandler {
                try await client.executeThenClose { fromClient, toClient in
                    try await upstream.executeThenClose { fromUpstream, toUpstream in
                        try await withThrowingTaskGroup(of: Bool.self) { group in
                            group.addTask {
                                for try await bytes in fromClient {
                                    lastByte.touch()
                                    try await toUpstream.write(bytes)
                                }
                                toUpstream.finish()
                                return true
                            }
                            group.addTask {
                                for try await bytes in fromUpstream {
                                    lastByte.touch()
                                    try await toClient.write(bytes)
                                }
                                toClient.finish()
                                return true
                            }
                            group.addTask {
                                // Wakes when the limit would be reached since the last byte, and ends both sides then.
                                while true {
                                    try await Task.sleep(until: lastByte.instant + idleLimit, clock: .continuous)
                                    if ContinuousClock.now - lastByte.instant >= idleLimit { break }
                                }
                                logger.info("WebSocket silent for upstream_idle_timeout_ms: ended", metadata: ["idle_ms": "\(idleLimit)"])
                                client.channel.close(promise: nil)
                                upstream.channel.close(promise: nil)
                                return false
                            }
                            var relaying = 2
                            for try await isRelay in group where isRelay {
                                relaying -= 1
                                if relaying == 0 { break }
                            }
                            group.cancelAll()
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

/// When a relay last moved a byte, either way.
final class LastActivity: Sendable {
    private let last = Mutex(ContinuousClock.now)
    var instant: ContinuousClock.Instant { last.withLock { $0 } }
    func touch() { last.withLock { $0 = .now } }
}

/// What the upgrader learnt of a connection's first request, for the channel's handler: the request when it asked
/// for a WebSocket (to answer it when refused), and the upstream's side once opened (to relay when switched).
final class UpgradeHandoff: Sendable {
    private struct State {
        var attempted = false
        var request: HTTPRequest?
        var upstream: UpstreamWebSocket?
        var failure: UpstreamForwarder.Failure?
        /// The client's side went away before the switch: an upstream opened after that is closed at once.
        var abandoned = false
    }

    private let state = Mutex(State())

    func attempted(_ request: HTTPRequest?) {
        state.withLock { state in
            state.attempted = true
            state.request = request
        }
    }

    func opened(_ upstream: UpstreamWebSocket) {
        let kept = state.withLock { state in
            guard !state.abandoned else { return false }
            state.upstream = upstream
            return true
        }
        if !kept { upstream.connection.channel.close(promise: nil) }
    }

    /// The client's side is gone before the switch: the upstream's side, if it opened already (whoever takes it closes
    /// it); one that opens later is closed by `opened`.
    func abandon() -> UpstreamWebSocket? {
        state.withLock { state in
            state.abandoned = true
            defer { state.upstream = nil }
            return state.upstream
        }
    }

    /// The upstream did not switch protocols: why.
    func failed(_ failure: UpstreamForwarder.Failure) {
        state.withLock { $0.failure = failure }
    }

    var failure: UpstreamForwarder.Failure? {
        state.withLock { $0.failure }
    }

    /// The upgrade request, when the first request was one: `.some(nil)` when it could not be read.
    var attempt: HTTPRequest?? {
        state.withLock { $0.attempted ? .some($0.request) : .none }
    }

    /// The upstream's side, once: whoever takes it closes it.
    func takeUpstream() -> UpstreamWebSocket? {
        state.withLock { state in
            defer { state.upstream = nil }
            return state.upstream
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
    let handoff: UpgradeHandoff
    let logger: Logger

    let supportedProtocol = "websocket"
    let requiredUpgradeHeaders: [String] = []

    func buildUpgradeResponse(channel: any Channel, upgradeRequest: HTTPRequestHead, initialResponseHeaders: HTTPHeaders) -> EventLoopFuture<HTTPHeaders> {
        let head = try? HTTPRequest(upgradeRequest, secure: false, splitCookie: false)
        handoff.attempted(head)
        let promise = channel.eventLoop.makePromise(of: HTTPHeaders.self)
        promise.completeWithTask {
            guard let head else { throw NotPassed() }
            // Decided on the target the front reads, as every request is; a refused one is answered by the responder.
            guard case .upstream(let target) = owned.route(head.path ?? "", host: head.authority), !head.headerFields.carriesHost else {
                throw NotPassed()
            }
            let request = Request(head: head, body: RequestBody(buffer: ByteBuffer()))
            let context = ServerContext(source: ApplicationRequestContextSource(channel: channel, logger: logger))
            // The connection may carry WebSocket frames from here, not HTTP parts: the door's reader of heads leaves
            // now, before NIO's decoder does and hands it the bytes that follow (a refused upgrade is answered, and
            // the connection then ends, without it).
            try await channel.pipeline.handler(type: DoorRequestHeads.self).flatMap { channel.pipeline.removeHandler($0) }.get()
            let upstream: UpstreamWebSocket
            switch await gate.openWebSocket(request, target: target, context: context) {
            case nil: throw NotPassed()
            case .failure(let failure)?:
                handoff.failed(failure)
                throw NotPassed()
            case .success(let opened)?: upstream = opened
            }
            handoff.opened(upstream)
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

/// Ends a connection once the `307` is written.
private struct ConnectionEnds: Error {}

extension Request {
    /// Whether this is a WebSocket opening handshake (`Upgrade: websocket` and `Connection: upgrade`).
    var isWebSocketUpgrade: Bool {
        headers[values: .upgrade].contains { $0.lowercased().contains("websocket") }
            && AnswerFilter.connectionNamed(headers[values: .connection]).contains("upgrade")
    }
}

/// What the door reads of each request head as NIO's parser made it, before NIO's upgrade handler and the
/// conversion to HTTP types see it:
/// - An absolute-form target is reduced to origin-form here when its authority is the `Host`, and marked refused
///   otherwise (`!` before it, which no form of target starts with): the conversion to HTTP types reduces any
///   absolute-form URL it can parse to its path and forgets the authority, so `RequestTarget` could no longer tell
///   `http://evil.example/x` from `/x`.
/// - An `Upgrade` siwa does not pass (anything but `websocket`: `h2c`, as `curl --http2` asks) is taken off, with
///   `HTTP2-Settings` and their names in `Connection`: the request is answered in HTTP/1.1 as if it had asked for
///   nothing. NIO's upgrade handler, asked for a protocol it has no upgrader for, lost the request's head, and the
///   connection ended without an answer.
final class DoorRequestHeads: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    /// Told of each head read: from here on its time is the request's, not the client's (`ClientTimer`).
    private weak var timer: ClientTimer?

    func handlerAdded(context: ChannelHandlerContext) {
        timer = try? context.pipeline.syncOperations.handler(type: ClientTimer.self)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(var head) = unwrapInboundIn(data) else {
            if case .end = unwrapInboundIn(data) { timer?.requestRead() }
            context.fireChannelRead(data)
            return
        }
        timer?.headRead()
        Self.reduceAbsoluteForm(&head)
        guard head.headers.contains(name: "upgrade") else {
            context.fireChannelRead(wrapInboundOut(.head(head)))
            return
        }
        let asksForWebSocket = head.headers["upgrade"].contains { value in
            value.split(separator: ",").contains { RawHTTP.equalsIgnoringCase($0.trimmingBlanks.prefix { $0 != "/" }, "websocket") }
        }
        if !asksForWebSocket {
            head.headers.remove(name: "upgrade")
            head.headers.remove(name: "http2-settings")
            let connection = head.headers["connection"].flatMap { $0.split(separator: ",").map(\.trimmingBlanks) }.filter {
                !$0.isEmpty && !RawHTTP.equalsIgnoringCase($0, "upgrade") && !RawHTTP.equalsIgnoringCase($0, "http2-settings")
            }
            head.headers.remove(name: "connection")
            if !connection.isEmpty { head.headers.add(name: "Connection", value: connection.joined(separator: ", ")) }
        }
        context.fireChannelRead(wrapInboundOut(.head(head)))
    }

    /// An absolute-form target as origin-form when it names the `Host`, else marked refused (`RequestTarget.originForm`).
    static func reduceAbsoluteForm(_ head: inout HTTPRequestHead) {
        guard let first = head.uri.utf8.first, first != UInt8(ascii: "/"), head.uri != "*" else { return }
        head.uri = RequestTarget.originForm(of: head.uri, host: head.headers["host"].first) ?? "!" + head.uri
    }
}

/// Ends a connection whose request NIO could not parse, once NIO's error handler has answered it 400 with
/// `Connection: close` (NIO leaves the closing to the pipeline; before the first request is read, nothing else would).
private final class ClosesOnParserError: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is HTTPParserError {
            context.close(promise: nil)
        }
        context.fireErrorCaught(error)
    }
}
