import JOSE

/// The request target of everything that may reach the upstream, read once, normalized once, and then both decided
/// on and forwarded, on every way a request takes to the upstream (the byte path, the handlers, the WebSocket
/// handshake), as Envoy normalizes a path before its routing and forwards the normalized one.
///
/// Accepted: origin-form (`/path?query`), and absolute-form (`http://host/path?query`) only when its authority is
/// the request's `Host`, then reduced to origin-form. Refused: any other form, a byte outside visible ASCII, a
/// fragment (`#`), a `%` not followed by two hex digits, a path whose percent-decoding is not UTF-8, an encoded `/`,
/// `\` or NUL (`%2F`, `%5C`, `%00`) or a bare `\` in the path, a dot-segment with parameters (`..;x`) and one that
/// would climb above `/`.
///
/// The normalization of the path: percent-encoded unreserved characters (`A-Z a-z 0-9 - . _ ~`) are decoded, other
/// percent-encodings are kept with upper-case hex digits, a character a path may not hold unencoded (`"`, `<`, `{`,
/// …) is percent-encoded, and dot-segments are removed (RFC 3986 §5.2.4). The query is kept as sent, but for the
/// same encoding of characters a query may not hold unencoded. A rule's regex (`skip_auth_routes`) is matched against
/// `path`, and `forwarded` is what the upstream gets after its base path: the same bytes.
package struct RequestTarget: Sendable, Equatable, CustomStringConvertible {
    /// The normalized path, still percent-encoded but for unreserved characters: what rules are matched against.
    package let path: String
    /// The query without its `?` (nil when the target had none).
    package let query: String?

    /// The target as the upstream gets it (after the upstream's base path).
    package var forwarded: String { query.map { path + "?" + $0 } ?? path }

    package var description: String { forwarded }

    /// Why a target was refused (for the log; the client gets siwa's 400 page).
    package struct Refusal: Error, Equatable, CustomStringConvertible {
        package let description: String
    }

    /// Reads `raw`, the target as the request line carried it; `host` is the request's `Host` (which an absolute-form
    /// target must name).
    package init(_ raw: String, host: String?) throws(Refusal) {
        // Copied from the string's own bytes at once: through `some StringProtocol`, which another module calls
        // unspecialised, each byte of the view came through the protocol's witnesses (callgrind: 550 instructions of
        // a proxied request).
        var raw = raw
        try self.init(bytes: raw.withUTF8 { Array($0) }, host: host)
    }

    /// `init(_:host:)` of a part of a string, read from its bytes in place as a `String`'s are.
    package init(_ raw: Substring, host: String?) throws(Refusal) {
        var raw = raw
        try self.init(bytes: raw.withUTF8 { Array($0) }, host: host)
    }

    private init(bytes: [UInt8], host: String?) throws(Refusal) {
        var bytes = bytes
        if bytes.first != UInt8(ascii: "/") {
            bytes = try Self.reduceAbsoluteForm(bytes, host: host)
        }
        for byte in bytes {
            guard (0x21...0x7E).contains(byte) else { throw Refusal(description: "a byte outside visible ASCII in the target") }
            guard byte != UInt8(ascii: "#") else { throw Refusal(description: "a fragment (#) in the target") }
        }
        let split = bytes.firstIndex(of: UInt8(ascii: "?"))
        let pathBytes = bytes[..<(split ?? bytes.endIndex)]
        path = try Self.normalizedPath(pathBytes)
        if let split {
            query = try Self.normalizedQuery(bytes[(split + 1)...])
        } else {
            query = nil
        }
    }

    /// `raw`, an absolute-form target, as the origin-form target it names (its path and query, as sent) when its
    /// authority is `host`; nil otherwise. For what reads a target before `RequestTarget` does and would lose the
    /// authority (the conversion of NIO's heads to HTTP types).
    package static func originForm(of raw: String, host: String?) -> String? {
        guard let reduced = try? reduceAbsoluteForm(Array(raw.utf8), host: host) else { return nil }
        return String(decoding: reduced, as: UTF8.self)
    }

    /// The path and query of an absolute-form target whose authority is `host`.
    private static func reduceAbsoluteForm(_ bytes: [UInt8], host: String?) throws(Refusal) -> [UInt8] {
        let lowered = bytes.prefix(8).map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }
        let schemeLength: Int
        if lowered.starts(with: Array("http://".utf8)) {
            schemeLength = 7
        } else if lowered.starts(with: Array("https://".utf8)) {
            schemeLength = 8
        } else {
            throw Refusal(description: "a target that is neither origin-form nor absolute-form")
        }
        let rest = bytes[schemeLength...]
        let authorityEnd = rest.firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") } ?? rest.endIndex
        let authority = rest[..<authorityEnd].map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }
        let expected = host.map { Array($0.utf8).map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 } }
        guard let expected, !authority.isEmpty, authority == expected else {
            throw Refusal(description: "an absolute-form target whose authority is not the Host")
        }
        let remainder = Array(rest[authorityEnd...])
        return remainder.first == UInt8(ascii: "/") ? remainder : [UInt8(ascii: "/")] + remainder
    }

    /// The path normalized (percent-encoding, then dot-segments). `shortcut` false: always by the loop (the tests
    /// compare the two).
    static func normalizedPath(_ bytes: ArraySlice<UInt8>, shortcut: Bool = true) throws(Refusal) -> String {
        // Most paths hold only what a path may hold unencoded (no `%`, no `\`) and no dot-segment: normalized, they
        // are themselves (what the loop below would make of them, without its copies).
        if shortcut, bytes.allSatisfy(isPathByte), !hasDotSegment(bytes) { return String(decoding: bytes, as: UTF8.self) }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var decoded: [UInt8] = []
        decoded.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%") {
                let value = try percentDecoded(bytes, at: index)
                switch value {
                case 0x2F: throw Refusal(description: "an encoded / (%2F) in the path")
                case 0x5C: throw Refusal(description: "an encoded \\ (%5C) in the path")
                case 0x00: throw Refusal(description: "an encoded NUL (%00) in the path")
                default: break
                }
                decoded.append(value)
                append(value, encoded: !isUnreserved(value), to: &out)
                index += 3
                continue
            }
            guard byte != UInt8(ascii: "\\") else { throw Refusal(description: "a \\ in the path") }
            decoded.append(byte)
            append(byte, encoded: !isPathByte(byte), to: &out)
            index += 1
        }
        guard String(validating: decoded, as: UTF8.self) != nil else {
            throw Refusal(description: "a percent-encoded path that is not UTF-8")
        }
        return try String(decoding: removingDotSegments(out), as: UTF8.self)
    }

    /// RFC 3986 §5.2.4 on a path that starts with `/`; a segment that would climb above `/` is refused, and so is a
    /// dot-segment with parameters (`..;x`, which some servers read as `..`).
    private static func removingDotSegments(_ path: [UInt8]) throws(Refusal) -> [UInt8] {
        guard hasDotSegment(path[...]) else { return path }
        let segments = path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).dropFirst()
        var kept: [ArraySlice<UInt8>] = []
        var endsInDirectory = false
        for segment in segments {
            let name = segment.prefix { $0 != UInt8(ascii: ";") }
            let isDot = name.elementsEqual([UInt8(ascii: ".")])
            let isDotDot = name.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")])
            guard !(isDot || isDotDot) || name.count == segment.count else {
                throw Refusal(description: "a dot-segment with parameters in the path")
            }
            if isDot {
                endsInDirectory = true
            } else if isDotDot {
                guard !kept.isEmpty else { throw Refusal(description: "a dot-segment that climbs above /") }
                kept.removeLast()
                endsInDirectory = true
            } else {
                kept.append(segment)
                endsInDirectory = false
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(path.count)
        for segment in kept {
            out.append(UInt8(ascii: "/"))
            out.append(contentsOf: segment)
        }
        if endsInDirectory || out.isEmpty { out.append(UInt8(ascii: "/")) }
        return out
    }

    /// Whether a segment after a `/` of `path` starts with `.` (what the part before the first `/` starts with does not
    /// count: a path here starts with `/`).
    private static func hasDotSegment(_ path: ArraySlice<UInt8>) -> Bool {
        var afterSlash = false
        for byte in path {
            if afterSlash, byte == UInt8(ascii: ".") { return true }
            afterSlash = byte == UInt8(ascii: "/")
        }
        return false
    }

    /// The query with its percent-encodings checked, and characters a query may not hold unencoded encoded.
    private static func normalizedQuery(_ bytes: ArraySlice<UInt8>) throws(Refusal) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%") {
                _ = try percentDecoded(bytes, at: index)
                out.append(contentsOf: bytes[index..<(index + 3)])
                index += 3
                continue
            }
            append(byte, encoded: !isPathByte(byte) && byte != UInt8(ascii: "?"), to: &out)
            index += 1
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The byte that `%XX` at `index` encodes.
    private static func percentDecoded(_ bytes: ArraySlice<UInt8>, at index: Int) throws(Refusal) -> UInt8 {
        guard index + 2 < bytes.endIndex, let high = FormEncoding.hexValue(bytes[index + 1]), let low = FormEncoding.hexValue(bytes[index + 2]) else {
            throw Refusal(description: "a % not followed by two hex digits")
        }
        return high << 4 | low
    }

    /// Appends `byte` as it is, or `encoded` as `%XX` with upper-case hex digits.
    private static func append(_ byte: UInt8, encoded: Bool, to out: inout [UInt8]) {
        guard encoded else { return out.append(byte) }
        out.append(UInt8(ascii: "%"))
        out.append(hexDigit(byte >> 4))
        out.append(hexDigit(byte & 0x0F))
    }

    /// The upper-case hex digit of `nibble` (0…15).
    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "A") + nibble - 10
    }

    /// RFC 3986 unreserved.
    package static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"): true
        default: false
        }
    }

    /// RFC 3986 pchar (less `%`, read apart) and `/`: what a path may hold unencoded.
    package static func isPathByte(_ byte: UInt8) -> Bool {
        if isUnreserved(byte) { return true }
        return switch byte {
        case UInt8(ascii: "/"), UInt8(ascii: ":"), UInt8(ascii: "@"), UInt8(ascii: "!"), UInt8(ascii: "$"), UInt8(ascii: "&"), UInt8(ascii: "'"),
            UInt8(ascii: "("), UInt8(ascii: ")"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: ","), UInt8(ascii: ";"), UInt8(ascii: "="):
            true
        default: false
        }
    }
}
