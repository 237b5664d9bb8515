import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization

/// The byte path's connections to the upstream (`RawFrontPath` reads the answers as bytes): kept alive between requests and handed out on
/// the event loop of the client's connection, so a request and its answer cross no thread. Each connection carries
/// one exchange at a time; one the upstream closed while idle leaves the pool by itself.
final class UpstreamPool<Part: Sendable>: Sendable {
    let settings: UpstreamSettings
    private let tls: NIOSSLContext?
    /// What goes between TLS and the connection's handler (NIO's HTTP/1 client codec, or nothing).
    private let codecs: @Sendable (ChannelPipeline.SynchronousOperations) throws -> Void
    /// Idle connections per event loop. Each loop's are a reference changed in place: a dictionary's value changed
    /// through its subscript costs an allocation on each request here (the accessor's frame, the pool being generic).
    private let idle = Mutex<[ObjectIdentifier: IdleConnections]>([:])

    private final class IdleConnections: @unchecked Sendable {
        /// Changed only under `idle`'s lock.
        var connections: [UpstreamConnection<Part>] = []
    }
    /// At most this many idle connections are kept per event loop (`upstream_max_connections`, at least 128); more
    /// are closed when their exchange ends. A connection idles only once it was needed: HTTP/2 clients keep hundreds
    /// of requests in flight on a few connections, and a pool that kept fewer opened and closed connections without
    /// end (a third of the CPU time of `--upstream` over HTTP/2 went to connecting).
    var idleLimit: Int { max(128, settings.maxConnections) }

    /// The upstream's address when `upstream` names it by an IP literal: used as it is, with no resolver. A name is
    /// resolved for each connection (its addresses may change), with NIO's happy eyeballs.
    private let literalAddress: SocketAddress?

    init(settings: UpstreamSettings, tls: NIOSSLContext?, codecs: @escaping @Sendable (ChannelPipeline.SynchronousOperations) throws -> Void) {
        self.settings = settings
        literalAddress = try? SocketAddress(ipAddress: settings.host.trimmingCharacters(in: CharacterSet(charactersIn: "[]")), port: settings.port)
        self.tls = tls
        self.codecs = codecs
    }

    /// An idle connection on `eventLoop` (`reused`) or, `fresh` or none idle, a new one, handed to `done` on that
    /// loop: at once for an idle one. A connection that cannot be opened in time is `.timedOut` (504), one refused
    /// `.unreachable` (502), as the handlers' client reports them.
    func acquire(
        on eventLoop: any EventLoop, fresh: Bool,
        _ done: @escaping (Result<(connection: UpstreamConnection<Part>, reused: Bool), UpstreamForwarder.Failure>) -> Void
    ) {
        if !fresh, let idle = idleConnection(on: eventLoop) { return done(.success((idle, true))) }
        connect(on: eventLoop).assumeIsolated().whenComplete { result in
            switch result {
            case .success(let connection):
                done(.success((connection, false)))
            case .failure(let error):
                if case .connectTimeout? = error as? ChannelError { return done(.failure(.timedOut)) }
                done(.failure(.unreachable(error)))
            }
        }
    }

    /// An idle connection on `eventLoop`, taken out of the pool; nil when there is none.
    private func idleConnection(on eventLoop: any EventLoop) -> UpstreamConnection<Part>? {
        let key = ObjectIdentifier(eventLoop)
        while let candidate = idle.withLock({ $0[key]?.connections.popLast() }) {
            if candidate.channel.isActive { return candidate }
        }
        return nil
    }

