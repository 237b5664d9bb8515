import Foundation
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
        case literal(String)
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
                segments.append(.literal(String(rest[..<range.upperBound])))
                rest = afterPrefix
                continue
            }
            segments.append(.literal(String(rest[..<range.lowerBound])))
            segments.append(.slot(index))
            rest = afterPrefix.dropFirst(digits.count + 1)
        }
        segments.append(.literal(String(rest)))
        return segments.filter {
            if case .literal(let text) = $0 { return !text.isEmpty }
            return true
        }
    }

    /// The page with each slot's value HTML-escaped in place.
    static func fill(_ segments: [Segment], with values: [String]) -> String {
        var capacity = 0
        for segment in segments {
            switch segment {
            case .literal(let text): capacity += text.utf8.count
            case .slot(let index): capacity += values[index].utf8.count + 16
            }
        }
        var html = ""
        html.reserveCapacity(capacity)
        for segment in segments {
            switch segment {
            case .literal(let text): html += text
            case .slot(let index): appendEscaped(values[index], to: &html)
            }
        }
        return html
    }

    /// HTML escaping as Mustache's `{{name}}` does it: `<`, `>`, `&`, `"`, `'`.
    static func appendEscaped(_ text: String, to html: inout String) {
        let needsEscaping = text.utf8.contains { byte in
            byte == UInt8(ascii: "<") || byte == UInt8(ascii: ">") || byte == UInt8(ascii: "&") || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'")
        }
        guard needsEscaping else {
            html += text
            return
        }
        for character in text.unicodeScalars {
            switch character {
            case "<": html += "&lt;"
            case ">": html += "&gt;"
            case "&": html += "&amp;"
            case "\"": html += "&quot;"
            case "'": html += "&#39;"
            default: html.unicodeScalars.append(character)
            }
        }
    }
}
