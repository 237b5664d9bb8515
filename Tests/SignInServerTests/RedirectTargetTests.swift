@testable import SignInServer
import Testing
import TestSupport

/// Where the plain port sends a request when siwa terminates TLS (`RedirectTarget`): always a host siwa serves over
/// HTTPS, whatever `Host` the client sent.
@Suite("The plain port's redirect: never a host a client made up")
struct RedirectTargetTests {
    static let publicOrigin = "https://public.example.com:8443"

    /// The host of an `https://host[:port]` origin.
    static func host(of origin: String) -> String {
        let rest = origin.dropFirst("https://".count)
        return String(rest.split(separator: ":", maxSplits: 1).first ?? "")
    }

    @Test("a table of Host values, with tls_domains and without (the certificate's names, a wildcard's covering one label): upper case, a port, a trailing dot, an address literal, the wildcard itself, a name under another label")
    func table() {
        let domains = ["auth.example.com", "www.example.com"]
        let certificates = ["auth.example.com", "*.apps.example.com"]
        let cases: [(String?, [String], String)] = [
            ("AUTH.Example.COM:80", domains, "https://auth.example.com:8443"),
            ("www.example.com", domains, "https://www.example.com:8443"),
            ("auth.example.com.", domains, "https://auth.example.com:8443"),
            ("[::1]:80", domains, "https://auth.example.com:8443"),
            ("made-up.example.net", domains, "https://auth.example.com:8443"),
            (nil, domains, "https://auth.example.com:8443"),
            ("a.apps.example.com:80", [], "https://a.apps.example.com:8443"),
            ("A.Apps.Example.com", [], "https://a.apps.example.com:8443"),
            ("*.apps.example.com", [], "https://public.example.com:8443"),
            ("x.a.apps.example.com", [], "https://public.example.com:8443"),
            ("apps.example.com", [], "https://public.example.com:8443"),
            ("a.apps.example.com.", [], "https://public.example.com:8443"),
            ("-a.apps.example.com", [], "https://public.example.com:8443"),
            ("evil.com@a.apps.example.com", [], "https://public.example.com:8443"),
        ]
        for (authority, configured, expected) in cases {
            let origin = RedirectTarget.origin(authority: authority, domains: configured, certificates: configured.isEmpty ? certificates : [], httpsPort: 8443, publicOrigin: Self.publicOrigin)
            #expect(origin == expected, "\(authority ?? "no Host") with tls_domains \(configured)")
        }
        #expect(RedirectTarget.origin(authority: "auth.example.com", domains: domains, certificates: [], httpsPort: 443, publicOrigin: Self.publicOrigin) == "https://auth.example.com")
    }

    @Test("2000 generated Host values (letters of both cases, digits, hyphens, dots, wildcards, ports, brackets, at-signs, slashes, percent signs, spaces, non-ASCII): the redirect's host is always a DNS name siwa serves, in lower case: one of tls_domains, else one the certificates cover, else public_url's")
    func generated() {
        var generator = SplitMix64(seed: 36)
        let pieces = ["a", "B", "auth", "AUTH", "www", "apps", "example", "com", ".", ".", "-", "*", "_", ":", ":80", "[", "]", "::1", "@", "/", "%2e", " ", "é", "0", "9"]
        let certificates = ["auth.example.com", "*.apps.example.com"]
        let suffixes = ["", ".example.com", ".apps.example.com", ".example.com.", ".apps.example.com:80"]
        for index in 0..<2000 {
            var authority = ""
            authority += generator.joined(pieces, count: 1 + Int(generator.next() % 6))
            authority += generator.pick(suffixes)
            let withDomains = index % 2 == 0
            let domains = withDomains ? ["auth.example.com", "www.example.com"] : []
            let origin = RedirectTarget.origin(authority: authority, domains: domains, certificates: withDomains ? [] : certificates, httpsPort: 8443, publicOrigin: Self.publicOrigin)
            let host = Self.host(of: origin)
            #expect(origin.hasPrefix("https://") && origin.hasSuffix(":8443"), "\(authority): \(origin)")
            #expect(RedirectTarget.isHostName(host) && host == host.lowercased(), "\(authority): \(origin)")
            let served = withDomains ? domains.contains(host) : (certificates.contains(host) || certificates.contains(EdgeTLS.wildcard(of: host)) || host == "public.example.com")
            #expect(served, "\(authority) (tls_domains \(domains)): \(origin)")
        }
    }
}
