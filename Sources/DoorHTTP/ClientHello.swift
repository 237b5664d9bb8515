/// What the edge needs of a TLS ClientHello before the handshake starts (RFC 8446 4.1.2, RFC 5246 7.4.1.2): the host
/// the client names (SNI, RFC 6066 3) and the protocols it offers (ALPN, RFC 7301). The edge reads them itself, ahead
/// of BoringSSL, because the certificate to present depends on both: a TLS-ALPN-01 validation (RFC 8737) names the
/// domain and offers only `acme-tls/1`, and must get the challenge certificate, never the site's.
///
/// The parser reads the first handshake message across as many TLS records as it takes (a hello with a post-quantum
/// key share is larger than one record of some clients), and never reads past what it was given.
public struct ClientHello: Sendable, Equatable {
    /// The SNI host name, lowercased, without a trailing dot; nil when the client sent none.
    public var serverName: String?
    /// The ALPN protocols offered, in the client's order; empty when the client sent no ALPN extension.
    public var protocols: [String]

    public init(serverName: String?, protocols: [String]) {
        self.serverName = serverName
        self.protocols = protocols
    }

    /// Why bytes are not the start of a TLS connection the edge serves.
    public enum Failure: Error, Sendable, Equatable {
        /// Not a TLS handshake record (plain HTTP sent to the HTTPS port, say).
        case notTLS
        /// A handshake record whose first message is not a ClientHello, or one whose fields do not add up.
        case malformed(String)
        /// The hello is larger than the edge reads (`limit`).
        case tooLarge
    }

    /// The largest ClientHello the edge reads: far above what browsers send (about 2 KB with a post-quantum key share).
    public static let limit = 16_384

    /// The most records a hello may span. Browsers send one; a client that splits its hello (to get past a filter
    /// reading SNI) a few. The edge reads the hello again from its start as each read adds bytes, so without a bound
    /// a hello of 16 K one-byte records, sent a record at a time, cost some 10^8 records read.
    public static let recordLimit = 64

    /// The hello at the start of `bytes`: nil while more bytes are needed, the hello once it is whole.
    public static func parse<C: Collection<UInt8>>(_ bytes: C) throws(Failure) -> ClientHello? {
        var handshake: [UInt8] = []
        var index = bytes.startIndex
        var records = 0
        // Records: type 22 (handshake), version 3.x, a length of at most 2^14 + 2048 (RFC 8446 5.2).
        while true {
            guard records < recordLimit else { throw .malformed("a hello over more than \(recordLimit) records") }
            records += 1
            guard let header = take(bytes, &index, 5) else { return nil }
            guard header[0] == 22, header[1] == 3 else { throw .notTLS }
            let length = Int(header[3]) << 8 | Int(header[4])
            guard length > 0, length <= 16_384 + 2_048 else { throw .malformed("record length \(length)") }
            guard let fragment = take(bytes, &index, length) else { return nil }
            handshake += fragment
            if handshake.count >= 4 {
                guard handshake[0] == 1 else { throw .malformed("the first handshake message is not a ClientHello") }
                let total = Int(handshake[1]) << 16 | Int(handshake[2]) << 8 | Int(handshake[3])
                guard total <= limit else { throw .tooLarge }
                if handshake.count >= 4 + total { return try body(handshake[4..<(4 + total)]) }
            }
            guard handshake.count <= limit + 4 else { throw .tooLarge }
        }
    }

    private static func take<C: Collection<UInt8>>(_ bytes: C, _ index: inout C.Index, _ count: Int) -> [UInt8]? {
        guard bytes.distance(from: index, to: bytes.endIndex) >= count else { return nil }
        let end = bytes.index(index, offsetBy: count)
        defer { index = end }
        return Array(bytes[index..<end])
    }

