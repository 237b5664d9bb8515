@testable import DoorHTTP
import Testing

/// The edge's own reading of a TLS ClientHello (`ClientHello`), ahead of BoringSSL: the host and protocols across
/// however the client splits the hello into records and reads, within bounds a hostile client cannot stretch.
@Suite("TLS ClientHello: SNI and ALPN read before the handshake")
struct ClientHelloTests {
    /// A ClientHello handshake message (RFC 8446 4.1.2) naming `host` and offering `protocols`.
    static func hello(host: String, protocols: [String]) -> [UInt8] {
        func u16(_ value: Int) -> [UInt8] { [UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)] }
        let name = Array(host.utf8)
        let serverNameList = [0] + u16(name.count) + name
        let sni = u16(0) + u16(serverNameList.count + 2) + u16(serverNameList.count) + serverNameList
        let alpnList = protocols.flatMap { [UInt8($0.utf8.count)] + Array($0.utf8) }
        let alpn = u16(16) + u16(alpnList.count + 2) + u16(alpnList.count) + alpnList
        let extensions = sni + alpn
        var body: [UInt8] = [3, 3] + [UInt8](repeating: 7, count: 32) + [0]
        body += u16(2) + [0x13, 0x01] + [1, 0]
        body += u16(extensions.count) + extensions
        return [1, UInt8(body.count >> 16 & 0xFF), UInt8(body.count >> 8 & 0xFF), UInt8(body.count & 0xFF)] + body
    }

    /// `message` in records of the given fragment sizes (the last takes the rest).
    static func records(_ message: [UInt8], sizes: [Int]) -> [UInt8] {
        var out: [UInt8] = []
        var rest = message[...]
        for (index, size) in sizes.enumerated() {
            let fragment = index == sizes.count - 1 ? rest : rest.prefix(size)
            rest = rest.dropFirst(fragment.count)
            out += [22, 3, 1, UInt8(fragment.count >> 8), UInt8(fragment.count & 0xFF)] + fragment
        }
        return out
    }

    /// `message` split into `count` records of as equal sizes as it allows.
    static func split(_ message: [UInt8], into count: Int) -> [UInt8] {
        records(message, sizes: (0..<count).map { index in message.count / count + (index < message.count % count ? 1 : 0) })
    }

    @Test("one record, or split over up to 64 records at generated places and fed in generated reads: nothing until the hello is whole, then its host and protocols")
    func splitsAndReads() throws {
        let message = Self.hello(host: "auth.example.com", protocols: ["h2", "http/1.1"])
        let expected = ClientHello(serverName: "auth.example.com", protocols: ["h2", "http/1.1"])
        #expect(try ClientHello.parse(Self.split(message, into: 1)) == expected)
        #expect(try ClientHello.parse(Self.split(message, into: ClientHello.recordLimit)) == expected)
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let count = Int.random(in: 1...ClientHello.recordLimit, using: &generator)
            // Fragments of generated sizes (at least one byte each), adding up to the message.
            var cuts = Set<Int>()
            while cuts.count < count - 1 { cuts.insert(Int.random(in: 1..<message.count, using: &generator)) }
            let bounds = [0] + cuts.sorted() + [message.count]
            let bytes = Self.records(message, sizes: zip(bounds, bounds.dropFirst()).map { $1 - $0 })
            // Read as it arrives, in reads of generated sizes: every prefix short of the whole is "more needed".
            var seen = 0
            while seen < bytes.count {
                #expect(try ClientHello.parse(bytes[..<seen]) == nil, "\(count) records, \(seen) of \(bytes.count) bytes")
                seen += Int.random(in: 1...64, using: &generator)
            }
            #expect(try ClientHello.parse(bytes) == expected, "\(count) records")
        }
    }

    @Test("a hello over more than 64 records is refused once 64 have come without it whole, however small its records: a client cannot make each read cost more than 64 records")
    func recordLimit() throws {
        let message = Self.hello(host: "auth.example.com", protocols: ["h2"])
        let refusal = ClientHello.Failure.malformed("a hello over more than 64 records")
        #expect(throws: refusal) { try ClientHello.parse(Self.split(message, into: ClientHello.recordLimit + 1)) }
        // One-byte records: 63 of them are "more needed"; at the 64th, with the hello not whole, refused before the
        // rest has come.
        let trickled = Self.records(Array(message.prefix(ClientHello.recordLimit)), sizes: Array(repeating: 1, count: ClientHello.recordLimit))
        #expect(try ClientHello.parse(trickled.prefix(6 * (ClientHello.recordLimit - 1))) == nil)
        #expect(throws: refusal) { try ClientHello.parse(trickled) }
    }
}
