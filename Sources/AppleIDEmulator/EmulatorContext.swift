import Hummingbird
import NIOCore

/// The emulator's request context: knows the peer address (the admin API answers only on loopback)
/// and the channel (to drop a connection on purpose).
public struct EmulatorContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The connected peer.
    public let remoteAddress: SocketAddress?
    let channel: (any Channel)?

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
        channel = source.channel
    }

    /// True when the peer is on loopback (127.0.0.0/8 or ::1).
    var isLoopback: Bool {
        guard let address = remoteAddress else { return false }
        switch address {
        case .v4:
            return address.ipAddress?.hasPrefix("127.") ?? false
        case .v6:
            let ip = address.ipAddress ?? ""
            return ip == "::1" || ip.hasPrefix("::ffff:127.")
        case .unixDomainSocket:
            return true
        }
    }
}
