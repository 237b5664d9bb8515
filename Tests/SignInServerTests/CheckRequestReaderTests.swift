import EnvoyAuthorization
import Foundation
import SwiftProtobuf
import TestSupport
import Testing

/// The byte path's reader of Envoy's `CheckRequest` (`CheckRequestReader`) against swift-protobuf's decoder, on
/// generated messages as Envoy sends them and on the same messages mutated: wherever the reader gives the request's
/// HTTP attributes, swift-protobuf decodes the message and gives the same ones; the reader reads every message Envoy
/// sends (so that the byte path answers), and gives up on what it cannot read exactly as swift-protobuf does.
@Suite struct CheckRequestReaderTests {
    typealias CheckRequest = Envoy_Service_Auth_V3_CheckRequest
    typealias HTTPRequest = Envoy_Service_Auth_V3_AttributeContext.HttpRequest

    /// What the reader keeps of a decoded message's HTTP attributes.
    static func kept(_ http: HTTPRequest) -> HTTPRequest {
        var kept = HTTPRequest()
        kept.method = http.method
        kept.path = http.path
        kept.host = http.host
        kept.scheme = http.scheme
        kept.headers = http.headers
        // The header map's fields without the unknown fields protobuf keeps beside them, which the reader skips.
        if http.hasHeaderMap {
            kept.headerMap = Envoy_Config_Core_V3_HeaderMap()
            kept.headerMap.headers = http.headerMap.headers.map { header in
                var plain = Envoy_Config_Core_V3_HeaderValue()
                plain.key = header.key
                plain.value = header.value
                plain.rawValue = header.rawValue
                return plain
            }
        }
        return kept
    }

    /// swift-protobuf's reading of `bytes`, kept as the reader keeps it; nil when it refuses the message.
    static func decoded(_ bytes: [UInt8]) -> HTTPRequest? {
        (try? CheckRequest(serializedBytes: bytes)).map { kept($0.attributes.request.http) }
    }

    @Test("every generated message Envoy could send is read, as swift-protobuf reads it")
    func generatedMessagesAgree() throws {
        var generator = SplitMix64(seed: 0x0C4E_C4E0)
        for _ in 0..<3_000 {
            let message = Self.message(&generator, metadata: false)
            let bytes: [UInt8] = try message.serializedBytes()
            let read = try #require(CheckRequestReader.http(of: bytes), "the reader gave up on \(message)")
            #expect(read == Self.kept(message.attributes.request.http))
        }
    }

    @Test("a mutated message is read as swift-protobuf reads it, or left to the handler")
    func mutatedMessagesAgree() throws {
        var generator = SplitMix64(seed: 0x0BAD_C4EC)
        var readCount = 0, refusedBySwiftProtobuf = 0, total = 0
        for _ in 0..<4_000 {
            let message = Self.message(&generator, metadata: generator.below(4) == 0)
            let bytes: [UInt8] = try message.serializedBytes()
            for mutated in Self.mutations(of: bytes, &generator) {
                total += 1
                let expected = Self.decoded(mutated)
                if expected == nil { refusedBySwiftProtobuf += 1 }
                guard let read = CheckRequestReader.http(of: mutated) else { continue }
                readCount += 1
                #expect(read == expected, "bytes \(mutated)")
            }
        }
        // The mutations are not all refused by one or the other: the comparison has cases on both sides.
        #expect(readCount > total / 10)
        #expect(refusedBySwiftProtobuf > total / 20)
    }

