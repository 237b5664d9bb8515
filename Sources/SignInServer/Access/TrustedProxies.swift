import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `trusted_proxies`: the addresses whose `X-Forwarded-*` headers are believed. An entry is an IPv4 or IPv6 address
/// (`10.0.0.7`, `::1`) or a CIDR range (`10.0.0.0/8`, `fd00::/8`). A peer's IPv4-mapped IPv6 address
/// (`::ffff:10.0.0.7`, what a listener on `::` sees of an IPv4 client) is compared as the IPv4 address it maps.
public struct TrustedProxies: Sendable, Equatable {
    /// One entry: the address's bytes (4 or 16) and how many leading bits must match.
    private struct Range: Sendable, Equatable {
        var bytes: [UInt8]
        var bits: Int

        func contains(_ address: [UInt8]) -> Bool {
            guard address.count == bytes.count else { return false }
            var remaining = bits
            for (index, byte) in bytes.enumerated() where remaining > 0 {
                let mask: UInt8 = remaining >= 8 ? 0xFF : ~(0xFF >> UInt8(remaining))
                if (address[index] & mask) != (byte & mask) { return false }
                remaining -= 8
            }
            return true
        }
    }

    private let ranges: [Range]
    /// The entries as configured.
    public let entries: [String]
    /// Peers on siwa's Unix socket (`socket`), which have no address, are trusted: only processes the socket file's
    /// permissions let in can connect, which is the proxy in front.
    public private(set) var socketPeers = false

    /// Reads `entries`; throws naming the first that is neither an address nor a CIDR range. `socketPeers`: siwa
    /// listens on a Unix socket, and a peer without an address is the proxy in front.
    public init(_ entries: [String], socketPeers: Bool = false) throws {
        self.entries = entries
        self.socketPeers = socketPeers
        ranges = try entries.map { entry in
            let parts = entry.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
            guard let bytes = Self.bytes(of: String(parts[0])) else { throw TrustedProxiesError(entry: entry) }
            var bits = bytes.count * 8
            if parts.count == 2 {
                // An IPv4-mapped range (`::ffff:10.0.0.0/104`) is written in IPv6 bits and kept as the IPv4 range.
                let mapped = parts[0].contains(":") && bytes.count == 4 ? 96 : 0
                guard let prefix = Int(parts[1]).map({ $0 - mapped }), (0...bits).contains(prefix), parts[1].allSatisfy(\.isASCII) else {
                    throw TrustedProxiesError(entry: entry)
                }
                bits = prefix
            }
            return Range(bytes: bytes, bits: bits)
        }
    }

    /// No proxy is trusted.
    public static let none = TrustedProxies(ranges: [], entries: [])

    private init(ranges: [Range], entries: [String]) {
        self.ranges = ranges
        self.entries = entries
    }

    public var isEmpty: Bool { ranges.isEmpty && !socketPeers }

    /// Whether `address` (a peer's or an `X-Forwarded-For` hop's) is a trusted proxy; nil is a peer without an
    /// address, on siwa's Unix socket.
    public func contains(_ address: String?) -> Bool {
        guard let address else { return socketPeers }
        guard !ranges.isEmpty, let bytes = Self.bytes(of: address) else { return false }
        return ranges.contains { $0.contains(bytes) }
    }

    /// The address's bytes: 4 for IPv4 and for an IPv4-mapped IPv6 address, 16 for other IPv6 ones; nil when
    /// `text` is not an address (a zone index such as `%eth0` is not taken).
    static func bytes(of text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            return withUnsafeBytes(of: &v4) { Array($0) }
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, text, &v6) == 1 else { return nil }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        if bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF { return Array(bytes[12...]) }
        return bytes
    }
}

/// A `trusted_proxies` entry that is neither an address nor a CIDR range.
public struct TrustedProxiesError: Error, CustomStringConvertible {
    public let entry: String
    public var description: String {
        "entries are IP addresses or CIDR ranges (127.0.0.1, 10.0.0.0/8, ::1, fd00::/8); got \(entry)"
    }
}