    /// A new connection on `eventLoop`, within the same connect timeout as the handlers' client.
    private func connect(on eventLoop: any EventLoop) -> EventLoopFuture<UpstreamConnection<Part>> {
        let tls = tls, host = settings.host, usesTLS = settings.usesTLS, codecs = codecs
        let bootstrap = ClientBootstrap(group: eventLoop)
            .connectTimeout(UpstreamClient.connectTimeout(settings))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if usesTLS {
                        guard let tls else { throw UpstreamPoolError.noTLSContext }
                        try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: tls, serverHostname: host.contains(":") ? nil : host))
                    }
                    try codecs(channel.pipeline.syncOperations)
                    try channel.pipeline.syncOperations.addHandler(UpstreamConnectionHandler<Part>())
                }
            }
        let connected: EventLoopFuture<any Channel>
        if let address = literalAddress {
            connected = bootstrap.connect(to: address)
        } else {
            connected = bootstrap.connect(host: host, port: settings.port)
        }
        return connected
            .flatMapThrowing { [weak self] channel in
                let handler = try channel.pipeline.syncOperations.handler(type: UpstreamConnectionHandler<Part>.self)
                // Once, not on each return to the pool: it only acts while the connection is idle there.
                let identity = UpstreamChannelIdentity(eventLoop: ObjectIdentifier(channel.eventLoop), channel: ObjectIdentifier(channel))
                handler.onIdleClose = { self?.forget(identity) }
                return UpstreamConnection(channel: channel, handler: NIOLoopBound(handler, eventLoop: channel.eventLoop))
            }
    }

    /// Ends an exchange's use of `connection`: back to the pool when the exchange left it `reusable` for another
    /// (closed when the pool is full), closed otherwise. Called on the connection's event loop.
    func finish(_ connection: UpstreamConnection<Part>?, reusable: Bool) {
        guard let connection else { return }
        connection.handler.value.delegate = nil
        guard reusable else {
            connection.channel.close(promise: nil)
            return
        }
        // An exchange may have paused it for a slow client.
        connection.readUpstream(true)
        let key = ObjectIdentifier(connection.channel.eventLoop)
        let limit = idleLimit
        let kept = idle.withLock { idle in
            let list: IdleConnections
            if let existing = idle[key] {
                list = existing
            } else {
                list = IdleConnections()
                idle[key] = list
            }
            guard list.connections.count < limit else { return false }
            list.connections.append(connection)
            return true
        }
        if !kept { connection.channel.close(promise: nil) }
    }

    /// Forgets `connection` (it closed while idle).
    func forget(_ connection: UpstreamChannelIdentity) {
        idle.withLock { idle in
            let key = connection.eventLoop
            idle[key]?.connections.removeAll { ObjectIdentifier($0.channel) == connection.channel }
        }
    }

    /// Closes every idle connection (at shutdown).
    func closeAll() {
        let all = idle.withLock { idle in
            defer { idle.removeAll() }
            return idle.values.flatMap { $0.connections }
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

/// One connection to the upstream and the handler that hands its answers to the exchange using it.
struct UpstreamConnection<Part>: Sendable {
    let channel: any Channel
    let handler: NIOLoopBound<UpstreamConnectionHandler<Part>>

    /// Stops reading the upstream (its client is slower than it) or reads it again; the channel's option is set only
    /// when that changes (setting it on every exchange was 2 % of a proxied request's instructions). On its event loop.
    func readUpstream(_ reading: Bool) {
        let handler = handler.value
        guard handler.readingPaused == reading else { return }
        handler.readingPaused = !reading
        try? channel.syncOptions?.setOption(.autoRead, value: reading)
    }
}

/// An exchange's hold on an upstream connection, and its one retry.
struct UpstreamAttempt<Part> {
    var connection: UpstreamConnection<Part>?
    /// The connection came from the pool: the upstream may have closed it meanwhile.
    var reused = false
    var retried = false
    /// The request may be sent twice (`RawHTTP.RequestHead.isIdempotent`).
    var idempotent = true

    /// Whether an exchange that got no answer, for `failure`, is sent again on a new connection: once, when a
    /// reused connection failed and the request is idempotent (a `POST` is not sent twice, as nginx does not). The
    /// connection is let go either way.
    mutating func retries(after failure: UpstreamForwarder.Failure) -> Bool {
        connection = nil
        guard reused, !retried, idempotent, case .unreachable = failure else { return false }
        retried = true
        reused = false
        return true
    }
}

/// What an exchange hears from its upstream connection: the answer's parts as they come.
protocol UpstreamExchangeDelegate<Part>: AnyObject {
    associatedtype Part
    func upstream(read part: Part)
    func upstreamReadComplete()
    /// The connection failed or closed; `error` is nil for a plain close.
    func upstream(failed error: (any Error)?)
}

/// The last handler of an upstream connection: passes what the upstream answers to the exchange in progress. Between
/// exchanges (idle in the pool) it only watches for the upstream closing the connection, and takes it out of the pool;
/// anything the upstream sends then answers no request, and the connection is closed.
final class UpstreamConnectionHandler<Part>: ChannelInboundHandler {
    typealias InboundIn = Part

    weak var delegate: (any UpstreamExchangeDelegate<Part>)?
    /// The pool to leave when the connection closes while idle.
    var onIdleClose: (() -> Void)?
    /// Whether an exchange stopped reading the upstream (`UpstreamConnection.readUpstream`).
    fileprivate var readingPaused = false
    fileprivate var context: ChannelHandlerContext?

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if let delegate {
            delegate.upstream(read: unwrapInboundIn(data))
        } else {
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

extension UpstreamConnectionHandler where Part == ByteBuffer {
    /// Sends a request written as bytes.
    func send(_ request: ByteBuffer) {
        context?.writeAndFlush(NIOAny(request), promise: nil)
    }
}

/// The upstream closed the connection before answering.
struct UpstreamClosed: Error, CustomStringConvertible {
    var description: String { "the upstream closed the connection before answering" }
}