    /// The ClientHello's body: version, random, session id, cipher suites, compression methods, extensions.
    private static func body(_ body: ArraySlice<UInt8>) throws(Failure) -> ClientHello {
        var reader = Reader(body)
        try reader.skip(2 + 32, "version and random")
        try reader.skip(Int(try reader.u8("session id length")), "session id")
        let suites = Int(try reader.u16("cipher suites length"))
        guard suites >= 2, suites % 2 == 0 else { throw .malformed("cipher suites length \(suites)") }
        try reader.skip(suites, "cipher suites")
        let compressions = Int(try reader.u8("compression methods length"))
        guard compressions >= 1 else { throw .malformed("no compression method") }
        try reader.skip(compressions, "compression methods")
        var hello = ClientHello(serverName: nil, protocols: [])
        // A hello without extensions (TLS 1.0-era clients): no SNI, no ALPN.
        guard !reader.isAtEnd else { return hello }
        var extensions = Reader(try reader.bytes(Int(try reader.u16("extensions length")), "extensions"))
        guard reader.isAtEnd else { throw .malformed("bytes after the extensions") }
        var seen = Set<UInt16>()
        while !extensions.isAtEnd {
            let type = try extensions.u16("extension type")
            var data = Reader(try extensions.bytes(Int(try extensions.u16("extension length")), "extension"))
            // RFC 8446 4.2: an extension appears at most once.
            guard seen.insert(type).inserted else { throw .malformed("extension \(type) twice") }
            switch type {
            case 0:
                var names = Reader(try data.bytes(Int(try data.u16("server name list length")), "server name list"))
                while !names.isAtEnd {
                    let kind = try names.u8("name type")
                    let name = try names.bytes(Int(try names.u16("host name length")), "host name")
                    // Only host_name (0) is defined; RFC 6066 allows one name of a type.
                    guard kind == 0 else { continue }
                    guard hello.serverName == nil else { throw .malformed("two host names") }
                    hello.serverName = try hostName(name)
                }
            case 16:
                var list = Reader(try data.bytes(Int(try data.u16("protocol list length")), "protocol list"))
                while !list.isAtEnd {
                    let name = try list.bytes(Int(try list.u8("protocol length")), "protocol")
                    guard !name.isEmpty else { throw .malformed("an empty protocol name") }
                    hello.protocols.append(String(decoding: name, as: UTF8.self))
                }
                guard !hello.protocols.isEmpty else { throw .malformed("an empty protocol list") }
            default:
                continue
            }
            guard data.isAtEnd else { throw .malformed("bytes after extension \(type)'s value") }
        }
        return hello
    }

    /// An SNI host name: ASCII letters, digits, `-`, `.` and `_` (RFC 6066 3: a DNS host name, no IP literal), at most
    /// 253 bytes, lowercased, a trailing dot dropped.
    private static func hostName(_ bytes: ArraySlice<UInt8>) throws(Failure) -> String {
        var name = bytes
        if name.last == UInt8(ascii: ".") { name = name.dropLast() }
        guard !name.isEmpty, name.count <= 253,
            name.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x2E || $0 == 0x5F })
        else { throw .malformed("a host name that is not a DNS name") }
        return String(decoding: name, as: UTF8.self).lowercased()
    }

    /// Reads big-endian fields of a slice, each bounded by what is left.
    private struct Reader {
        var bytes: ArraySlice<UInt8>
        init(_ bytes: ArraySlice<UInt8>) { self.bytes = bytes }
        var isAtEnd: Bool { bytes.isEmpty }

        mutating func bytes(_ count: Int, _ what: String) throws(Failure) -> ArraySlice<UInt8> {
            guard bytes.count >= count else { throw .malformed("\(what) runs past its end") }
            defer { bytes = bytes.dropFirst(count) }
            return bytes.prefix(count)
        }
        mutating func skip(_ count: Int, _ what: String) throws(Failure) { _ = try bytes(count, what) }
        mutating func u8(_ what: String) throws(Failure) -> UInt8 { try bytes(1, what).first ?? 0 }
        mutating func u16(_ what: String) throws(Failure) -> UInt16 {
            let two = try bytes(2, what)
            return UInt16(two[two.startIndex]) << 8 | UInt16(two[two.startIndex + 1])
        }
    }
}
