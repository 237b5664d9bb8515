import DoorHTTP
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP2
import NIOHTTPTypes
import NIOHTTPTypesHTTP2
import NIOSSL
import NIOTLS

/// A connection to the HTTPS port (issue 36): the ClientHello is read first (`HelloReader`), which decides the
/// certificate (by SNI, or the TLS-ALPN-01 challenge's); then TLS, and by ALPN either HTTP/2 (`ClientHTTP2`) or the
/// same HTTP/1.1 channel siwa serves plain HTTP with (`http1`: the byte path, then Hummingbird's codecs), so that both
/// versions reach the one door (`FrontDoor`) with the same requests.
struct EdgeChannel<HTTP1: ServerChildChannel>: ServerChildChannel {
    let http1: HTTP1
    let http2: ClientHTTP2
    let certificates: EdgeCertificates
    /// How long a client has to send its hello and finish the handshake.
    let handshakeTimeout: TimeAmount
    let metrics: ServerMetrics
    /// The key authorization of a TLS-ALPN-01 challenge another instance answers (from the store).
    let challengeLookup: @Sendable (String) async -> String?

    enum Negotiated: Sendable {
        case http1(HTTP1.Value)
        case http2(ClientHTTP2.Value)
        /// A TLS-ALPN-01 validation: the handshake was all it needed.
        case validation
    }

    struct Value: ServerChildChannelValue {
        let negotiated: EventLoopFuture<Negotiated>
        let channel: any Channel
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let promise = channel.eventLoop.makePromise(of: Negotiated.self)
        let http1 = http1
        let http2 = http2
        let metrics = metrics
        return channel.eventLoop.makeCompletedFuture {
            let reader = HelloReader(
                certificates: certificates, metrics: metrics, logger: logger, timeout: handshakeTimeout, challengeLookup: challengeLookup
            ) { context, channel in
                // The handshake, then the protocol ALPN chose.
                let negotiation = NIOTypedApplicationProtocolNegotiationHandler<Negotiated> { result, channel in
                    switch result {
                    case .negotiated("h2"):
                        metrics.edgeConnections.h2.increment()
                        return http2.setup(channel: channel, logger: logger).map { .http2($0) }
                    case .negotiated(EdgeTLS.acmeProtocol):
                        metrics.edgeConnections.validation.increment()
                        return channel.close().map { .validation }
                    case .negotiated("http/1.1"), .fallback:
                        metrics.edgeConnections.http1.increment()
                        return http1.setup(channel: channel, logger: logger).map { .http1($0) }
                    case .negotiated:
                        return channel.close().flatMapThrowing { throw EdgeError(description: "an ALPN protocol siwa did not offer") }
                    }
                }
                let tls = NIOSSLServerHandler(context: context)
                try channel.pipeline.syncOperations.addHandler(tls)
                try channel.pipeline.syncOperations.addHandler(negotiation)
                negotiation.protocolNegotiationResult.cascade(to: promise)
            } failed: { error in
                promise.fail(error)
            }
            try channel.pipeline.syncOperations.addHandler(reader)
            // A shutdown that begins before the protocol's handlers are in place is said to them once they are.
            try SetupShutdownMemory.install(on: channel, grace: handshakeTimeout, until: promise.futureResult)
            // The hello and the whole handshake within the timeout: a client that sends its hello and stops holds
            // nothing longer (the HTTP time limits start once a protocol is chosen).
            let deadline = channel.eventLoop.scheduleTask(in: handshakeTimeout) { channel.close(promise: nil) }
            promise.futureResult.whenComplete { _ in deadline.cancel() }
            return Value(negotiated: promise.futureResult, channel: channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.negotiated.get() {
            case .http1(let inner): await http1.handle(value: inner, logger: logger)
            case .http2(let inner): await http2.handle(value: inner, logger: logger)
            case .validation: return
            }
        } catch {
            logger.debug("TLS connection ended before HTTP", metadata: ["reason": "\(error)"])
        }
    }
}

/// Reads the ClientHello ahead of TLS (`ClientHello.parse`) and installs the TLS handler with the context
/// `EdgeCertificates` chooses for it; then hands the bytes it read on and leaves the pipeline. A hello for a name
/// siwa has no certificate for gets a TLS alert (unrecognized_name), plain HTTP gets a 400 saying to use https, and
/// anything else, or nothing within the timeout, a closed connection.
final class HelloReader: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let certificates: EdgeCertificates
    private let metrics: ServerMetrics
    private let logger: Logger
    private let timeout: TimeAmount
    private let install: (NIOSSLContext, any Channel) throws -> Void
    private let failed: (any Error) -> Void
    private let challengeLookup: @Sendable (String) async -> String?
    /// A hello waiting for the store's answer (`challengeElsewhere`).
    private var looking = false
    private var buffered: ByteBuffer?
    private var timer: Scheduled<Void>?
    private var done = false

