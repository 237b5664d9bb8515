import Foundation
import HTTPTypes

/// The headers that tell the site behind the front who is asking, named as oauth2-proxy names them so existing
/// proxy configurations work. A value that is not printable ASCII (a name such as 李雷, or anything with CR/LF)
/// is percent-encoded as UTF-8, so it can never split or forge a header.
public enum IdentityHeaders {
    public static let user = HTTPField.Name("X-Auth-Request-User")
    public static let email = HTTPField.Name("X-Auth-Request-Email")
    public static let preferredUsername = HTTPField.Name("X-Auth-Request-Preferred-Username")
    public static let privateEmail = HTTPField.Name("X-Siwa-Private-Email")
    /// The person's groups (`groups`, `siwa groups`), comma-separated and sorted; absent when none.
    public static let groups = HTTPField.Name("X-Auth-Request-Groups")
    /// The signed assertion (`IdentityAssertions`).
    public static let assertion = HTTPField.Name("X-Siwa-Assertion")
    /// The client holding the bearer token the request came with: an OpenID client's id, a native app's bundle ID
    /// (the assertion's `azp`); absent for a browser's cookie.
    public static let client = HTTPField.Name("X-Auth-Request-Client")
    /// A check's answer only: the `Authorization` the upstream is to get, the request's own unless a bearer token let
    /// it in and its rule does not pass it (`pass_authorization`); the proxy sets the upstream's `Authorization` from
    /// it (none when absent).
    public static let authorization = HTTPField.Name("X-Auth-Request-Authorization")
    /// When the person last authenticated with Apple for the session or token that let them in, in seconds since
    /// 1970 (the assertion's `auth_time`): what an app that asks for a recent sign-in reads (`max_auth_age`).
    public static let authTime = HTTPField.Name("X-Siwa-Auth-Time")

    /// Every field name siwa tells an upstream who asks under: what a door that cannot strip a client's own value
    /// (Envoy's) names for removal when it does not set it.
    static let all: [HTTPField.Name] = [user, email, preferredUsername, privateEmail, groups, assertion, client, authorization, authTime].compactMap { $0 }

    /// Whether a client's field `name` (any case) claims an identity the upstream could take for siwa's or another
    /// front's: `X-Auth-Request-*`, `X-Siwa-*` (also spelled with `_`, which CGI, WSGI and PHP read as `-`), and the
    /// names other fronts pass identity under (`Remote-User`, `X-Remote-User`…).
    /// Read byte by byte (ASCII letters folded, `_` read as `-`): it is asked of every field of every request a door
    /// answers, where Foundation's `replacingOccurrences` cost Envoy's checks 75,000 instructions a request (callgrind,
    /// docs/benchmarks.md). A name with a byte past ASCII is read as `claimsIdentitySpelledOut` reads it, Unicode's
    /// case folding and all.
    static func claimsIdentity(_ name: String) -> Bool {
        let answer = name.utf8.withContiguousStorageIfAvailable { bytes -> Bool? in
            for byte in bytes where byte >= 0x80 { return nil }
            return folded(bytes, startsWith: xAuthRequest) || folded(bytes, startsWith: xSiwa)
                || otherFrontsBytes.contains { $0.count == bytes.count && folded(bytes, startsWith: $0) }
        }
        if case let answer?? = answer { return answer }
        return claimsIdentitySpelledOut(name)
    }

    private static let xAuthRequest = Array("x-auth-request-".utf8)
    private static let xSiwa = Array("x-siwa-".utf8)
    private static let otherFrontsBytes = otherFronts.map { Array($0.utf8) }

    /// Whether ASCII `bytes`, letters folded to lower case and `_` read as `-`, start with `prefix`.
    private static func folded(_ bytes: UnsafeBufferPointer<UInt8>, startsWith prefix: [UInt8]) -> Bool {
        guard bytes.count >= prefix.count else { return false }
        for (index, expected) in prefix.enumerated() {
            var byte = bytes[index]
            if byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") { byte |= 0x20 } else if byte == UInt8(ascii: "_") { byte = UInt8(ascii: "-") }
            guard byte == expected else { return false }
        }
        return true
    }

    /// `claimsIdentity` as first written: the name lowercased as Unicode lowercases it, `_` read as `-`.
    static func claimsIdentitySpelledOut(_ name: String) -> Bool {
        let dashed = name.lowercased().replacingOccurrences(of: "_", with: "-")
        return dashed.hasPrefix("x-auth-request-") || dashed.hasPrefix("x-siwa-") || otherFronts.contains(dashed)
    }

    /// The identity names of other fronts (oauth2-proxy's, Authelia's, Apache's `REMOTE_USER` as a field).
    static let otherFronts: Set<String> = ["remote-user", "remote-email", "remote-groups", "remote-name", "x-remote-user", "x-remote-email", "x-remote-groups"]

    /// The identity headers of `user`: the `sub`, the email when one was shared, the name when known, whether the
    /// email is a private relay address, and the person's `groups` now (none: no header).
    static func fields(for person: Admission.Person) -> [HTTPField] {
        let user = person.user
        var pairs: [(HTTPField.Name?, String)] = [(Self.user, user.subject)]
        if let email = user.email, !email.isEmpty { pairs.append((Self.email, email)) }
        if let name = user.displayName, !name.isEmpty { pairs.append((preferredUsername, name)) }
        pairs.append((privateEmail, user.isPrivateEmail ? "true" : "false"))
        if !person.groups.isEmpty { pairs.append((Self.groups, person.groups.joined(separator: ","))) }
        if let client = person.client { pairs.append((Self.client, client)) }
        if let at = person.authenticatedAt { pairs.append((authTime, String(Int(at.timeIntervalSince1970)))) }
        return pairs.compactMap { name, value in name.map { HTTPField(name: $0, value: headerSafe(value)) } }
    }

    /// The identity headers of `user`, and the assertion when there is one: what goes to the upstream, and what a
    /// check's answer that passes says after `DoorPolicy.passed`'s fields (by the handlers and the byte path alike).
    static func fields(for person: Admission.Person, assertion: String?) -> [HTTPField] {
        var fields = fields(for: person)
        if let name = Self.assertion, let assertion { fields.append(HTTPField(name: name, value: assertion)) }
        return fields
    }

    /// `text` unchanged when every byte is printable ASCII other than `%`; otherwise percent-encoded UTF-8.
    public static func headerSafe(_ text: String) -> String {
        if text.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "%") }) { return text }
        var encoded = ""
        for byte in text.utf8 {
            if byte >= 0x20, byte < 0x7F, byte != UInt8(ascii: "%") {
                encoded.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                encoded += String(format: "%%%02X", byte)
            }
        }
        return encoded
    }
}
