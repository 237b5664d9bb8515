import Foundation
import Synchronization

/// What a request's access is decided by, as configured: `access_rules`, `skip_auth_routes` (public rules ahead of
/// them), the global policy (`allowed_emails`, `allowed_email_domains`, `allowed_subs`, `allowed_groups`) and the
/// groups declared in `groups`. Reloaded whole on SIGHUP and when the configuration file changes.
public struct AccessConfiguration: Sendable {
    public var rules: [AccessRule]
    public var global: AccessPolicy
    public var groups: [String: [GroupMember]]

    public init(rules: [AccessRule] = [], global: AccessPolicy = AccessPolicy(), groups: [String: [GroupMember]] = [:]) {
        self.rules = rules
        self.global = global
        self.groups = groups
    }

    /// What differs: the global policy key by key (`allowed_emails +a@x.org -b@y.org`), then the rules and groups.
    public static func changes(from old: AccessConfiguration, to new: AccessConfiguration) -> [String] {
        var changes = changes(from: old.global, to: new.global)
        let before = old.rules.map(\.description)
        let after = new.rules.map(\.description)
        if before != after { changes.append("access_rules: \(before.count) → \(after.count) rules" + (after.isEmpty ? "" : " (" + after.joined(separator: "; ") + ")")) }
        for group in Set(old.groups.keys).union(new.groups.keys).sorted() {
            let was = Set((old.groups[group] ?? []).map(\.description))
            let now = Set((new.groups[group] ?? []).map(\.description))
            let added = now.subtracting(was).sorted().map { "+" + $0 }
            let removed = was.subtracting(now).sorted().map { "-" + $0 }
            if !added.isEmpty || !removed.isEmpty { changes.append("groups.\(group) " + (added + removed).joined(separator: " ")) }
        }
        return changes
    }

    /// What differs in the global policy, key by key: `allowed_emails +a@x.org -b@y.org`.
    public static func changes(from old: AccessPolicy, to new: AccessPolicy) -> [String] {
        [
            ("allowed_emails", old.emails, new.emails), ("allowed_email_domains", old.emailDomains, new.emailDomains),
            ("allowed_subs", old.subjects, new.subjects), ("allowed_groups", old.groups, new.groups),
        ]
        .compactMap { key, before, after in
            let added = after.subtracting(before).sorted().map { "+" + $0 }
            let removed = before.subtracting(after).sorted().map { "-" + $0 }
            return added.isEmpty && removed.isEmpty ? nil : key + " " + (added + removed).joined(separator: " ")
        }
    }

    /// `groups`: a JSON object of group names to member lists (`{"admins": ["ada@example.com"], "staff": ["@example.com"]}`).
    public static func groups(json: String) throws(AccessConfigurationError) -> [String: [GroupMember]] {
        guard let object = try? JSONSerialization.jsonObject(with: Data(json.utf8), options: [.fragmentsAllowed]) as? [String: Any] else {
            throw AccessConfigurationError("groups: must be a JSON object of group names to arrays of members, such as {\"admins\": [\"ada@example.com\"]}")
        }
        var groups: [String: [GroupMember]] = [:]
        for name in object.keys.sorted() {
            do {
                try GroupName.check(name)
            } catch {
                throw AccessConfigurationError("groups.\(name): \(error.description)")
            }
            guard let members = object[name] as? [Any], let texts = members as? [String] else {
                throw AccessConfigurationError("groups.\(name): must be an array of members (emails, @domains, sub:<Apple sub>)")
            }
            var parsed: [GroupMember] = []
            for (index, text) in texts.enumerated() {
                do {
                    parsed.append(try GroupMember(parsing: text))
                } catch {
                    throw AccessConfigurationError("groups.\(name)[\(index)]: \(error.description)")
                }
            }
            groups[name] = parsed
        }
        return groups
    }
}

/// What decides a request, and how it came out: the rule (its label, or `global`) and the verdict, with the person's
/// groups as they are now (what the app is told).
public struct AccessJudgement: Sendable, Equatable {
    public enum Verdict: String, Sendable {
        /// No sign-in needed; no identity is sent.
        case `public`
        /// The person passes, with identity.
        case allow
        /// 403.
        case deny
        /// A person is needed: sign in (a browser) or 401.
        case signIn = "sign-in"
    }