    @Test("a string that is not UTF-8, wherever the known messages have one, is refused by both")
    func stringsNotUTF8() throws {
        var generator = SplitMix64(seed: 0x00FF_FEFF)
        let marker = "\u{1}MARKER\u{1}"
        // Each place a string is: set to the marker, then its bytes replaced by bytes that are not UTF-8.
        let places: [(String, (inout CheckRequest) -> Void)] = [
            ("method", { $0.attributes.request.http.method = marker }),
            ("path", { $0.attributes.request.http.path = marker }),
            ("host", { $0.attributes.request.http.host = marker }),
            ("scheme", { $0.attributes.request.http.scheme = marker }),
            ("id", { $0.attributes.request.http.id = marker }),
            ("query", { $0.attributes.request.http.query = marker }),
            ("protocol", { $0.attributes.request.http.protocol = marker }),
            ("body", { $0.attributes.request.http.body = marker }),
            ("a header's name", { $0.attributes.request.http.headers[marker] = "v" }),
            ("a header's value", { $0.attributes.request.http.headers["x-marked"] = marker }),
            ("header_map key", { $0.attributes.request.http.headerMap.headers.append(Self.header(marker, "v")) }),
            ("header_map value", {
                var header = Envoy_Config_Core_V3_HeaderValue()
                header.key = "x-marked"
                header.value = marker
                $0.attributes.request.http.headerMap.headers.append(header)
            }),
            ("source address", { $0.attributes.source.address.socketAddress.address = marker }),
            ("destination principal", { $0.attributes.destination.principal = marker }),
            ("a peer's label", { $0.attributes.source.labels["k"] = marker }),
            ("a context extension", { $0.attributes.contextExtensions[marker] = "v" }),
            ("TLS SNI", { $0.attributes.tlsSession.sni = marker }),
            ("pipe path", { $0.attributes.destination.address.pipe.path = marker }),
            ("internal address", { $0.attributes.destination.address.envoyInternalAddress.endpointID = marker }),
        ]
        let markerBytes = Array(marker.utf8)
        for (place, set) in places {
            for bad in [[UInt8](repeating: 0xFF, count: markerBytes.count), [0xC0, 0x80] + Array(markerBytes.dropFirst(2)), [0xED, 0xA0, 0x80] + Array(markerBytes.dropFirst(3))] {
                var message = Self.message(&generator, metadata: false)
                set(&message)
                var bytes: [UInt8] = try message.serializedBytes()
                let at = try #require(bytes.firstRange(of: markerBytes), "\(place)")
                bytes.replaceSubrange(at, with: bad)
                #expect(Self.decoded(bytes) == nil, "swift-protobuf read a string that is not UTF-8 in \(place)")
                #expect(CheckRequestReader.http(of: bytes) == nil, "the reader read a string that is not UTF-8 in \(place)")
                // The same bytes, valid, are read by both.
                bytes.replaceSubrange(at.lowerBound..<(at.lowerBound + bad.count), with: markerBytes)
                let read = CheckRequestReader.http(of: bytes)
                #expect(read != nil && read == Self.decoded(bytes), "\(place)")
            }
        }
    }