    init(
        certificates: EdgeCertificates, metrics: ServerMetrics, logger: Logger, timeout: TimeAmount, challengeLookup: @escaping @Sendable (String) async -> String?,
        install: @escaping (NIOSSLContext, any Channel) throws -> Void, failed: @escaping (any Error) -> Void
    ) {
        self.challengeLookup = challengeLookup
        self.certificates = certificates
        self.metrics = metrics
        self.logger = logger
        self.timeout = timeout
        self.install = install
        self.failed = failed
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: timeout) {
            let (handler, context) = loopBound.value
            handler.refuse(context: context, reason: "no TLS hello within the handshake timeout", answer: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        if !done {
            done = true
            failed(EdgeError(description: "the connection ended before its TLS hello"))
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !done else { return context.fireChannelRead(data) }
        var bytes = unwrapInboundIn(data)
        if buffered == nil { buffered = bytes } else { buffered?.writeBuffer(&bytes) }
        guard !looking else { return }
        decide(context: context)
    }

    private func decide(context: ChannelHandlerContext) {
        guard let buffer = buffered else { return }
        let hello: ClientHello?
        do {
            hello = try buffer.withUnsafeReadableBytes { try ClientHello.parse($0) }
        } catch ClientHello.Failure.notTLS {
            // Plain HTTP on the HTTPS port: say so in HTTP, then close.
            let looksLikeHTTP = buffer.readableBytesView.prefix(8).allSatisfy { $0 >= 0x20 && $0 < 0x7F }
            return refuse(context: context, reason: "not TLS", answer: looksLikeHTTP ? Self.plainHTTPAnswer : nil)
        } catch {
            return refuse(context: context, reason: "\(error)", answer: nil)
        }
        guard let hello else { return }
        switch certificates.choose(hello) {
        case .site(let tls), .challenge(let tls):
            serve(tls, buffer, context: context)
        case .challengeElsewhere(let name):
            // Another instance's order: what the store holds now answers this connection, and is kept nowhere (kept,
            // it would answer that instance's next order for the name, months later, with this one's digest).
            guard !looking else { return refuse(context: context, reason: "no TLS-ALPN-01 challenge for \(name)", answer: Self.alert(112), name: name) }
            looking = true
            let lookup = challengeLookup
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            let promise = context.eventLoop.makePromise(of: String?.self)
            promise.completeWithTask { await lookup(name) }
            promise.futureResult.whenSuccess { answer in
                let (handler, context) = bound.value
                guard let answer, let tls = try? EdgeCertificates.challengeContext(domain: name, keyAuthorization: answer), let buffer = handler.buffered else {
                    return handler.refuse(context: context, reason: "no TLS-ALPN-01 challenge for \(name)", answer: Self.alert(112), name: name)
                }
                handler.serve(tls, buffer, context: context)
            }
        case .unknownName:
            metrics.edgeRefusedHellos.increment()
            refuse(context: context, reason: "a TLS hello for a name siwa has no certificate for", answer: Self.alert(112), name: hello.serverName)
        case .none:
            metrics.edgeRefusedHellos.increment()
            refuse(context: context, reason: "no certificate yet (the first ACME order has not completed)", answer: Self.alert(80), name: hello.serverName)
        }
    }

    /// Hands the connection, `buffer` (its hello so far) first, to TLS with `tls`.
    private func serve(_ tls: NIOSSLContext, _ buffer: ByteBuffer, context: ChannelHandlerContext) {
        guard !done else { return }
        do {
            try install(tls, context.channel)
        } catch {
            return refuse(context: context, reason: "\(error)", answer: nil)
        }
        done = true
        timer?.cancel()
        buffered = nil
        context.fireChannelRead(wrapInboundOut(buffer))
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    private func refuse(context: ChannelHandlerContext, reason: String, answer: ByteBuffer?, name: String? = nil) {
        guard !done else { return }
        done = true
        timer?.cancel()
        var metadata: Logger.Metadata = ["reason": "\(reason)", "peer": "\(context.remoteAddress?.ipAddress ?? "?")"]
        if let name { metadata["sni"] = "\(name)" }
        logger.debug("TLS connection refused", metadata: metadata)
        failed(EdgeError(description: reason))
        if let answer {
            context.writeAndFlush(NIOAny(answer)).whenComplete { _ in context.close(promise: nil) }
        } else {
            context.close(promise: nil)
        }
    }

    /// A fatal TLS alert record (RFC 8446 6): `unrecognized_name` (112) or `internal_error` (80).
    static func alert(_ description: UInt8) -> ByteBuffer {
        ByteBuffer(bytes: [21, 3, 3, 0, 2, 2, description])
    }

    static let plainHTTPAnswer = ByteBuffer(
        string: "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: 48\r\n\r\nThis port speaks HTTPS: use https:// to reach it"
    )
}
