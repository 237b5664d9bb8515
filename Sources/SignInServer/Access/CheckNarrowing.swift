import DoorHTTP
import Foundation
import HTTPTypes
import JOSE

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
