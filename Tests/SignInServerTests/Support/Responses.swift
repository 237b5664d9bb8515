import Foundation
import Hummingbird
import HummingbirdTesting
import TestSupport

/// One `Set-Cookie` header, parsed.
struct SetCookie: Sendable {
    var name: String
    var value: String
    /// Attributes by lower-cased name; flags (`HttpOnly`, `Secure`) map to "".
    var attributes: [String: String]

    init?(_ header: String) {
        let parts = header.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        guard let first = parts.first, let equals = first.firstIndex(of: "=") else { return nil }
        name = String(first[..<equals])
        value = String(first[first.index(after: equals)...])
        var attributes: [String: String] = [:]
        for part in parts.dropFirst() {
            let pieces = part.split(separator: "=", maxSplits: 1)
            attributes[pieces[0].lowercased()] = pieces.count > 1 ? String(pieces[1]) : ""
        }
        self.attributes = attributes
    }

    subscript(_ attribute: String) -> String? { attributes[attribute.lowercased()] }
    func has(_ attribute: String) -> Bool { attributes[attribute.lowercased()] != nil }
    /// True when the cookie deletes itself (`Max-Age=0`, empty value).
    var isDeletion: Bool { value.isEmpty && self["Max-Age"] == "0" }
}

extension TestResponse {
    /// The body as text.
    var text: String { String(buffer: body) }

    /// `Location`.
    var location: String? { headers[.location] }

    /// Every `Set-Cookie` header.
    var setCookies: [SetCookie] { headers[values: .setCookie].compactMap(SetCookie.init) }

    /// The `Set-Cookie` for `name`, if this response sets it.
    func setCookie(_ name: String) -> SetCookie? { setCookies.first { $0.name == name } }

    /// The text of the first `<h1>`: the heading a person sees.
    var heading: String? { Self.capture(#"<h1[^>]*>([\s\S]*?)</h1>"#, in: text).map(Self.unescapeHTML) }

    /// The error page's heading (`#error-title`), nil on any other page.
    var errorTitle: String? { Self.capture(#"<h1 id="error-title">([\s\S]*?)</h1>"#, in: text).map(Self.unescapeHTML) }

    /// The text of the element with this id (tags stripped).
    func element(_ id: String) -> String? {
        Self.capture(#"id=""# + id + #""[^>]*>([\s\S]*?)</"#, in: text).map(Self.unescapeHTML)
    }

    /// The sign-out form's CSRF token on the session page.
    var csrfToken: String? { Self.capture(#"name="csrf_token" value="([^"]*)""#, in: text).map(Self.unescapeHTML) }

    static func capture(_ pattern: String, in text: String) -> String? {
        HTMLText.capture(pattern, in: text)
    }

    static func unescapeHTML(_ text: String) -> String {
        HTMLText.unescape(text)
    }
}
