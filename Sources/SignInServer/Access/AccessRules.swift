import Foundation
import HTTPTypes

/// A regex searched in a request's normalized path (`RequestTarget.path`: dot-segments removed, percent-encoded but
/// for unreserved characters; never its query). Anchor it (`^/health$`) to mean the whole path.
public struct PathPattern: Sendable, CustomStringConvertible {
    public let description: String
    // Not Sendable only because a match's output (`AnyRegexOutput`) may hold any value; the regex itself is
    // immutable once compiled and is only matched against, each match making its own output.
    nonisolated(unsafe) private let pattern: Regex<AnyRegexOutput>

    /// Compiles `source`; a regex that does not compile is refused with the compiler's message.
    public init(_ source: String) throws(AccessConfigurationError) {
        guard !source.isEmpty else { throw AccessConfigurationError("the regex is empty (write ^/$ for the root alone)") }
        description = source
        do {
            pattern = try Regex(source)
        } catch {
            throw AccessConfigurationError("the regex does not compile: \(error)")
        }
    }

    public func matches(_ path: String) -> Bool {
        (try? pattern.firstMatch(in: path)) != nil
    }
}

/// A host a rule applies to: an exact name (`grafana.example.com`) or every name under a domain (`*.example.com`,
/// which is not `example.com` itself). Without case, without the port.
public enum HostPattern: Sendable, Equatable, CustomStringConvertible {
    case exact(String)
    case under(String)

