import DoorHTTP
import Foundation
import HTTPTypes
import JOSE

extension HTTPField.Name {
    /// `X-Original-URI`, `X-Original-Method`: the original request, as nginx configurations commonly pass it to an
    /// `auth_request` location.
    static let xOriginalURI = HTTPField.Name("X-Original-URI")
    static let xOriginalMethod = HTTPField.Name("X-Original-Method")
    /// `X-Forwarded-Method`, `X-Forwarded-Uri`: the original request, from Traefik and Caddy.
    static let xForwardedMethod = HTTPField.Name("X-Forwarded-Method")
    static let xForwardedUri = HTTPField.Name("X-Forwarded-Uri")
    /// A CORS preflight's (with `Origin`).
    static let accessControlRequestMethod = HTTPField.Name("Access-Control-Request-Method")
}

extension ClientAddressResolver {
    /// The request a forward-auth check asks about, as the rules see it: the host from `X-Forwarded-Host`, the method
    /// from `X-Forwarded-Method` or `X-Original-Method`, and the path from `X-Forwarded-Uri` or `X-Original-URI`,
    /// read as the door reads a target (`RequestTarget`), believed only from a trusted proxy (`fromTrusted`). What
    /// is not said, or is a target the door refuses, is nil: a rule that needs it cannot apply (`AccessControl`).
    /// A proxy sets one name of each pair and passes the client's fields on (nginx's `auth_request` sends the
    /// client's `X-Forwarded-Uri` beside its own `X-Original-URI`), so when both names are present and differ,
    /// which one the proxy wrote is not known: neither is believed.
    func checkedRequest(_ fields: HTTPFields, fromTrusted: Bool) -> AccessRequest {
        guard fromTrusted else { return AccessRequest(host: nil, method: nil, path: nil) }
        let host = forwarded(.xForwardedHost, fields, fromTrusted: true)
        let method = Self.agreed(forwarded(.xForwardedMethod, fields, fromTrusted: true), forwarded(.xOriginalMethod, fields, fromTrusted: true)) {
            $0.uppercased() == $1.uppercased()
        }
        let path = originalURI(fields).flatMap { try? RequestTarget($0, host: host).path }
        // A preflight by the original method, which only a trusted proxy says: a client cannot claim OPTIONS for a GET.
        let preflight = method?.uppercased() == "OPTIONS" && fields[.origin] != nil
            && HTTPField.Name.accessControlRequestMethod.map { fields[$0] != nil } == true
        return AccessRequest(host: host, method: method, path: path, isPreflight: preflight)
    }

    /// The query of the original request a trusted proxy names (`X-Forwarded-Uri`, `X-Original-URI`); nil without one.
    /// Every original target a trusted proxy passed is looked at (joined, `&` between): one that carries a token in
    /// its query is refused even when the two names disagree and neither target is believed for the rules.
    func checkedQuery(_ fields: HTTPFields, fromTrusted: Bool) -> Substring? {
        guard fromTrusted else { return nil }
        let queries = fields.filter { $0.name == .xForwardedUri || $0.name == .xOriginalURI }.compactMap { field -> Substring? in
            guard let mark = field.value.firstIndex(of: "?") else { return nil }
            return field.value[field.value.index(after: mark)...]
        }
        return queries.isEmpty ? nil : Substring(queries.joined(separator: "&"))
    }

    /// The original target a trusted proxy names, `X-Forwarded-Uri` or `X-Original-URI` (each its whole first field:
    /// a target may hold commas); nil when neither is said, or both are and differ.
    private func originalURI(_ fields: HTTPFields) -> String? {
        func first(_ name: HTTPField.Name?) -> String? {
            fields.first { $0.name == name }.map { String(Substring($0.value).trimmingBlanks) }
        }
        return Self.agreed(first(.xForwardedUri), first(.xOriginalURI), by: ==)
    }

    /// The one value two names of the same thing say: either when only one is said, nil when they differ.
    private static func agreed(_ one: String?, _ other: String?, by same: (String, String) -> Bool) -> String? {
        guard let one, let other else { return one ?? other }
        return same(one, other) ? one : nil
    }
}
