import Foundation

/// The original request's HTTP attributes read straight from a serialized `CheckRequest`, for the byte path's answer
/// from memory (siwa's `GRPCCheckFromMemory`), which needs only the method, path, host, scheme and header fields of a
/// message Envoy sends thousands of times a second. swift-protobuf's decoder builds the whole message (the peers, their
/// addresses, every map through a dictionary), and that was a quarter of a check's instructions; this walks the
/// message once and keeps only those five.
///
/// It reads what it reads as swift-protobuf does (the last of a repeated scalar wins, a map's last entry for a key
/// wins, strings must be UTF-8, unknown fields are skipped), checks the rest of the message (every string of the known
/// messages UTF-8, every length within its message, every nested message well formed) and gives up, returning nil,
/// on anything it does not read exactly as swift-protobuf would: a known field with another wire type, a message field
/// given twice (which protobuf merges), a group, metadata (`google.protobuf.Struct`), a truncated or overlong varint.
/// nil sends the call on to the handler, which decodes it with swift-protobuf; so a value from here is one
/// swift-protobuf gives too (held to it on generated and mutated messages, `CheckRequestReaderTests`).
public enum CheckRequestReader {
    public typealias HTTPRequest = Envoy_Service_Auth_V3_AttributeContext.HttpRequest

    /// The `attributes.request.http` of the `CheckRequest` in `bytes`, with `method`, `path`, `host`, `scheme`,
    /// `headers` and `header_map` set (its other fields left empty); nil when this reader does not read it.
    public static func http(of bytes: [UInt8]) -> HTTPRequest? {
        var reading = HTTPRequest()
        var found = false
        let read = bytes.withUnsafeBufferPointer { buffer -> Bool in
            var message = Cursor(buffer, from: 0, to: buffer.count)
            return message.readFields { field, wire, value in
                guard field == 1 else { return true }   // CheckRequest.attributes
                guard wire == .bytes, !found, var attributes = value else { return false }
                found = true
                return readAttributes(&attributes, into: &reading)
            }
        }
        return read ? reading : nil
    }

    // MARK: the messages on the way to the request's HTTP attributes

    /// `AttributeContext`: the request (read), the peers and the TLS session (checked), the context extensions (a
    /// `map<string, string>`, checked); metadata only when empty.
    private static func readAttributes(_ message: inout Cursor, into reading: inout HTTPRequest) -> Bool {
        var seen = Seen()
        return message.readFields { field, wire, value in
            switch field {
            case 1, 2: return seen.once(field, wire, value) { peer in checkPeer(&peer) }
            case 4: return seen.once(field, wire, value) { request in readRequest(&request, into: &reading) }
            case 10: return wire == .bytes && isStringEntry(value)
            case 11, 13: return seen.once(field, wire, value) { metadata in metadata.isEmpty }
            case 12: return seen.once(field, wire, value) { tls in checkStrings(&tls, [1]) }
            default: return true
            }
        }
    }

    /// `AttributeContext.Request`: its time (a `Timestamp`, checked) and its HTTP attributes (read).
    private static func readRequest(_ message: inout Cursor, into reading: inout HTTPRequest) -> Bool {
        var seen = Seen()
        return message.readFields { field, wire, value in
            switch field {
            case 1: return seen.once(field, wire, value) { time in checkStrings(&time, [], varints: [1, 2]) }
            case 2: return seen.once(field, wire, value) { http in readHTTP(&http, into: &reading) }
            default: return true
            }
        }
    }

