import Foundation

/// Where a sign-in or sign-out may send the browser afterwards (`rd`): an absolute URL that is `https` (or
/// `http` on a loopback host: `localhost`, `*.localhost`, `127.0.0.1`, `::1`) on a host of `allowed_redirect_domains`. An entry is a host name without a port:
/// `app.example.com` matches that host on any port, `.example.com` matches its subdomains (not itself).
public struct RedirectPolicy: Sendable, Equatable {
    public var domains: [String]

    public init(domains: [String]) {
        self.domains = domains.map { $0.lowercased() }.filter { !$0.isEmpty }
    }

    /// This policy with the host of `origin` (`scheme://host[:port]`) allowed too: siwa's own, which a sign-in
    /// started by the built-in proxy returns to.
    public func allowing(hostOf origin: String) -> RedirectPolicy {
        guard let host = URLComponents(string: origin)?.host?.lowercased(), !host.isEmpty, !domains.contains(host) else { return self }
        return RedirectPolicy(domains: domains + [host])
    }

    /// Whether `host` names this machine: `localhost` and its subdomains are loopback by RFC 6761, as are
    /// 127.0.0.1 and ::1.
    public static func isLoopback(host: String) -> Bool {
        let host = host.lowercased()
        return host == "localhost" || host.hasSuffix(".localhost") || host == "127.0.0.1" || host == "[::1]" || host == "::1"
    }

    /// `candidate` when it may be followed, nil otherwise.
    public func allowed(_ candidate: String?) -> String? {
        guard let candidate, !candidate.isEmpty, candidate.utf8.count <= 2048,
            !candidate.unicodeScalars.contains(where: { $0.value < 0x21 || $0.value == 0x7F || $0 == "\\" }),
            let components = URLComponents(string: candidate), let scheme = components.scheme?.lowercased(),
            let host = components.host?.lowercased(), !host.isEmpty, components.user == nil, components.password == nil
        else { return nil }
        guard scheme == "https" || (scheme == "http" && Self.isLoopback(host: host)) else { return nil }
        let matches = domains.contains { entry in
            entry.hasPrefix(".") ? host.hasSuffix(entry) && host.count > entry.count : host == entry
        }
        return matches ? candidate : nil
    }
}
