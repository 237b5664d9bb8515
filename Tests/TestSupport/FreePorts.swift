import NIOCore
import NIOPosix

/// Free loopback ports, found by binding to port 0. Needed up front because the emulator's registered return URL
/// and the server's settings must name each other's ports before either starts.
public enum FreePorts {
    /// `count` distinct ports free a moment ago (all held open together, so they differ, then released).
    public static func reserve(_ count: Int) async throws -> [Int] {
        var channels: [any Channel] = []
        for _ in 0..<count {
            channels.append(try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).get())
        }
        let ports = channels.compactMap { $0.localAddress?.port }
        for channel in channels {
            try await channel.close()
        }
        return ports
    }
}
