import Foundation
import Testing
import TestSupport

/// siwa's plain port reads a connection's first bytes to tell HTTP/1.1 from HTTP/2 with prior knowledge (h2c, the
/// preface `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`), as Envoy's gRPC `ext_authz` connects (`PlainChannel`): whatever the
/// bytes' pieces, each version is read as it is, and a connection that never says which is closed.
@Suite("The plain port: HTTP/1.1 or h2c by the first bytes")
struct PlainChannelTests {
    @Test("HTTP/1.1 sent a few bytes at a time, its first byte alone, is answered; so is a request whose method begins as the preface does (PRI…) and then differs; the h2c preface in two pieces gets siwa's SETTINGS; a client that sends one byte and no more is closed after client_header_timeout_ms")
    func firstBytes() async throws {
        // The pieces come 200 ms apart; the site waits a minute for a head: the full suite's load has held this test
        // process's tasks for more than the default 10 s (a 408 in a run of 3488622's successor), and 2 s not at all.
        // The silent client meets a site whose limit is 2 s.
        try await LocalSite.run(settings: ["client_header_timeout_ms": "60000"]) { site in
            let piecewise = try await RawSocket.exchange(
                port: site.port, "G", then: ["ET /healthz HTTP/1.1\r\n", "Host: a\r\nConnection: close\r\n\r\n"]
            ) { $0.contains("\r\n\r\n") }
            #expect(piecewise.hasPrefix("HTTP/1.1 200"), "\(piecewise.prefix(200))")

            let almost = try await RawSocket.exchange(port: site.port, "PRI", then: [" /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"]) { $0.contains("\r\n\r\n") }
            #expect(almost.hasPrefix("HTTP/1.1 "), "an HTTP/1.1 answer to an HTTP/1.1 request: \(almost.prefix(200))")

            let settings = "\u{0}\u{0}\u{0}\u{4}\u{0}\u{0}\u{0}\u{0}\u{0}"
            let h2c = try await RawSocket.exchange(port: site.port, "PRI * HTTP/2.0\r\n", then: ["\r\nSM\r\n\r\n" + settings]) { $0.utf8.count >= 9 }
            let bytes = Array(h2c.utf8)
            #expect(bytes.count >= 9 && bytes[3] == 4 && bytes[4] == 0, "siwa's first frame is its SETTINGS: \(bytes.prefix(16))")
        }
        try await LocalSite.run(settings: ["client_header_timeout_ms": "2000"]) { site in
            let started = ContinuousClock.now
            let silent = try await RawSocket.exchange(port: site.port, "P")
            #expect(silent.isEmpty, "\(silent.prefix(200))")
            #expect(ContinuousClock.now - started < .seconds(50), "closed by siwa, not by the helper's 60 s")
        }
    }
}
