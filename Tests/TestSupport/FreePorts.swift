import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// The kernel would not give a port at all.
public struct FreePortsError: Error, CustomStringConvertible {
    public let errno: Int32
    public var description: String { "no loopback port could be bound (errno \(errno))" }
}

/// Free loopback ports for servers the tests start (siwa, the emulator, nginx, Traefik, Caddy, Apache,
/// chromedriver). Needed up front because the emulator's registered return URL and the server's settings must
/// name each other's ports before either starts.
///
/// They are taken outside the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`), from which every
/// outgoing connection gets its local port: a port picked by binding to 0 comes from that range, and one of the
/// many connections the suites open meanwhile could take it before the server it was meant for binds it (nginx
/// then fails with "Address already in use"). Above the range when it leaves room there (61000–65535 on Linux):
/// below it, chromedriver takes ports of its own for each browser session (seen holding 12052 and 22950 when a
/// harness lost its port), so a full run lost a start-up or two there.
public enum FreePorts {
    /// `count` distinct ports free a moment ago (all held open together, so they differ, then released).
    public static func reserve(_ count: Int) async throws -> [Int] {
        var held: [(fd: Int32, port: Int)] = []
        defer { for socket in held { close(socket.fd) } }
        let range = outsideEphemeralRange
        var tries = 0
        while held.count < count {
            tries += 1
            // Fall back to the kernel's choice when the range is too crowded.
            let port = tries < 200 ? Int.random(in: range) : 0
            // Never the same port twice in this process: two tests that reserved it a moment apart would both bind it,
            // and under load the time between a reservation and its bind runs to seconds.
            if port != 0, !handedOut.withLock({ $0.insert(port).inserted }) { continue }
            if let socket = bind(port) { held.append(socket) } else if port == 0 { throw FreePortsError(errno: errno) }
        }
        return held.map(\.port)
    }

    /// A socket bound to 127.0.0.1:`port` (0: the kernel's choice), close-on-exec: a program the tests start meanwhile
    /// must not inherit it. (NIO's sockets were inherited: chromedriver, Apache and siwa processes were seen still
    /// listening on ports reserved here, long after the reservation ended, and the server meant for them failed.)
    private static func bind(_ port: Int) -> (fd: Int32, port: Int)? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard bound == 0, named == 0 else {
            close(fd)
            return nil
        }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    /// Every port reserved so far in this process.
    private static let handedOut = Mutex<Set<Int>>([])

    /// The ports above the ephemeral range when there are at least 2000 of them (61000–65535 on Linux unless
    /// changed), else from 10000 up to the first ephemeral one.
    static var outsideEphemeralRange: ClosedRange<Int> {
        let text = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
        let bounds = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).compactMap { Int($0) }
        let (low, high) = bounds.count == 2 ? (bounds[0], bounds[1]) : (32768, 60999)
        if 65535 - high >= 2000 { return (high + 1)...65535 }
        return 10_000...max(10_001, low - 1)
    }
}
