import HTTPTypes

/// One entry of `skip_auth_routes`: `METHOD=regex`, `*=regex` or a bare regex (any method), a shorthand for a
/// `public` rule of `access_rules` (`AccessRule(skipRoute:index:)`), which come before the rules of `access_rules`.
/// The regex is searched in the request's normalized path (`PathPattern`).
public struct SkipAuthRoute: Sendable, CustomStringConvertible {
    /// The method it applies to; nil for any.
    public let method: HTTPRequest.Method?
    /// The entry as configured.
    public let description: String
    let pattern: PathPattern

    /// Parses `entry`; a regex that does not compile is refused with the compiler's message.
    public init(_ entry: String) throws(UpstreamSettingsError) {
        description = entry
        var source = Substring(entry)
        var method: HTTPRequest.Method?
        if let equals = entry.firstIndex(of: "=") {
            let prefix = entry[..<equals]
            // The part before `=` is a method only when it looks like one: a bare regex may contain `=` too.
            if prefix == "*" {
                source = entry[entry.index(after: equals)...]
            } else if !prefix.isEmpty, prefix.allSatisfy({ $0.isASCII && $0.isLetter }), let named = HTTPRequest.Method(prefix.uppercased()) {
                method = named
                source = entry[entry.index(after: equals)...]
            }
        }
        self.method = method
        do {
            pattern = try PathPattern(String(source))
        } catch {
            throw UpstreamSettingsError("\(entry): \(error.description)")
        }
    }
}

/// A value of the proxy's settings that cannot be used, and why.
public struct UpstreamSettingsError: Error, CustomStringConvertible {
    /// What is wrong, with the value at fault.
    public let description: String

    init(_ description: String) {
        self.description = description
    }
}