    public init(_ text: String) throws(AccessConfigurationError) {
        let lowered = text.lowercased()
        let name = lowered.hasPrefix("*.") ? String(lowered.dropFirst(2)) : lowered
        let labels = name.split(separator: ".", omittingEmptySubsequences: false)
        guard !labels.isEmpty, labels.allSatisfy({ !$0.isEmpty && $0.utf8.allSatisfy { $0 == UInt8(ascii: "-") || ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x7A) } })
        else {
            throw AccessConfigurationError("\(text): a host is a name (app.example.com) or *.example.com, without scheme, port or path")
        }
        self = lowered.hasPrefix("*.") ? .under(name) : .exact(name)
    }

    public var description: String {
        switch self {
        case .exact(let name): name
        case .under(let domain): "*." + domain
        }
    }

    /// Whether `host` (lower-cased, without its port) is this one.
    func matches(_ host: String) -> Bool {
        switch self {
        case .exact(let name): host == name
        case .under(let domain): host.count > domain.count + 1 && host.hasSuffix("." + domain)
        }
    }

    /// `Host` or `X-Forwarded-Host` as rules compare it: lower-cased, without the port (`[::1]:8080` → `[::1]`).
    public static func normalized(_ authority: String) -> String {
        // Every request through the front asks: a name in lower-case ASCII (nearly all) is read in place, in one pass;
        // anything else as `normalizedSpelledOut` reads it (`AccessRulesTests.hostNormalizedEitherWay`).
        let plain = authority.utf8.withContiguousStorageIfAvailable { bytes -> String? in
            guard bytes.first != UInt8(ascii: "[") else { return nil }
            var colon: Int?
            for index in bytes.indices {
                let byte = bytes[index]
                if (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) || byte >= 0x80 { return nil }
                if byte == UInt8(ascii: ":"), colon == nil { colon = index }
            }
            if let colon { return String(decoding: UnsafeBufferPointer(rebasing: bytes[..<colon]), as: UTF8.self) }
            return bytes.last == UInt8(ascii: ".") ? String(decoding: UnsafeBufferPointer(rebasing: bytes.dropLast()), as: UTF8.self) : authority
        }
        if let plain, let name = plain { return name }
        return normalizedSpelledOut(authority)
    }

    /// `normalized`, read character by character: lowered, an IPv6 literal kept to its `]`, the port cut, one
    /// trailing dot taken off.
    static func normalizedSpelledOut(_ authority: String) -> String {
        let lowered = authority.utf8.contains { ($0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z")) || $0 >= 0x80 } ? authority.lowercased() : authority
        let bytes = lowered.utf8
        if bytes.first == UInt8(ascii: "[") {
            guard let close = bytes.firstIndex(of: UInt8(ascii: "]")) else { return lowered }
            return String(lowered[...close])
        }
        if let colon = bytes.firstIndex(of: UInt8(ascii: ":")) { return String(lowered[..<colon]) }
        return bytes.last == UInt8(ascii: ".") ? String(lowered.dropLast()) : lowered
    }
}

/// One entry of `access_rules` (or one of `skip_auth_routes`, read as a `public` rule): which requests it matches and
/// what it decides. Omitted `hosts`, `paths` or `methods` match any; a rule for `GET` also matches `HEAD`.
public struct AccessRule: Sendable, CustomStringConvertible {
    /// What a matching rule decides.
    public enum Policy: Sendable, Equatable {
        /// No sign-in needed, no identity sent.
        case `public`
        /// 403 for everyone.
        case deny
        /// A signed-in person whom the policy names passes (with none listed, anyone signed in); others get 403.
        case allow(AccessPolicy)

        var name: String {
            switch self {
            case .public: "public"
            case .deny: "deny"
            case .allow: "allow"
            }
        }
    }

    /// How siwa names the rule in logs, the audit trail and `siwa rules test`: its index in `access_rules` (`3`), or
    /// `skip_auth_routes[0]`.
    public let label: String
    public let hosts: [HostPattern]
    public let paths: [PathPattern]
    public let methods: Set<String>
    public let policy: Policy
    /// An `allow` rule's clients: when not empty, only a bearer token held by one of them passes (an OpenID client's
    /// id, a native app's bundle ID, a service's name); a browser's cookie does not.
    public let clients: Set<String>
    /// A CORS preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) matching the rule passes without
    /// identity: a browser sends it without credentials, and the upstream answers which origins may call it.
    public let corsPreflight: Bool
    /// The request's `Authorization` field reaches the upstream (by default a bearer token siwa took stays with siwa:
    /// the identity headers and the assertion stand for it).
    public let passAuthorization: Bool
    /// `max_auth_age`: the person's last authentication with Apple (their session's start, when siwa verified Apple's
    /// token) must be at most this many seconds old; an older one is sent to Apple again (a browser's navigation) or
    /// told 401 `insufficient_user_authentication` with `max_age` (RFC 9470). Nil: any age the session lives.
    public let maxAuthAge: Int?

    public init(
        label: String, hosts: [HostPattern] = [], paths: [PathPattern] = [], methods: Set<String> = [], policy: Policy, clients: Set<String> = [],
        corsPreflight: Bool = false, passAuthorization: Bool = false, maxAuthAge: Int? = nil
    ) {
        self.label = label
        self.hosts = hosts
        self.paths = paths
        self.methods = methods
        self.policy = policy
        self.clients = clients
        self.corsPreflight = corsPreflight
        self.passAuthorization = passAuthorization
        self.maxAuthAge = maxAuthAge
    }

    public var description: String {
        var parts = ["rule \(label): \(policy.name)"]
        if !hosts.isEmpty { parts.append("hosts " + hosts.map(\.description).joined(separator: " ")) }
        if !methods.isEmpty { parts.append("methods " + methods.sorted().joined(separator: " ")) }
        if !paths.isEmpty { parts.append("paths " + paths.map(\.description).joined(separator: " ")) }
        if !clients.isEmpty { parts.append("clients " + clients.sorted().joined(separator: " ")) }
        if corsPreflight { parts.append("cors_preflight") }
        if passAuthorization { parts.append("pass_authorization") }
        if let maxAuthAge { parts.append("max_auth_age \(maxAuthAge) s") }
        return parts.joined(separator: ", ")
    }

    /// Whether the rule applies to `request`: true or false, or nil when it depends on what the request does not say
    /// (a check whose proxy passed no original host, path or method).
    func applies(to request: AccessRequest) -> Bool? {
        var unknown = false
        if !hosts.isEmpty {
            if let host = request.host { if !hosts.contains(where: { $0.matches(host) }) { return false } } else { unknown = true }
        }
        if !methods.isEmpty {
            if let method = request.method {
                if !methods.contains(method), !(method == "HEAD" && methods.contains("GET")) { return false }
            } else {
                unknown = true
            }
        }
        if !paths.isEmpty {
            if let path = request.path { if !paths.contains(where: { $0.matches(path) }) { return false } } else { unknown = true }
        }
        return unknown ? nil : true
    }

    /// `skip_auth_routes` entry `index` (`METHOD=regex`, `*=regex` or a bare regex) as a `public` rule.
    public init(skipRoute route: SkipAuthRoute, index: Int) {
        self.init(label: "skip_auth_routes[\(index)]", paths: [route.pattern], methods: route.method.map { [$0.rawValue] } ?? [], policy: .public)
    }

    /// The rules of `access_rules`: a JSON array of objects, in order, each numbered from 0. A bad rule is refused
    /// naming its index and field.
    public static func parse(json: String) throws(AccessConfigurationError) -> [AccessRule] {
        guard let array = try? JSONSerialization.jsonObject(with: Data(json.utf8), options: [.fragmentsAllowed]) as? [Any] else {
            throw AccessConfigurationError("access_rules: must be a JSON array of rule objects")
        }
        var rules: [AccessRule] = []
        for (index, element) in array.enumerated() {
            rules.append(try parse(element, index: index))
        }
        return rules
    }

    static let keys: Set<String> = ["hosts", "paths", "methods", "policy", "emails", "email_domains", "subs", "groups", "clients", "cors_preflight", "pass_authorization", "max_auth_age"]

    private static func parse(_ element: Any, index: Int) throws(AccessConfigurationError) -> AccessRule {
        let at = "access_rules[\(index)]"
        guard let object = element as? [String: Any] else { throw AccessConfigurationError("\(at): must be an object such as {\"paths\": [\"^/health$\"], \"policy\": \"public\"}") }
        for key in object.keys.sorted() where !keys.contains(key) {
            throw AccessConfigurationError("\(at).\(key): not a rule field; the fields are \(keys.sorted().joined(separator: ", "))")
        }
        func strings(_ key: String) throws(AccessConfigurationError) -> [String] {
            guard let value = object[key] else { return [] }
            if let one = value as? String { return [one] }
            guard let list = value as? [Any], let texts = list as? [String] else { throw AccessConfigurationError("\(at).\(key): must be an array of strings") }
            return texts
        }
        func each<T>(_ key: String, _ read: (String) throws(AccessConfigurationError) -> T) throws(AccessConfigurationError) -> [T] {
            var out: [T] = []
            for (position, text) in try strings(key).enumerated() {
                do {
                    out.append(try read(text))
                } catch {
                    throw AccessConfigurationError("\(at).\(key)[\(position)]: \(error.description)")
                }
            }
            return out
        }
        let hosts = try each("hosts") { text throws(AccessConfigurationError) in try HostPattern(text) }
        let paths = try each("paths") { text throws(AccessConfigurationError) in try PathPattern(text) }
        let methods = try each("methods") { text throws(AccessConfigurationError) -> String in
            let method = text.uppercased()
            guard !method.isEmpty, method.utf8.allSatisfy({ $0 >= 0x41 && $0 <= 0x5A }) else { throw AccessConfigurationError("\(text): not an HTTP method") }
            return method
        }
        guard let policyName = object["policy"] as? String else {
            throw AccessConfigurationError("\(at).policy: missing; one of public, deny, allow")
        }
        let emails = try each("emails") { text throws(AccessConfigurationError) -> String in
            guard case .email(let email) = try GroupMember(parsing: text) else { throw AccessConfigurationError("\(text): not an email address") }
            return email
        }
        let domains = try each("email_domains") { text throws(AccessConfigurationError) -> String in
            guard case .domain(let domain) = try GroupMember(parsing: text.hasPrefix("@") ? text : "@" + text) else { throw AccessConfigurationError("\(text): not a domain") }
            return domain
        }
        let subs = try strings("subs")
        let groups = try each("groups") { text throws(AccessConfigurationError) -> String in
            try GroupName.check(text)
            return text
        }
        let listed = !(emails.isEmpty && domains.isEmpty && subs.isEmpty && groups.isEmpty)
        let policy: Policy
        switch policyName {
        case "public": policy = .public
        case "deny": policy = .deny
        case "allow": policy = .allow(AccessPolicy(emails: emails, emailDomains: domains, subjects: subs, groups: groups))
        default: throw AccessConfigurationError("\(at).policy: \(policyName) is not one of public, deny, allow")
        }
        if listed, policyName != "allow" {
            throw AccessConfigurationError("\(at): emails, email_domains, subs and groups belong to an allow rule, not \(policyName)")
        }
        let clients = try each("clients") { text throws(AccessConfigurationError) -> String in
            guard !text.isEmpty, text.count <= 255, text.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
                throw AccessConfigurationError("\(text): not a client id or bundle ID")
            }
            return text
        }
        func flag(_ key: String) throws(AccessConfigurationError) -> Bool {
            guard let value = object[key] else { return false }
            guard let bool = value as? Bool else {
                throw AccessConfigurationError("\(at).\(key): must be true or false")
            }
            return bool
        }
        let corsPreflight = try flag("cors_preflight")
        let passAuthorization = try flag("pass_authorization")
        var maxAuthAge: Int?
        if let value = object["max_auth_age"] {
            do {
                maxAuthAge = try Self.seconds(value)
            } catch {
                throw AccessConfigurationError("\(at).max_auth_age: \(error.description)")
            }
        }
        if policyName != "allow", !clients.isEmpty || corsPreflight || passAuthorization || maxAuthAge != nil {
            throw AccessConfigurationError("\(at): clients, cors_preflight, pass_authorization and max_auth_age belong to an allow rule, not \(policyName)")
        }
        return AccessRule(
            label: String(index), hosts: hosts, paths: paths, methods: Set(methods), policy: policy, clients: Set(clients), corsPreflight: corsPreflight,
            passAuthorization: passAuthorization, maxAuthAge: maxAuthAge
        )
    }

    /// A duration in seconds: a whole number of seconds, or a text of one (`900`) or with its unit (`90s`, `15m`,
    /// `2h`, `1d`); at least one second, at most a year.
    static func seconds(_ value: Any) throws(AccessConfigurationError) -> Int {
        let seconds: Int?
        // A JSON number: Foundation reads `true` as a number too, of the C type `char` ("c"), which is no duration.
        if let number = value as? NSNumber, String(cString: number.objCType) != "c", let whole = value as? Int {
            seconds = whole
        } else if let text = value as? String {
            let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
            let units: [Character: Int] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
            if let last = trimmed.last, let unit = units[last] {
                seconds = Int(trimmed.dropLast()).flatMap { $0.multipliedReportingOverflow(by: unit).overflow ? nil : $0 * unit }
            } else {
                seconds = Int(trimmed)
            }
        } else {
            seconds = nil
        }
        guard let seconds, seconds >= 1, seconds <= 366 * 86400 else {
            throw AccessConfigurationError("\(value): a duration from 1 s to a year, in seconds (900) or with its unit (90s, 15m, 2h, 1d)")
        }
        return seconds
    }
}

/// What a rule is matched against: the request's host (lower-cased, no port), method and normalized path. For a
/// forward-auth check, what the trusted proxy says of the original request; nil when it says nothing.
public struct AccessRequest: Sendable, Hashable {
    public var host: String?
    public var method: String?
    public var path: String?
    /// A CORS preflight: `OPTIONS` with `Origin` and `Access-Control-Request-Method` (for a check, the original
    /// method as a trusted proxy says it, and the headers it passed).
    public var isPreflight: Bool

    public init(host: String?, method: String?, path: String?, isPreflight: Bool = false) {
        self.host = host.map(HostPattern.normalized)
        self.method = method.map(Self.upperCased)
        self.path = path
        self.isPreflight = isPreflight && self.method == "OPTIONS"
    }

    /// `method` upper-cased as `uppercased()` does it; a method that has no lower-case letter and is all ASCII (every
    /// method a client sends right) is returned as it is, read in one pass (every request the front judges asks).
    static func upperCased(_ method: String) -> String {
        let unchanged = method.utf8.withContiguousStorageIfAvailable { bytes in
            !bytes.contains { ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z")) || $0 >= 0x80 }
        }
        return unchanged == true ? method : method.uppercased()
    }
}