    public var verdict: Verdict
    /// `3`, `skip_auth_routes[0]` or `global`.
    public var rule: String
    public var groups: [String]
    /// Why, when the rule could not be applied as configured (the original request unknown), for the log.
    public var reason: String?
    /// The rule's `max_auth_age` (seconds) for a person it lets in; nil when it sets none.
    public var maxAuthAge: Int? = nil
}

/// The access rules, the global policy and the groups in force, shared by every carrier of the front (the check,
/// `--upstream`'s two carriers, the WebSocket upgrade) and the OpenID Provider: one decision function for all.
/// Configuration and groups from the store are replaced whole; each decision reads them under one lock.
public final class AccessControl: Sendable {
    /// Which rule applies to a request.
    enum Match: Sendable, Equatable {
        case rule(Int)
        case global
        /// Rule `Int` names what the request does not say (a host, method or path the proxy did not pass).
        case unknown(Int)
    }

    /// A request and the rule it matched.
    private struct LastGroups: Sendable {
        let subject: String
        let email: String?
        let groups: [String]
    }

    private struct LastMatch: Sendable {
        let request: AccessRequest
        let match: Match
    }

    private struct State: Sendable {
        var configuration: AccessConfiguration {
            didSet { rules = skipRoutes + configuration.rules }
        }
        /// `skip_auth_routes`, as public rules ahead of `access_rules`.
        var skipRoutes: [AccessRule] {
            didSet { rules = skipRoutes + configuration.rules }
        }
        var storeMembers: [(group: String, member: GroupMember)]
        var directory: GroupDirectory {
            didSet { personGroups.removeAll() }
        }
        /// Counts the changes of what the directory is built from (the configuration, the store's members): a
        /// directory built outside the lock is put in force only if nothing changed meanwhile.
        var generation = 0
        /// Every rule in order (kept, not joined at each decision: the hot paths ask on every request).
        var rules: [AccessRule]
        /// Which rule a request matched, by request: regexes are not matched again for a path seen lately.
        private var matches: [AccessRequest: Match] = [:]
        /// The request matched last and its match. A request is judged twice (by the rules alone, then with the
        /// person) and a proxied one is asked whether it passes `Authorization`; comparing its strings costs a tenth
        /// of hashing them for `matches` (callgrind: 800 instructions a look-up, two or three a proxied request).
        private var lastMatch: LastMatch?
        /// A person's groups by subject, with the email they were worked out for, until the groups change.
        var personGroups: [String: (email: String?, groups: [String])] = [:] {
            didSet { lastGroups = nil }
        }
        /// The person whose groups were asked for last, and their groups (a person's requests come in runs: comparing
        /// the subject costs a fraction of hashing it for `personGroups`, 680 instructions a proxied request).
        /// Forgotten with any change of `personGroups`.
        private var lastGroups: LastGroups?

        init(configuration: AccessConfiguration, skipRoutes: [AccessRule], directory: GroupDirectory) {
            self.configuration = configuration
            self.skipRoutes = skipRoutes
            self.storeMembers = []
            self.directory = directory
            rules = skipRoutes + configuration.rules
        }

        /// Which rule applies to `request`: from memory when it was matched lately.
        mutating func match(_ request: AccessRequest) -> Match {
            if let last = lastMatch, last.request == request { return last.match }
            let match: Match
            if let cached = matches[request] {
                match = cached
            } else {
                match = AccessControl.match(request, rules: rules)
                if matches.count >= AccessControl.cachedMatches { matches.removeAll(keepingCapacity: true) }
                matches[request] = match
            }
            lastMatch = LastMatch(request: request, match: match)
            return match
        }

        /// Forgets every match (the rules changed).
        mutating func forgetMatches() {
            matches.removeAll()
            lastMatch = nil
        }

