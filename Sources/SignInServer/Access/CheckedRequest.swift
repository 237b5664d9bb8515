import DoorHTTP
import Foundation
import HTTPTypes
import JOSE

extension HTTPField.Name {
    /// `X-Original-URI`, `X-Original-Method`: the original request, as nginx configurations commonly pass it to an
    /// `auth_request` location.
    static let xOriginalURI = HTTPField.Name("X-Original-URI")
    static let xOriginalMethod = HTTPField.Name("X-Original-Method")
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
        return AccessRequest(host: host, method: method, path: path)
    }
}

/// oauth2-proxy's query parameters of a check (`/auth/check?allowed_groups=admins`), which narrow the decision for
/// one proxy location: `allowed_groups`, `allowed_emails`, `allowed_email_domains`, comma-separated. A person let in
/// by the rules must also be named by each one given.
enum CheckNarrowing {
    static func parse(query: Substring) -> [AccessPolicy] {
        var groups: [String]?
        var emails: [String]?
        var domains: [String]?
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, let value = try? FormEncoding.decodeComponent(parts[1].utf8) else { continue }
            let items = value.split(separator: ",").map { String($0.trimmingBlanks) }.filter { !$0.isEmpty }
            switch parts[0] {
            case "allowed_groups": groups = (groups ?? []) + items
            case "allowed_emails": emails = (emails ?? []) + items
            case "allowed_email_domains": domains = (domains ?? []) + items
            default: continue
            }
        }
        // Each parameter given narrows on its own (as oauth2-proxy checks each): a person must pass every one. An
        // empty one narrows nothing.
        var narrowing: [AccessPolicy] = []
        if let groups, !groups.isEmpty { narrowing.append(AccessPolicy(groups: groups)) }
        if let emails, !emails.isEmpty { narrowing.append(AccessPolicy(emails: emails)) }
        if let domains, !domains.isEmpty { narrowing.append(AccessPolicy(emailDomains: domains)) }
        return narrowing
    }
}
