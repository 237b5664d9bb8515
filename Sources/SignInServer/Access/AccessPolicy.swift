import Foundation

/// Who may pass: a list of emails, email domains, Apple subjects and groups. All empty lets any signed-in Apple user
/// through; otherwise a person passes when any one entry names them. Emails and domains compare without case. A
/// private-relay address (`…@privaterelay.appleid.com`) matches a domain entry only when that domain is listed: the
/// relay domain says nothing about who is behind it. The global policy (`allowed_emails`, `allowed_email_domains`,
/// `allowed_subs`, `allowed_groups`) and each `allow` rule of `access_rules` are one of these.
public struct AccessPolicy: Sendable, Equatable {
    public var emails: Set<String>
    public var emailDomains: Set<String>
    public var subjects: Set<String>
    public var groups: Set<String>

    public init(emails: [String] = [], emailDomains: [String] = [], subjects: [String] = [], groups: [String] = []) {
        self.emails = Set(emails.map { $0.lowercased() })
        self.emailDomains = Set(emailDomains.map { $0.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "@.")) })
        self.subjects = Set(subjects)
        self.groups = Set(groups)
    }

    /// Whether no entry is set (any signed-in person passes).
    public var isOpen: Bool { emails.isEmpty && emailDomains.isEmpty && subjects.isEmpty && groups.isEmpty }

    /// Whether the person with `subject`, `email` and `groups` (their groups now) may pass.
    public func allows(subject: String, email: String?, groups personGroups: [String] = []) -> Bool {
        if isOpen || subjects.contains(subject) { return true }
        if !groups.isEmpty, personGroups.contains(where: groups.contains) { return true }
        guard let email = email?.lowercased(), !email.isEmpty else { return false }
        if emails.contains(email) { return true }
        guard let at = email.lastIndex(of: "@") else { return false }
        return emailDomains.contains(String(email[email.index(after: at)...]))
    }
}
