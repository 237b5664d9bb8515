import DoorHTTP
import Foundation
import HTTPTypes
import JOSE

extension HTTPField.Name {
    /// `X-Original-URI`, `X-Original-Method`: the original request, as nginx configurations commonly pass it to an
    /// `auth_request` location.
    static let xOriginalURI = HTTPField.Name("X-Original-URI")
    static let xOriginalMethod = HTTPField.Name("X-Original-Method")
    /// A CORS preflight's (with `Origin`).
    static let accessControlRequestMethod = HTTPField.Name("Access-Control-Request-Method")
}

extension ClientAddressResolver {
    /// The request a forward-auth check asks about, as the rules see it: the host from `X-Forwarded-Host`, the method
    /// from `X-Forwarded-Method` or `X-Original-Method`, and the path from `X-Forwarded-Uri` or `X-Original-URI`,
    /// read as the door reads a target (`RequestTarget`), believed only from a trusted proxy (`fromTrusted`). What
    /// is not said, or is a target the door refuses, is nil: a rule that needs it cannot apply (`AccessControl`).
    func checkedRequest(_ fields: HTTPFields, fromTrusted: Bool) -> AccessRequest {
        guard fromTrusted else { return AccessRequest(host: nil, method: nil, path: nil) }
        let host = forwarded(.xForwardedHost, fields, fromTrusted: true)
        let method = forwarded(.xForwardedMethod, fields, fromTrusted: true) ?? forwarded(.xOriginalMethod, fields, fromTrusted: true)
        // A target may hold commas: the whole first field, not its first item.
        let uri = [HTTPField.Name.xForwardedUri, .xOriginalURI].lazy.compactMap { name in fields.first { $0.name == name }?.value }.first
            .map { String(Substring($0).trimmingBlanks) }
        let path = uri.flatMap { try? RequestTarget($0, host: host).path }
        // A preflight by the original method, which only a trusted proxy says: a client cannot claim OPTIONS for a GET.
        let preflight = method?.uppercased() == "OPTIONS" && fields[.origin] != nil
            && HTTPField.Name.accessControlRequestMethod.map { fields[$0] != nil } == true
        return AccessRequest(host: host, method: method, path: path, isPreflight: preflight)
    }

    /// The query of the original request a trusted proxy names (`X-Forwarded-Uri`, `X-Original-URI`); nil without one.
    func checkedQuery(_ fields: HTTPFields, fromTrusted: Bool) -> Substring? {
        guard fromTrusted, let uri = [HTTPField.Name.xForwardedUri, .xOriginalURI].lazy.compactMap({ name in fields.first { $0.name == name }?.value }).first,
            let mark = uri.firstIndex(of: "?")
        else { return nil }
        return Substring(uri[uri.index(after: mark)...])
    }
}