        /// The groups of `subject` with `email` now.
        mutating func groups(subject: String, email: String?) -> [String] {
            if let last = lastGroups, last.subject == subject, last.email == email { return last.groups }
            let groups: [String]
            if let known = personGroups[subject], known.email == email {
                groups = known.groups
            } else {
                groups = directory.groups(subject: subject, email: email)
                if personGroups.count >= AccessControl.cachedMatches { personGroups.removeAll(keepingCapacity: true) }
                personGroups[subject] = (email, groups)
            }
            lastGroups = LastGroups(subject: subject, email: email, groups: groups)
            return groups
        }
    }

    /// Entries of the match cache before it starts afresh (a flood of distinct paths costs their regexes, no memory).
    static let cachedMatches = 4096
    private let state: Mutex<State>
    /// Told of each reload, with the configuration replaced and the new one (the audit trail).
    private let observers = Mutex<[@Sendable (AccessConfiguration, AccessConfiguration) -> Void]>([])

    /// Calls `observer` after each `reload`.
    public func onReload(_ observer: @escaping @Sendable (_ previous: AccessConfiguration, _ current: AccessConfiguration) -> Void) {
        observers.withLock { $0.append(observer) }
    }

    public init(_ configuration: AccessConfiguration = AccessConfiguration(), skipRoutes: [SkipAuthRoute] = []) {
        state = Mutex(State(
            configuration: configuration, skipRoutes: skipRoutes.enumerated().map { AccessRule(skipRoute: $1, index: $0) },
            directory: GroupDirectory(configuration: configuration.groups)
        ))
    }

    /// The configuration in force.
    public var configuration: AccessConfiguration { state.withLock { $0.configuration } }
    /// Every rule in order, `skip_auth_routes` first.
    public var rules: [AccessRule] { state.withLock { $0.rules } }
    /// Every group with its members and where each membership comes from.
    public var directory: GroupDirectory { state.withLock { $0.directory } }
    /// Called once, the next time a directory has been built and is not yet in force (tests put a change there).
    let directoryBuilt = Mutex<(@Sendable () -> Void)?>(nil)
    /// The configuration, the store's members and the directory in force, read together.
    var inForce: (configuration: AccessConfiguration, storeMembers: [(group: String, member: GroupMember)], directory: GroupDirectory) {
        state.withLock { ($0.configuration, $0.storeMembers, $0.directory) }
    }

    /// Puts `configuration` in force for the next decision; returns the one it replaces.
    @discardableResult
    public func reload(_ configuration: AccessConfiguration) -> AccessConfiguration {
        let previous = replacingDirectory(store: { $0.storeMembers }, configuration: { _ in configuration.groups }) { state, directory, _ in
            let previous = state.configuration
            state.configuration = configuration
            state.directory = directory
            state.forgetMatches()
            return previous
        }
        for observer in observers.withLock({ $0 }) { observer(previous, configuration) }
        return previous
    }

    /// Builds the group directory outside the lock (tens of thousands of configured members take milliseconds, and
    /// every decision on every event loop waits for this lock) from the inputs `store` and `configuration` read in
    /// force, and compares it with the one in force there too; then calls `install` under the lock with it and
    /// whether it differs, unless those inputs changed meanwhile (then again).
    private func replacingDirectory<Result: Sendable>(
        store: (State) -> [(group: String, member: GroupMember)], configuration: (State) -> [String: [GroupMember]],
        install: (inout State, GroupDirectory, _ changed: Bool) -> Result
    ) -> Result {
        while true {
            let (members, groups, current, generation) = state.withLock { (store($0), configuration($0), $0.directory, $0.generation) }
            let directory = GroupDirectory(configuration: groups, store: members)
            if let hook = directoryBuilt.withLock({ hook in defer { hook = nil }; return hook }) { hook() }
            let changed = directory != current
            let installed: Result? = state.withLock { state in
                guard state.generation == generation else { return nil }
                state.generation += 1
                return install(&state, directory, changed)
            }
            if let installed { return installed }
        }
    }

    /// Puts `skip_auth_routes` in force (set once, at start).
    public func install(skipRoutes: [SkipAuthRoute]) {
        state.withLock { state in
            state.skipRoutes = skipRoutes.enumerated().map { AccessRule(skipRoute: $1, index: $0) }
            state.forgetMatches()
        }
    }

