import Foundation

/// A configuration of access (`groups`, `access_rules`, a group name or member) that siwa refuses, saying where:
/// `access_rules[3].paths[0]: the regex does not compile: …`.
public struct AccessConfigurationError: Error, CustomStringConvertible, Equatable {
    public var description: String

    public init(_ description: String) {
        self.description = description
    }
}

/// One member of a group: an email address (`ada@example.com`), every address of an email domain (`@example.com`),
/// or an Apple subject (`sub:001234.abcd….0123`). Emails and domains compare without case; a subject exactly.
/// A private-relay address (`…@privaterelay.appleid.com`) is matched by a domain member only when the member is
/// `@privaterelay.appleid.com`: the relay's domain says nothing about who is behind it.
public enum GroupMember: Sendable, Hashable, Comparable, CustomStringConvertible {
    case email(String)
    case domain(String)
    case subject(String)

    /// Reads a member as written in the configuration, the CLI and the console.
    public init(parsing text: String) throws(AccessConfigurationError) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.hasPrefix("sub:") {
            let subject = String(trimmed.dropFirst(4))
            guard !subject.isEmpty, subject.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                throw AccessConfigurationError("\(text): a subject member is sub: followed by Apple's sub (printable ASCII, no blanks)")
            }
            self = .subject(subject)
            return
        }
        let lowered = trimmed.lowercased()
        guard let at = lowered.lastIndex(of: "@") else {
            throw AccessConfigurationError("\(text): a member is an email (ada@example.com), a domain (@example.com) or sub:<Apple sub>")
        }
        let domain = lowered[lowered.index(after: at)...]
        guard Self.isDomain(domain) else {
            throw AccessConfigurationError("\(text): \(domain) is not a domain name")
        }
        if at == lowered.startIndex {
            self = .domain(String(domain))
        } else {
            let local = lowered[..<at]
            guard !local.contains("@"), local.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7F }) else {
                throw AccessConfigurationError("\(text): not an email address")
            }
            self = .email(lowered)
        }
    }

    public var description: String {
        switch self {
        case .email(let email): email
        case .domain(let domain): "@" + domain
        case .subject(let subject): "sub:" + subject
        }
    }

    public static func < (lhs: GroupMember, rhs: GroupMember) -> Bool { lhs.description < rhs.description }

    private static func isDomain(_ text: Substring) -> Bool {
        let labels = text.split(separator: ".", omittingEmptySubsequences: false)
        return labels.count >= 2 && labels.allSatisfy { label in
            !label.isEmpty && label.utf8.allSatisfy { $0 == UInt8(ascii: "-") || ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x7A) || $0 >= 0x80 }
        }
    }
}

/// Group names: `[a-z0-9][a-z0-9_.-]*`, at most 64 characters, so they read the same in a header, a claim and a URL.
public enum GroupName {
    public static func check(_ name: String) throws(AccessConfigurationError) {
        let bytes = Array(name.utf8)
        func allowed(_ byte: UInt8) -> Bool { (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39) }
        guard let first = bytes.first, allowed(first), bytes.count <= 64,
            bytes.allSatisfy({ allowed($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") })
        else {
            throw AccessConfigurationError("\(name): a group name is lower-case letters, digits, _ . and - (starting with a letter or digit, at most 64)")
        }
    }
}

/// Where a membership comes from: the configuration (`groups`) or the store (`siwa groups add`, the console).
public enum MembershipSource: String, Sendable, Comparable {
    case configuration
    case store

    public static func < (lhs: MembershipSource, rhs: MembershipSource) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Every group and its members, from both sources, indexed so that a person's groups cost three look-ups: they are
/// computed at each decision from the person's current email and sub, so a change is in force at once.
public struct GroupDirectory: Sendable, Equatable {
    /// Group → member → where the membership comes from.
    public private(set) var groups: [String: [GroupMember: Set<MembershipSource>]] = [:]
    private var byEmail: [String: Set<String>] = [:]
    private var byDomain: [String: Set<String>] = [:]
    private var bySubject: [String: Set<String>] = [:]

    public init(configuration: [String: [GroupMember]] = [:], store: [(group: String, member: GroupMember)] = []) {
        for (group, members) in configuration {
            // A group declared with no members still exists (rules may name it before anyone is in it).
            if groups[group] == nil { groups[group] = [:] }
            for member in members { add(group, member, .configuration) }
        }
        for (group, member) in store { add(group, member, .store) }
    }

    private mutating func add(_ group: String, _ member: GroupMember, _ source: MembershipSource) {
        groups[group, default: [:]][member, default: []].insert(source)
        switch member {
        case .email(let email): byEmail[email, default: []].insert(group)
        case .domain(let domain): byDomain[domain, default: []].insert(group)
        case .subject(let subject): bySubject[subject, default: []].insert(group)
        }
    }

    /// The groups of the person with `subject` and `email`, sorted.
    public func groups(subject: String, email: String?) -> [String] {
        var found = bySubject[subject] ?? []
        if let email = email?.lowercased(), !email.isEmpty {
            if let named = byEmail[email] { found.formUnion(named) }
            if let at = email.lastIndex(of: "@"), let domain = byDomain[String(email[email.index(after: at)...])] { found.formUnion(domain) }
        }
        return found.sorted()
    }

    /// Whether a group of this name exists (declared in the configuration, or with a member in the store).
    public func exists(_ group: String) -> Bool { groups[group] != nil }

    public static func == (lhs: GroupDirectory, rhs: GroupDirectory) -> Bool { lhs.groups == rhs.groups }
}
