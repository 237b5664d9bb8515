import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization

/// The fast paths' connections to the upstream (`FrontFastPath` with NIO's HTTP/1 client codec, `RawFrontPath` with
/// none): kept alive between requests and handed out on the event loop of the client's connection, so a request and
/// its answer cross no thread. Each connection carries one exchange at a time; one the upstream closed while idle
/// leaves the pool by itself.
final class UpstreamPool<Handler: PooledUpstreamHandler>: Sendable {
    let settings: UpstreamSettings
    private let tls: NIOSSLContext?
    /// Idle connections per event loop.
    private let idle = Mutex<[ObjectIdentifier: [UpstreamConnection<Handler>]]>([:])
    /// At most this many idle connections are kept per event loop; more are closed when their exchange ends.
    static var idleLimit: Int { 128 }

    init(settings: UpstreamSettings, tls: NIOSSLContext?) {
        self.settings = settings
        self.tls = tls
    }

    /// An idle connection on `eventLoop` (`reused`), or a new one.
    func connection(on eventLoop: any EventLoop) -> EventLoopFuture<(connection: UpstreamConnection<Handler>, reused: Bool)> {
        if let idle = idleConnection(on: eventLoop) { return eventLoop.makeSucceededFuture((idle, true)) }
        return connect(on: eventLoop).map { ($0, false) }
    }

    /// An idle connection on `eventLoop`, taken out of the pool; nil when there is none.
    func idleConnection(on eventLoop: any EventLoop) -> UpstreamConnection<Handler>? {
        let key = ObjectIdentifier(eventLoop)
        while let candidate = idle.withLock({ $0[key]?.popLast() }) {
            if candidate.channel.isActive { return candidate }
        }
        return nil
    }

    /// A new connection on `eventLoop`, within the same connect timeout as the handlers' client.
    func connect(on eventLoop: any EventLoop) -> EventLoopFuture<UpstreamConnection<Handler>> {
        let tls = tls, host = settings.host, usesTLS = settings.usesTLS
        return ClientBootstrap(group: eventLoop)
            .connectTimeout(UpstreamClient.connectTimeout(settings))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if usesTLS {
                        guard let tls else { throw UpstreamPoolError.noTLSContext }
                        try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: tls, serverHostname: host.contains(":") ? nil : host))
                    }
                    try Handler.addHandlers(to: channel.pipeline.syncOperations)
                }
            }
            .connect(host: settings.host, port: settings.port)
            .flatMapThrowing { [weak self] channel in
                let handler = try channel.pipeline.syncOperations.handler(type: Handler.self)
                // Once, not on each return to the pool: it only acts while the connection is idle there.
                let identity = UpstreamChannelIdentity(eventLoop: ObjectIdentifier(channel.eventLoop), channel: ObjectIdentifier(channel))
                handler.onIdleClose = { self?.forget(identity) }
                return UpstreamConnection(channel: channel, handler: NIOLoopBound(handler, eventLoop: channel.eventLoop))
            }
    }

    /// Takes `connection` back after an exchange that left it ready for another (closed when the pool is full).
    /// Called on the connection's event loop.
    func release(_ connection: UpstreamConnection<Handler>) {
        let key = ObjectIdentifier(connection.channel.eventLoop)
        let kept = idle.withLock { idle in
            guard idle[key, default: []].count < Self.idleLimit else { return false }
            idle[key, default: []].append(connection)
            return true
        }
        if !kept { connection.channel.close(promise: nil) }
    }

    /// Forgets `connection` (it closed while idle).
    func forget(_ connection: UpstreamChannelIdentity) {
        idle.withLock { idle in
            let key = connection.eventLoop
            idle[key]?.removeAll { ObjectIdentifier($0.channel) == connection.channel }
        }
    }

    /// Closes every idle connection (at shutdown).
    func closeAll() {
        let all = idle.withLock { idle in
            defer { idle.removeAll() }
            return idle.values.flatMap { $0 }
        }
        for connection in all { connection.channel.close(promise: nil) }
    }
}

enum UpstreamPoolError: Error {
    case noTLSContext
}

/// Which pooled connection closed, in a form that can cross to the pool's lock.
struct UpstreamChannelIdentity: Sendable {
    let eventLoop: ObjectIdentifier
    let channel: ObjectIdentifier
}

/// One connection to the upstream and the handler that hands its responses to the exchange using it.
struct UpstreamConnection<Handler: PooledUpstreamHandler>: Sendable {
    let channel: any Channel
    let handler: NIOLoopBound<Handler>
}

/// The last handler of a pooled upstream connection.
protocol PooledUpstreamHandler: ChannelHandler, SendableMetatype {
    /// Called when the connection closes while idle in the pool.
    var onIdleClose: (() -> Void)? { get set }
    /// Adds the connection's handlers after TLS: codecs, if any, then this handler.
    static func addHandlers(to pipeline: ChannelPipeline.SynchronousOperations) throws
}

/// What an exchange hears from its upstream connection.
protocol UpstreamExchangeDelegate: AnyObject {
    func upstream(read part: HTTPClientResponsePart)
    func upstreamReadComplete()
    /// The connection failed or closed; `error` is nil for a plain close.
    func upstream(failed error: (any Error)?)
}

/// The last handler of an upstream connection: passes what the upstream answers to the exchange in progress. Between
/// exchanges (idle in the pool) it only watches for the upstream closing the connection, and takes it out of the pool.
final class UpstreamResponseHandler: ChannelInboundHandler, PooledUpstreamHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    weak var delegate: (any UpstreamExchangeDelegate)?
    /// The pool to leave when the connection closes while idle.
    var onIdleClose: (() -> Void)?
    private var context: ChannelHandlerContext?

    static func addHandlers(to pipeline: ChannelPipeline.SynchronousOperations) throws {
        // The request's headers were HTTPTypes fields (validated) or siwa's own.
        try pipeline.addHTTPClientHandlers(enableOutboundHeaderValidation: false)
        try pipeline.addHandler(UpstreamResponseHandler())
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    /// Sends a request without a body.
    func send(_ head: HTTPRequestHead) {
        guard let context else { return }
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if let delegate {
            delegate.upstream(read: part)
        } else {
            // An answer to no request: the connection is not usable any more.
            context.close(promise: nil)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        delegate?.upstreamReadComplete()
    }

    func channelInactive(context: ChannelHandlerContext) {
        if let delegate {
            self.delegate = nil
            delegate.upstream(failed: nil)
        } else {
            onIdleClose?()
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let delegate {
            self.delegate = nil
            delegate.upstream(failed: error)
        }
        context.close(promise: nil)
    }
}
