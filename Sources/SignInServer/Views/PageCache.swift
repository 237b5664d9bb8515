import Foundation
import NIOCore
import Synchronization

/// A page rendered once per shape and filled per request.
///
/// Mustache rendering walks the template, looks every name up through `[String: Any]` and HTML-escapes all the
/// text Character by Character; for pages whose text only changes in a few places (a CSRF token, a return
/// path, a user's name) that was most of a request's cost. The renderer renders a template once with a
/// unique marker in place of each per-request value ("slot"), splits the HTML at the markers, and keeps the
/// pieces. Values that change which sections render (booleans, present vs empty slots) and fixed strings
/// (title, error wording) are part of the cache key, so every shape still comes from the user's template.
/// Slot values are HTML-escaped as `{{name}}` would escape them.
final class PageCache: Sendable {
    /// A piece of a rendered page: literal HTML, or the index of a slot to fill.
    enum Segment: Sendable {
        case literal([UInt8])
        case slot(Int)
    }

    /// Entries are finite (templates × languages × shapes); the bound only guards against a template that
    /// puts a per-request value into the key by mistake.
    static let maximumEntries = 512

    /// Marker text: letters and digits only, so no escaping changes it; a per-process nonce so no text in a
    /// template can be mistaken for one.
    let markerPrefix: String
    private let entries = Mutex<[String: [Segment]]>([:])

    init() {
        markerPrefix = "siwaslot" + String(UInt64.random(in: 0...UInt64.max), radix: 36) + "x"
    }

    /// How many shapes are cached.
    var count: Int { entries.withLock { $0.count } }

    /// The marker rendered in place of slot `index`.
    func marker(_ index: Int) -> String { markerPrefix + String(index) + "x" }

    /// The segments for `key`, rendering with `render` (given the markers) the first time.
    func segments(for key: String, slotCount: Int, render: ([String]) -> String) -> [Segment] {
        if let cached = entries.withLock({ $0[key] }) { return cached }
        let html = render((0..<slotCount).map(marker))
        let segments = split(html, slotCount: slotCount)
        entries.withLock { entries in
            if entries.count < Self.maximumEntries { entries[key] = segments }
        }
        return segments
    }

    /// Splits rendered HTML at the markers.
    func split(_ html: String, slotCount: Int) -> [Segment] {
        var segments: [Segment] = []
        var rest = Substring(html)
        while let range = rest.range(of: markerPrefix) {
            let afterPrefix = rest[range.upperBound...]
            let digits = afterPrefix.prefix { $0.isASCII && $0.isNumber }
            guard !digits.isEmpty, let index = Int(digits), index < slotCount,
                afterPrefix.dropFirst(digits.count).first == "x"
            else {
                // Not one of ours after all: keep it as text.
                segments.append(.literal(Array(rest[..<range.upperBound].utf8)))
                rest = afterPrefix
                continue
            }
            segments.append(.literal(Array(rest[..<range.lowerBound].utf8)))
            segments.append(.slot(index))
            rest = afterPrefix.dropFirst(digits.count + 1)
        }
        segments.append(.literal(Array(rest.utf8)))
        return segments.filter {
            if case .literal(let text) = $0 { return !text.isEmpty }
            return true
        }
    }

    /// The page with each slot's value HTML-escaped in place, as the bytes of the response body.
    static func fill(_ segments: [Segment], with values: [String]) -> ByteBuffer {
        var capacity = 0
        for segment in segments {
            switch segment {
            case .literal(let bytes): capacity += bytes.count
            case .slot(let index): capacity += values[index].utf8.count + 16
            }
        }
        var buffer = ByteBuffer()
        buffer.reserveCapacity(capacity)
        for segment in segments {
            switch segment {
            case .literal(let bytes): buffer.writeBytes(bytes)
            case .slot(let index): appendEscaped(values[index], to: &buffer)
            }
        }
        return buffer
    }

    /// HTML escaping as Mustache's `{{name}}` does it: `<`, `>`, `&`, `"`, `'`; byte by byte (all five are ASCII,
    /// so multi-byte UTF-8 passes through untouched).
    static func appendEscaped(_ text: String, to buffer: inout ByteBuffer) {
        var text = text
        text.withUTF8 { bytes in
            var start = 0
            for index in 0..<bytes.count {
                let replacement: StaticString
                switch bytes[index] {
                case UInt8(ascii: "<"): replacement = "&lt;"
                case UInt8(ascii: ">"): replacement = "&gt;"
                case UInt8(ascii: "&"): replacement = "&amp;"
                case UInt8(ascii: "\""): replacement = "&quot;"
                case UInt8(ascii: "'"): replacement = "&#39;"
                default: continue
                }
                buffer.writeBytes(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(bytes)[start..<index]))
                buffer.writeStaticString(replacement)
                start = index + 1
            }
            buffer.writeBytes(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(bytes)[start..<bytes.count]))
        }
    }
}

/// Prepared pages by a small key a controller works out cheaply (its page's few shapes), each prepared once.
final class PreparedShapes: Sendable {
    private let shapes = Mutex<[Int: PreparedPage]>([:])

    func shape(_ key: Int, prepare: () -> PreparedPage) -> PreparedPage {
        if let found = shapes.withLock({ $0[key] }) { return found }
        let made = prepare()
        shapes.withLock { $0[key] = made }
        return made
    }
}