    /// Puts the store's memberships in force (`GroupsRefresher`); whether anything changed.
    @discardableResult
    public func setStoreMembers(_ members: [(group: String, member: GroupMember)]) -> Bool {
        // Read again every few seconds, and almost always the same: nothing is built then.
        let same = state.withLock { $0.storeMembers.elementsEqual(members) { $0.group == $1.group && $0.member == $1.member } }
        if same { return false }
        return replacingDirectory(store: { _ in members }, configuration: { $0.configuration.groups }) { state, directory, changed in
            state.storeMembers = members
            guard changed else { return false }
            state.directory = directory
            return true
        }
    }

    /// The groups of the person with `subject` and `email` now, sorted.
    public func groups(subject: String, email: String?) -> [String] {
        state.withLock { $0.groups(subject: subject, email: email) }
    }

    /// The decision for `request` by the person (`subject`, `email`; nil for no one signed in), narrowed for one
    /// proxy location by `narrowing` (`/auth/check?allowed_groups=…`: a person must also be named by each).
    /// `client`: who holds the bearer token the person presented (nil for a browser's cookie), for a rule that names
    /// `clients`. A CORS preflight on a rule with `cors_preflight` is public.
    public func judge(_ request: AccessRequest, subject: String?, email: String?, client: String? = nil, narrowing: [AccessPolicy] = []) -> AccessJudgement {
        state.withLock { state in
            let match = state.match(request)
            let policy: AccessPolicy
            let label: String
            var clients: Set<String> = []
            var maxAuthAge: Int?
            switch match {
            case .rule(let index):
                let rule = state.rules[index]
                label = rule.label
                switch rule.policy {
                case .public: return AccessJudgement(verdict: .public, rule: label, groups: [])
                case .deny:
                    let groups = subject.map { state.groups(subject: $0, email: email) } ?? []
                    return AccessJudgement(verdict: .deny, rule: label, groups: groups)
                case .allow(let allowed):
                    if rule.corsPreflight, request.isPreflight { return AccessJudgement(verdict: .public, rule: label, groups: []) }
                    policy = allowed
                    clients = rule.clients
                    maxAuthAge = rule.maxAuthAge
                }
            case .global:
                label = "global"
                policy = state.configuration.global
            case .unknown(let index):
                let rule = state.rules[index]
                guard let subject else { return AccessJudgement(verdict: .signIn, rule: rule.label, groups: []) }
                return AccessJudgement(
                    verdict: .deny, rule: rule.label, groups: state.groups(subject: subject, email: email),
                    reason: "rule \(rule.label) names the request's host, method or path, which the proxy did not pass (X-Forwarded-Host, X-Forwarded-Method, X-Forwarded-Uri or X-Original-URI from a trusted proxy): refused rather than guessed"
                )
            }
            guard let subject else { return AccessJudgement(verdict: .signIn, rule: label, groups: []) }
            let groups = state.groups(subject: subject, email: email)
            let allowed = policy.allows(subject: subject, email: email, groups: groups)
                && narrowing.allSatisfy { $0.allows(subject: subject, email: email, groups: groups) }
                && (clients.isEmpty || client.map(clients.contains) == true)
            return AccessJudgement(verdict: allowed ? .allow : .deny, rule: label, groups: groups, maxAuthAge: allowed ? maxAuthAge : nil)
        }
    }

    /// Whether the rule that decides `request` passes the request's `Authorization` field to the upstream
    /// (`pass_authorization`).
    public func passesAuthorization(_ request: AccessRequest) -> Bool {
        state.withLock { state in
            let match = state.match(request)
            guard case .rule(let index) = match else { return false }
            return state.rules[index].passAuthorization
        }
    }

    /// The first rule that applies to `request`. A rule that depends on what the request does not say is passed over
    /// when it is `public` (the request then needs a person: stricter); any other such rule decides `unknown`,
    /// since passing it over could let in whom it keeps out.
    static func match(_ request: AccessRequest, rules: [AccessRule]) -> Match {
        for (index, rule) in rules.enumerated() {
            switch rule.applies(to: request) {
            case true?: return .rule(index)
            case false?: continue
            case nil: if rule.policy != .public { return .unknown(index) }
            }
        }
        return .global
    }
}
