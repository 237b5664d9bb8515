import Foundation

/// Who may pass the front: `allowed_emails`, `allowed_email_domains`, `allowed_subs`. All empty lets any Apple
/// user through; otherwise a person passes when any one rule names them. Emails and domains compare without
/// case. A private-relay address (`…@privaterelay.appleid.com`) matches a domain rule only when that domain is
/// listed: the relay domain says nothing about who is behind it.
public struct AccessPolicy: Sendable, Equatable {
    public var emails: Set<String>
    public var emailDomains: Set<String>
    public var subjects: Set<String>

    public init(emails: [String] = [], emailDomains: [String] = [], subjects: [String] = []) {
        self.emails = Set(emails.map { $0.lowercased() })
        self.emailDomains = Set(emailDomains.map { $0.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "@.")) })
        self.subjects = Set(subjects)
    }

    /// Whether any rule is set.
    public var isOpen: Bool { emails.isEmpty && emailDomains.isEmpty && subjects.isEmpty }

    /// Whether the person with `subject` and `email` may pass.
    public func allows(subject: String, email: String?) -> Bool {
        if isOpen || subjects.contains(subject) { return true }
        guard let email = email?.lowercased(), !email.isEmpty else { return false }
        if emails.contains(email) { return true }
        guard let at = email.lastIndex(of: "@") else { return false }
        return emailDomains.contains(String(email[email.index(after: at)...]))
    }
}
