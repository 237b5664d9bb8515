import Foundation
import HTTPTypes

/// The built-in proxy (`upstream`, `upstream_timeout_ms`, `skip_auth_routes`): where the site behind siwa is, how
/// long siwa waits for its answer, and which routes it may be reached on without signing in.
public struct UpstreamSettings: Sendable {
    /// `scheme://host[:port]` of the upstream.
    public let origin: String
    /// The upstream's host (an IPv6 address without brackets) and port, where siwa connects for a WebSocket.
    let host: String
    let port: Int
    /// Whether the upstream is reached over TLS (`https`).
    let usesTLS: Bool
    /// The path every forwarded request target is put under, without a trailing slash ("" for none).
    public let basePath: String

    /// The target the upstream's request line names for `forwarded`, the client's target as siwa passes it on
    /// (`RequestTarget.forwarded`): under `basePath`. Every carrier's request line names this, and nothing else.
    func requestTarget(_ forwarded: String) -> String {
        basePath + forwarded
    }
    /// How long siwa waits for the upstream's response head once the request is sent (a body that has started
    /// is not cut).
    public var timeoutMS: Int
    /// `upstream_idle_timeout_ms`: an answer's body, or a WebSocket, silent this long is ended.
    public var idleTimeoutMS: Int = Self.defaultIdleTimeoutMS
    /// `upstream_timeout_ms`' and `upstream_idle_timeout_ms`' defaults, the one place each is written.
    public static let defaultTimeoutMS = 30_000
    public static let defaultIdleTimeoutMS = 300_000
    /// `upstream_max_connections`: at most this many requests and WebSockets at the upstream at once (as many more
    /// wait, for at most `timeoutMS`; beyond that, 503).
    public var maxConnections: Int = Self.defaultMaxConnections
    /// `upstream_max_connections`'s default, the one place it is written.
    public static let defaultMaxConnections = 512
    /// Routes forwarded without a sign-in and without identity headers: `public` rules ahead of `access_rules`, put
    /// in force by the app (`AccessControl.install(skipRoutes:)`).
    public var skipAuthRoutes: [SkipAuthRoute]
    /// `upstream_http2`: requests go to the upstream over HTTP/2 with prior knowledge (h2c), multiplexed on one
    /// connection, trailers included (a gRPC service); an `http` upstream only. WebSockets stay on HTTP/1.1.
    public var http2 = false
    /// `strip_request_headers`: client headers never passed to the upstream, besides siwa's own list
    /// (`UpstreamForwarder.forgeable`); lowercased, `_` read as `-`.
    public var strippedHeaders: Set<String>

    /// Settings for the upstream at `url`, which must be an absolute `http` or `https` URL (no query, no user).
    public init(
        url: String, timeoutMS: Int = Self.defaultTimeoutMS, skipAuthRoutes: [SkipAuthRoute] = [], stripRequestHeaders: [String] = []
    ) throws(UpstreamSettingsError) {
        var stripped = Set<String>()
        for name in stripRequestHeaders {
            let dashed = name.lowercased().replacingOccurrences(of: "_", with: "-").trimmingCharacters(in: .whitespaces)
            guard !dashed.isEmpty, HTTPField.Name(dashed) != nil else {
                throw UpstreamSettingsError("strip_request_headers: \(name) is not a header name")
            }
            stripped.insert(dashed)
        }
        strippedHeaders = stripped
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = components.host, !host.isEmpty, components.user == nil, components.password == nil,
            components.query == nil, components.fragment == nil
        else { throw UpstreamSettingsError("must be an absolute http(s) URL such as http://127.0.0.1:3000; got \(url)") }
        let bracketed = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        origin = scheme + "://" + bracketed + (components.port.map { ":\($0)" } ?? "")
        self.host = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        usesTLS = scheme == "https"
        port = components.port ?? (usesTLS ? 443 : 80)
        basePath = components.percentEncodedPath.hasSuffix("/") ? String(components.percentEncodedPath.dropLast()) : components.percentEncodedPath
        self.timeoutMS = timeoutMS
        self.skipAuthRoutes = skipAuthRoutes
        authority = String(origin.drop { $0 != "/" }.dropFirst(2))
    }

    /// `host[:port]` of the upstream, as its `Host` header says it (made once: every proxied request sends it).
    let authority: String
}

