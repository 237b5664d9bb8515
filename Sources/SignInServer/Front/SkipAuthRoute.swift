import HTTPTypes

/// One entry of `skip_auth_routes`: `METHOD=regex`, `*=regex` or a bare regex (any method). The regex is searched
/// in the request's normalized path (`RequestTarget.path`: dot-segments removed, percent-encoded but for unreserved
/// characters; never its query), so anchor it (`^/health$`) to mean the whole path.
public struct SkipAuthRoute: Sendable, CustomStringConvertible {
    /// The method it applies to; nil for any.
    public let method: HTTPRequest.Method?
    /// The entry as configured.
    public let description: String
    // Not Sendable only because a match's output (`AnyRegexOutput`) may hold any value; the regex itself is
    // immutable once compiled and is only matched against, each match making its own output.
    nonisolated(unsafe) private let pattern: Regex<AnyRegexOutput>

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
        guard !source.isEmpty else { throw UpstreamSettingsError("\(entry): the regex is empty (write ^/$ for the root alone)") }
        do {
            pattern = try Regex(String(source))
        } catch {
            throw UpstreamSettingsError("\(entry): the regex does not compile: \(error)")
        }
    }

    func matches(method: HTTPRequest.Method, path: String) -> Bool {
        if let expected = self.method, expected != method, !(expected == .get && method == .head) { return false }
        return (try? pattern.firstMatch(in: path)) != nil
    }
}