    @Test("what protobuf merges, and what the reader does not read, goes to the handler")
    func mergesAndGroupsGoToTheHandler() throws {
        var generator = SplitMix64(seed: 7)
        let message = Self.message(&generator, metadata: false)
        let bytes: [UInt8] = try message.serializedBytes()
        // The whole message twice: protobuf merges the two `attributes`; swift-protobuf reads it, the reader leaves it.
        #expect(Self.decoded(bytes + bytes) != nil)
        #expect(CheckRequestReader.http(of: bytes + bytes) == nil)
        // An unknown field, as a varint, fixed32, fixed64 and bytes, before and after: read by both alike.
        for unknown: [UInt8] in [[0xF8, 0x01, 0x05], [0xFD, 0x01, 1, 2, 3, 4], [0xF9, 0x01, 1, 2, 3, 4, 5, 6, 7, 8], [0xFA, 0x01, 2, 0x41, 0x42]] {
            #expect(CheckRequestReader.http(of: unknown + bytes) == Self.decoded(bytes))
            #expect(CheckRequestReader.http(of: bytes + unknown) == Self.decoded(bytes))
        }
        // A group (start and end, field 31): swift-protobuf skips it, the reader leaves the message to the handler.
        #expect(Self.decoded(bytes + [0xFB, 0x01, 0xFC, 0x01]) != nil)
        #expect(CheckRequestReader.http(of: bytes + [0xFB, 0x01, 0xFC, 0x01]) == nil)
        // Field number 0, wire types 6 and 7, an eleven-byte varint, a length past the end: refused by both.
        for bad: [UInt8] in [[0x00, 0x01], [0x0E], [0x0F], [0x08] + [UInt8](repeating: 0xFF, count: 10) + [0x01], [0x0A, 0x7F]] {
            #expect(Self.decoded(bytes + bad) == nil, "\(bad)")
            #expect(CheckRequestReader.http(of: bytes + bad) == nil, "\(bad)")
        }
        // Metadata with content: the reader does not read `google.protobuf.Struct`; empty, it does.
        var withMetadata = message
        withMetadata.attributes.metadataContext.filterMetadata["envoy.filters.http.jwt_authn"] = Google_Protobuf_Struct(fields: ["sub": Google_Protobuf_Value(stringValue: "x")])
        #expect(CheckRequestReader.http(of: try withMetadata.serializedBytes()) == nil)
        var emptyMetadata = message
        emptyMetadata.attributes.metadataContext = Envoy_Config_Core_V3_Metadata()
        let emptyBytes: [UInt8] = try emptyMetadata.serializedBytes()
        #expect(CheckRequestReader.http(of: emptyBytes) == Self.decoded(emptyBytes))
    }

    // MARK: generated messages

    static func header(_ key: String, _ value: String) -> Envoy_Config_Core_V3_HeaderValue {
        var header = Envoy_Config_Core_V3_HeaderValue()
        header.key = key
        header.rawValue = Data(value.utf8)
        return header
    }

    /// Text of the kinds a request carries: empty, ASCII, Latin-1, CJK, emoji, controls.
    static func text(_ generator: inout SplitMix64) -> String {
        let pieces = ["", "a", "GET", "/page?x=1", "app.example", "https", "siwa_session=abc", "é", "日本", "🍏", "\t", " ", ";", "%2F", "\u{0}"]
        return (0..<generator.below(4)).map { _ in generator.pick(pieces) }.joined()
    }

    /// A `CheckRequest` as Envoy sends it: the peers' addresses, the request's attributes, the fields in `headers` or
    /// `header_map` (with `encode_raw_headers`), sometimes context extensions, a TLS session, and (when `metadata`)
    /// metadata.
    static func message(_ generator: inout SplitMix64, metadata: Bool) -> CheckRequest {
        var message = CheckRequest()
        var attributes = Envoy_Service_Auth_V3_AttributeContext()
        for peer in 0..<2 where generator.below(5) > 0 {
            var value = Envoy_Service_Auth_V3_AttributeContext.Peer()
            switch generator.below(4) {
            case 0:
                value.address.socketAddress.address = generator.pick(["203.0.113.7", "::1", "127.0.0.1"])
                value.address.socketAddress.portValue = UInt32(generator.below(65536))
            case 1: value.address.pipe.path = "/run/envoy.sock"; value.address.pipe.mode = 0o600
            case 2: value.address.envoyInternalAddress.serverListenerName = text(&generator)
            default: break
            }
            if generator.below(3) == 0 { value.principal = text(&generator) }
            if generator.below(4) == 0 { value.labels[text(&generator)] = text(&generator) }
            if generator.below(5) == 0 { value.certificate = text(&generator) }
            if peer == 0 { attributes.source = value } else { attributes.destination = value }
        }
        var http = HTTPRequest()
        http.id = String(generator.next())
        http.method = generator.pick(["GET", "POST", "OPTIONS", "get", "", "PUT"])
        http.path = generator.pick(["/", "/app/page", "/a?b=c", "", "/é/🍏"]) + text(&generator)
        http.host = generator.pick(["app.example", "app.example:8443", "", "[::1]:80"])
        http.scheme = generator.pick(["https", "http", ""])
        http.protocol = generator.pick(["HTTP/1.1", "HTTP/2", ""])
        if generator.below(4) == 0 { http.size = Int64(generator.below(10_000)) - 1 }
        if generator.below(6) == 0 { http.body = text(&generator) }
        if generator.below(6) == 0 { http.rawBody = Data(text(&generator).utf8) }
        let names = ["cookie", "authorization", "accept", "sec-fetch-mode", "x-forwarded-for", "x-forwarded-proto", "x-auth-request-user", ":authority", "user-agent"]
        if generator.below(2) == 0 {
            for _ in 0..<generator.below(8) {
                var header = header(generator.pick(names), text(&generator))
                if generator.below(4) == 0 { header.value = text(&generator); header.rawValue = Data() }
                http.headerMap.headers.append(header)
            }
        } else {
            for _ in 0..<generator.below(8) { http.headers[generator.pick(names)] = text(&generator) }
        }
        attributes.request.http = http
        if generator.below(2) == 0 { attributes.request.time = Google_Protobuf_Timestamp(seconds: Int64(generator.below(2_000_000_000)), nanos: Int32(generator.below(1_000_000_000))) }
        if generator.below(4) == 0 { attributes.contextExtensions[text(&generator)] = text(&generator) }
        if generator.below(4) == 0 { attributes.tlsSession.sni = text(&generator) }
        if metadata { attributes.metadataContext.filterMetadata["f"] = Google_Protobuf_Struct(fields: ["k": Google_Protobuf_Value(numberValue: 1)]) }
        message.attributes = attributes
        return message
    }