    /// `AttributeContext.HttpRequest`: the five kept, its other strings checked, `raw_body` skipped as bytes.
    private static func readHTTP(_ message: inout Cursor, into reading: inout HTTPRequest) -> Bool {
        var seen = Seen()
        return message.readFields { field, wire, value in
            switch field {
            case 2, 4, 5, 6:
                guard wire == .bytes, let text = value?.string else { return false }
                switch field {
                case 2: reading.method = text
                case 4: reading.path = text
                case 5: reading.host = text
                default: reading.scheme = text
                }
                return true
            case 1, 7, 8, 10, 11: return wire == .bytes && value?.isUTF8 == true
            case 9: return wire == .varint
            case 12: return wire == .bytes
            case 3:
                guard wire == .bytes, var entry = value, let (key, value) = checkStringEntry(&entry) else { return false }
                reading.headers[key] = value
                return true
            case 13: return seen.once(field, wire, value) { map in readHeaderMap(&map, into: &reading) }
            default: return true
            }
        }
    }

    /// `HeaderMap`: its `HeaderValue`s in order (`key`, `value`, `raw_value`).
    private static func readHeaderMap(_ message: inout Cursor, into reading: inout HTTPRequest) -> Bool {
        var headers = reading.headerMap.headers
        let read = message.readFields { field, wire, value in
            guard field == 1 else { return true }
            guard wire == .bytes, var entry = value else { return false }
            var header = Envoy_Config_Core_V3_HeaderValue()
            let readEntry = entry.readFields { field, wire, value in
                switch field {
                case 1, 2:
                    guard wire == .bytes, let text = value?.string else { return false }
                    if field == 1 { header.key = text } else { header.value = text }
                    return true
                case 3:
                    guard wire == .bytes, let bytes = value else { return false }
                    header.rawValue = Data(bytes.bytes)
                    return true
                default: return true
                }
            }
            headers.append(header)
            return readEntry
        }
        reading.headerMap.headers = headers
        return read
    }

    // MARK: the messages checked and not kept

    /// `Peer`: an `Address`, a `labels` map, three strings.
    private static func checkPeer(_ message: inout Cursor) -> Bool {
        var seen = Seen()
        return message.readFields { field, wire, value in
            switch field {
            case 1: return seen.once(field, wire, value) { address in checkAddress(&address) }
            case 2, 4, 5: return wire == .bytes && value?.isUTF8 == true
            case 3: return wire == .bytes && isStringEntry(value)
            default: return true
            }
        }
    }

    /// `Address`: one of a `SocketAddress`, a `Pipe` and an `EnvoyInternalAddress` (the last given wins, as protobuf's
    /// oneof does; the same one given twice would be merged, which this leaves to swift-protobuf).
    private static func checkAddress(_ message: inout Cursor) -> Bool {
        var seen = Seen()
        return message.readFields { field, wire, value in
            switch field {
            case 1: return seen.once(field, wire, value) { socket in checkSocketAddress(&socket) }
            case 2: return seen.once(field, wire, value) { pipe in checkStrings(&pipe, [1], varints: [2]) }
            case 3: return seen.once(field, wire, value) { address in checkStrings(&address, [1, 2]) }
            default: return true
            }
        }
    }

    /// `SocketAddress`: `protocol`, `port_value`, `ipv4_compat` (varints) and four strings.
    private static func checkSocketAddress(_ message: inout Cursor) -> Bool {
        checkStrings(&message, [2, 4, 5, 7], varints: [1, 3, 6])
    }

    /// A message whose known fields are the strings `strings` and the varints `varints`.
    private static func checkStrings(_ message: inout Cursor, _ strings: [Int], varints: [Int] = []) -> Bool {
        message.readFields { field, wire, value in
            if strings.contains(field) { return wire == .bytes && value?.isUTF8 == true }
            if varints.contains(field) { return wire == .varint }
            return true
        }
    }

    /// Whether `value` is a `map<string, string>` entry (checked, not kept).
    private static func isStringEntry(_ value: Cursor?) -> Bool {
        guard var entry = value else { return false }
        return checkStringEntry(&entry) != nil
    }

