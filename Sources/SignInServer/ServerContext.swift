import Hummingbird
import NIOCore

/// The request context of the web front. Hummingbird's request id (`hb.request.id`) is in every log line.
public struct ServerContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The connected peer (the proxy, when behind one).
    public let remoteAddress: SocketAddress?

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }
}
