import SignInServer
import Testing

@Suite("trusted_proxies: addresses and CIDR ranges")
struct TrustedProxiesTests {
    @Test("an address matches itself; a range its whole prefix; IPv4-mapped IPv6 peers as their IPv4 address; nothing else")
    func matching() throws {
        let proxies = try TrustedProxies(["127.0.0.1", "10.0.0.0/8", "192.168.4.0/22", "::1", "fd00::/8"])
        for address in ["127.0.0.1", "10.0.0.1", "10.255.255.254", "192.168.4.1", "192.168.7.255", "::1", "fd12:3456::1", "::ffff:10.1.2.3", "::ffff:127.0.0.1"] {
            #expect(proxies.contains(address), "\(address)")
        }
        for address in ["127.0.0.2", "11.0.0.1", "192.168.8.1", "192.168.3.255", "::2", "fe80::1", "::ffff:11.0.0.1", "", "unknown", "10.0.0.1, 10.0.0.2", nil] as [String?] {
            #expect(!proxies.contains(address), "\(address ?? "nil")")
        }
        #expect(!TrustedProxies.none.contains("127.0.0.1"))
        // A range written as IPv4-mapped IPv6 is the IPv4 range it maps.
        let mapped = try TrustedProxies(["::ffff:10.0.0.0/104"])
        #expect(mapped.contains("10.200.0.1") && mapped.contains("::ffff:10.0.0.9") && !mapped.contains("11.0.0.1"))
        #expect(throws: TrustedProxiesError.self) { try TrustedProxies(["::ffff:10.0.0.0/95"]) }
        let everyone = try TrustedProxies(["0.0.0.0/0"])
        #expect(everyone.contains("203.0.113.9") && !everyone.contains("::1"))
    }

    @Test("an entry that is neither an address nor a range is refused, naming it")
    func refused() {
        for entry in ["proxy.example.com", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/8x", "/8", "::1/129", "fe80::1%eth0", "10.0.0.1 ", "*"] {
            #expect(throws: TrustedProxiesError.self, "\(entry)") { try TrustedProxies([entry]) }
            #expect((try? TrustedProxies([entry])) == nil)
        }
    }
}