    /// A `map<string, string>` entry: its key and value, empty when not given; nil when it is not one.
    private static func checkStringEntry(_ entry: inout Cursor) -> (String, String)? {
        var key = "", value = ""
        let read = entry.readFields { field, wire, bytes in
            guard field == 1 || field == 2 else { return true }
            guard wire == .bytes, let text = bytes?.string else { return false }
            if field == 1 { key = text } else { value = text }
            return true
        }
        return read ? (key, value) : nil
    }

    /// The message fields met so far in one message: one given twice is merged by protobuf, which this does not do.
    private struct Seen {
        private var fields: UInt64 = 0

        /// `check` on the message field `field` (of `wire` type, its bytes `value`) the first time it is met.
        mutating func once(_ field: Int, _ wire: Wire, _ value: Cursor?, _ check: (inout Cursor) -> Bool) -> Bool {
            let bit: UInt64 = 1 << UInt64(field)
            guard wire == .bytes, var value, fields & bit == 0 else { return false }
            fields |= bit
            return check(&value)
        }
    }

    // MARK: the wire format

    /// A field's wire type (the groups, 3 and 4, are not read here).
    enum Wire: UInt64 {
        case varint = 0
        case fixed64 = 1
        case bytes = 2
        case fixed32 = 5
    }

    /// A message's bytes, `start..<end` of the buffer, read field by field.
    struct Cursor {
        private let buffer: UnsafeBufferPointer<UInt8>
        private var index: Int
        private let end: Int

        init(_ buffer: UnsafeBufferPointer<UInt8>, from start: Int, to end: Int) {
            self.buffer = buffer
            self.index = start
            self.end = end
        }

        var isEmpty: Bool { index == end }

        /// The bytes, as UTF-8; nil when they are not.
        var string: String? {
            let bytes = UnsafeBufferPointer(rebasing: buffer[index..<end])
            return isASCII ? String(decoding: bytes, as: UTF8.self) : String(validating: bytes, as: UTF8.self)
        }

        /// Whether the bytes are UTF-8 (a string checked, not kept).
        var isUTF8: Bool {
            isASCII || String(validating: UnsafeBufferPointer(rebasing: buffer[index..<end]), as: UTF8.self) != nil
        }

        /// Whether the bytes are ASCII (the usual case, where the standard library's validation is the dear part).
        private var isASCII: Bool {
            for byte in buffer[index..<end] where byte >= 0x80 { return false }
            return true
        }

        /// The bytes.
        var bytes: [UInt8] { Array(buffer[index..<end]) }

        /// `visit` with each field in turn: its number, wire type and, for a length-delimited one, its bytes; false
        /// when `visit` is, or when the message is not well formed (a field number 0 or above 2²⁹ − 1, a group, wire
        /// types 6 and 7, a varint longer than ten bytes or running past the end, a length past the end).
        mutating func readFields(_ visit: (Int, Wire, Cursor?) -> Bool) -> Bool {
            while index < end {
                guard let tag = varint(), tag < UInt64(UInt32.max), let wire = Wire(rawValue: tag & 7) else { return false }
                let field = Int(tag >> 3)
                guard field > 0 else { return false }
                var value: Cursor?
                switch wire {
                case .varint: guard varint() != nil else { return false }
                case .fixed64: guard end - index >= 8 else { return false }; index += 8
                case .fixed32: guard end - index >= 4 else { return false }; index += 4
                case .bytes:
                    guard let length = varint(), length <= UInt64(end - index) else { return false }
                    value = Cursor(buffer, from: index, to: index + Int(length))
                    index += Int(length)
                }
                guard visit(field, wire, value) else { return false }
            }
            return true
        }

        /// The varint at the cursor, as swift-protobuf reads one: at most ten bytes.
        private mutating func varint() -> UInt64? {
            var value: UInt64 = 0
            var shift: UInt64 = 0
            while index < end {
                let byte = buffer[index]
                index += 1
                value |= UInt64(byte & 0x7F) << shift
                if byte & 0x80 == 0 { return value }
                shift += 7
                if shift > 63 { return nil }
            }
            return nil
        }
    }
}
