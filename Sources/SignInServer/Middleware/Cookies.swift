import Foundation
import Hummingbird

/// The cookies the server sets, with the attributes each needs (documented in the README).
struct CookiePolicy: Sendable {
    let secure: Bool
    /// `cookie_domain`: the session cookie's `Domain`, for sibling hosts behind one siwa; nil: siwa's host only.
    var domain: String? = nil

    /// `__Host-siwa_session` over HTTPS (Secure, Path=/, no Domain), `__Secure-siwa_session` over HTTPS with a
    /// `cookie_domain` (a `__Host-` cookie may not name a domain), `siwa_session` on plain-HTTP local mode.
    var sessionName: String { secure ? (domain == nil ? "__Host-siwa_session" : "__Secure-siwa_session") : "siwa_session" }

    /// The binding cookie that ties Apple's return to the browser that started the sign-in.
    var bindingName: String { secure ? "__Host-siwa_binding" : "siwa_binding" }

    /// The double-submit CSRF cookie of the popup flow.
    var csrfName: String { secure ? "__Host-siwa_csrf" : "siwa_csrf" }

    /// Every name siwa's cookies have under any setting: a browser keeps sending a cookie set before `cookie_domain`
    /// or HTTPS was turned on or off until it expires, and it is siwa's all the same (never the upstream's).
    static let allNames: Set<String> = Set(["siwa_session", "siwa_binding", "siwa_csrf"].flatMap { [$0, "__Host-" + $0, "__Secure-" + $0] })

    /// CSRF: HttpOnly (the page embeds the same value for the script), SameSite=Strict.
    func csrf(_ value: String) -> Cookie {
        Cookie(name: csrfName, value: value, maxAge: 86_400, path: "/", secure: secure, httpOnly: true, sameSite: .strict)
    }

    /// The `Set-Cookie` value of `csrf(value)`, put together from its attributes rendered once (every sign-in
    /// page view sets it; building and printing a `Cookie` each time showed in profiles).
    func csrfHeader(_ value: String) -> String {
        csrfName + "=" + value + csrfAttributes
    }

    private var csrfAttributes: String { secure ? Self.secureCSRFAttributes : Self.plainCSRFAttributes }
    private static let plainCSRFAttributes = attributes(of: CookiePolicy(secure: false).csrf(""))
    private static let secureCSRFAttributes = attributes(of: CookiePolicy(secure: true).csrf(""))

    /// What follows `name=` in a cookie with an empty value: its attributes, as Hummingbird writes them.
    private static func attributes(of cookie: Cookie) -> String {
        String(cookie.description.dropFirst(cookie.name.utf8.count + 1))
    }

    /// Session: HttpOnly, SameSite=Lax (sent on top-level navigations, not on cross-site subrequests).
    func session(_ value: String, maxAge: Int) -> Cookie {
        Cookie(name: sessionName, value: value, maxAge: maxAge, domain: domain, path: "/", secure: secure, httpOnly: true, sameSite: .lax)
    }

    /// Binding: must come back on Apple's cross-site form_post, so SameSite=None (which requires Secure) over
    /// HTTPS. In local mode Apple's emulator is on the same host, so the POST is same-site and Lax suffices.
    func binding(_ value: String) -> Cookie {
        if secure {
            return Cookie(name: bindingName, value: value, maxAge: 600, path: "/", secure: true, httpOnly: true, sameSite: .none)
        }
        return Cookie(name: bindingName, value: value, maxAge: 600, path: "/", secure: false, httpOnly: true, sameSite: .lax)
    }

    /// The binding cookie's value: the sign-in's binding token and, when the browser held a session as it started,
    /// the SHA-256 of that session's id (never the id), which the completed sign-in ends.
    static func bindingValue(_ token: String, replacing sessionHash: String?) -> String {
        sessionHash.map { token + "~" + $0 } ?? token
    }

    /// The binding token and the hash of the session it replaces, from the binding cookie's value.
    static func readBinding(_ value: String?) -> (token: String?, replaces: String?) {
        guard let value else { return (nil, nil) }
        guard let mark = value.firstIndex(of: "~") else { return (value, nil) }
        let replaces = String(value[value.index(after: mark)...])
        return (String(value[..<mark]), replaces.isEmpty ? nil : replaces)
    }

    /// Deletes a cookie.
    func expired(_ name: String) -> Cookie {
        Cookie(name: name, value: "", maxAge: 0, domain: name == sessionName ? domain : nil, path: "/", secure: secure, httpOnly: true, sameSite: .lax)
    }
}

extension Request {
    /// The value of the first cookie called `name` (`HTTPFields.cookieValue`).
    func cookieValue(_ name: String) -> String? {
        headers.cookieValue(name)
    }
}

extension HTTPFields {
    /// The value of the first cookie called `name`, read as Hummingbird's `cookies[name]?.value` reads it
    /// (pairs split at `;`, leading blanks dropped, everything after the first `=`, nil when empty), without parsing every
    /// cookie of the request: a signed-in page view looks one up, and that parse showed in profiles.
    func cookieValue(_ name: String) -> String? {
        let nameBytes = Array(name.utf8)
        for field in self where field.name == .cookie {
            var value = field.value
            let found: String? = value.withUTF8 { bytes in
                var start = 0
                while start < bytes.count {
                    var end = start
                    while end < bytes.count, bytes[end] != UInt8(ascii: ";") { end += 1 }
                    var pairStart = start
                    while pairStart < end, bytes[pairStart] == UInt8(ascii: " ") || bytes[pairStart] == UInt8(ascii: "\t") { pairStart += 1 }
                    let valueStart = pairStart + nameBytes.count + 1
                    // An empty value counts as no cookie, as in Hummingbird (and an empty CSRF cookie must not match
                    // an empty header).
                    if valueStart < end, bytes[pairStart + nameBytes.count] == UInt8(ascii: "="),
                        nameBytes.withUnsafeBufferPointer({ $0.elementsEqual(UnsafeBufferPointer(rebasing: bytes[pairStart..<(pairStart + nameBytes.count)])) })
                    {
                        return String(decoding: UnsafeBufferPointer(rebasing: bytes[valueStart..<end]), as: UTF8.self)
                    }
                    start = end + 1
                }
                return nil
            }
            if let found { return found }
        }
        return nil
    }
}

extension CookiePolicy {
    /// A completed sign-in: the session cookie set, the binding cookie (done with) deleted.
    func signedIn(_ response: inout Response, sessionID: String, lifetime: TimeInterval) {
        response.setCookie(session(sessionID, maxAge: Int(lifetime)))
        response.setCookie(expired(bindingName))
    }
}
