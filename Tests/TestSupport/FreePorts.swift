import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// Free loopback ports for servers the tests start (siwa, the emulator, nginx, Traefik, Caddy, Apache,
/// chromedriver). Needed up front because the emulator's registered return URL and the server's settings must
/// name each other's ports before either starts.
///
/// They are taken below the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`), from which every
/// outgoing connection gets its local port: a port picked by binding to 0 comes from that range, and one of the
/// many connections the suites open meanwhile could take it before the server it was meant for binds it (nginx
/// then fails with "Address already in use"). Below the range, only another server can take it.
public enum FreePorts {
    /// `count` distinct ports free a moment ago (all held open together, so they differ, then released).
    public static func reserve(_ count: Int) async throws -> [Int] {
        var channels: [any Channel] = []
        let range = outsideEphemeralRange
        var tries = 0
        while channels.count < count {
            tries += 1
            // Fall back to the kernel's choice when the range below the ephemeral ports is too crowded.
            let port = tries < 200 ? Int.random(in: range) : 0
            // Never the same port twice in this process: two tests that reserved it a moment apart would both bind it,
            // and under load the time between a reservation and its bind runs to seconds.
            if port != 0, !handedOut.withLock({ $0.insert(port).inserted }) { continue }
            do {
                channels.append(try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: port).get())
            } catch where port != 0 {
                continue
            }
        }
        let ports = channels.compactMap { $0.localAddress?.port }
        for channel in channels {
            try await channel.close()
        }
        return ports
    }

    /// Every port reserved so far in this process.
    private static let handedOut = Mutex<Set<Int>>([])

    /// Ports from 10000 up to the first ephemeral one (32768 on Linux unless changed).
    static var outsideEphemeralRange: ClosedRange<Int> {
        let text = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
        let low = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).first.flatMap { Int($0) } ?? 32768
        return 10_000...max(10_001, low - 1)
    }
}