    /// `value` as a protobuf varint.
    static func varint(_ value: UInt64) -> [UInt8] {
        var value = value, out: [UInt8] = []
        while value >= 0x80 {
            out.append(UInt8(value & 0x7F) | 0x80)
            value >>= 7
        }
        return out + [UInt8(value)]
    }

    /// Mutations of `bytes`: a byte changed, the message cut short, a byte inserted or removed, a span repeated, an
    /// unknown field put in, a field's tag given another wire type.
    static func mutations(of bytes: [UInt8], _ generator: inout SplitMix64) -> [[UInt8]] {
        guard !bytes.isEmpty else { return [] }
        var out: [[UInt8]] = []
        var changed = bytes
        changed[generator.below(bytes.count)] = UInt8(truncatingIfNeeded: generator.next())
        out.append(changed)
        var flipped = bytes
        flipped[generator.below(bytes.count)] ^= UInt8(1 << generator.below(8))
        out.append(flipped)
        out.append(Array(bytes.prefix(generator.below(bytes.count))))
        var inserted = bytes
        inserted.insert(UInt8(truncatingIfNeeded: generator.next()), at: generator.below(bytes.count + 1))
        out.append(inserted)
        var removed = bytes
        removed.remove(at: generator.below(bytes.count))
        out.append(removed)
        let start = generator.below(bytes.count)
        let span = bytes[start..<min(bytes.count, start + 1 + generator.below(12))]
        var repeated = bytes
        repeated.insert(contentsOf: span, at: start)
        out.append(repeated)
        // An unknown field (number 16 to 2,063) at the start, with a payload of its wire type.
        let field = 16 + generator.below(2_048)
        let wire = generator.pick([0, 1, 2, 5])
        let payload: [UInt8] = switch wire {
        case 0: [0x96, 0x01]
        case 1: [UInt8](repeating: 7, count: 8)
        case 2: [3, 0x61, 0x62, 0x63]
        default: [1, 2, 3, 4]
        }
        out.append(varint(UInt64(field << 3 | wire)) + payload + bytes)
        // A tag's wire type changed: any byte whose low three bits say "length-delimited" made a varint, and back.
        var retyped = bytes
        let at = generator.below(bytes.count)
        retyped[at] = (retyped[at] & ~7) | UInt8(generator.pick([0, 1, 2, 5]))
        out.append(retyped)
        return out
    }
}
