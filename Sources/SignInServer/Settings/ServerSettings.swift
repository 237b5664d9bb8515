import AppleSignIn
import Foundation

/// How the web front runs: where it listens, what it stores in, whom it talks to.
public struct ServerSettings: Sendable {
    /// Local mode (emulated Apple, plain HTTP on loopback) or Apple mode (real Apple, HTTPS).
    public enum Mode: String, Sendable {
        /// The emulator stands in for Apple.
        case local
        /// appleid.apple.com.
        case apple
    }

    /// Which mode.
    public var mode: Mode
    /// Listen address.
    public var host: String
    /// Listen port.
    public var port: Int
    /// `socket`: the path of a Unix socket siwa listens on instead of `host`:`port`, for a proxy on the same machine
    /// (nginx's `server unix:…`). Its peers are trusted as proxies (`TrustedProxies.socketPeers`); `public_url`
    /// says where browsers reach siwa through that proxy.
    public var socketPath: String?
    /// The store: a SQLite path.
    public var database: String
    /// Apple (or emulator) credentials and trust.
    public var apple: AppleSignInConfiguration
    /// How long a session lasts.
    public var sessionLifetime: TimeInterval
    /// The sign-in button.
    public var button: ButtonSettings
    /// Where the Mustache templates are.
    public var templatesDirectory: String
    /// Where static files are.
    public var publicDirectory: String
    /// Timeout of every call to Apple, in milliseconds.
    public var appleTimeoutMS: Int
    /// Sign-in starts and callbacks allowed per client and minute; 0 (the library default) disables the
    /// limit, `siwa serve` sets 60 unless configured.
    public var rateLimitPerMinute: Int = 0
    /// Addresses (or CIDR ranges) of reverse proxies whose `X-Forwarded-*` headers are believed (`TrustedProxies`;
    /// `siwa serve` refuses an entry that is neither).
    public var trustedProxies: [String] = []

    /// `trustedProxies` read; an entry that is not an address or a range trusts nothing (`siwa serve` refuses it
    /// before this is asked).
    var proxies: TrustedProxies {
        (try? TrustedProxies(trustedProxies, socketPeers: socketPath != nil)) ?? .none
    }
    /// Seconds between runs of the refresh-check and revocation-queue service.
    public var lifecycleIntervalSeconds: Int64 = 300
    /// AES-256 keys (base64) sealing refresh tokens at rest, newest first (default: one ephemeral key, for tests).
    public var dataKeys: [String]

    /// The front: `public_url`, `allowed_redirect_domains`, the access policy (default: the return URL's origin,
    /// no redirect domains, anyone).
    public var front: FrontSettings

    /// `cookie_domain`: the parent domain (without a leading dot) the session cookie is set for, so sibling hosts
    /// behind one siwa share the session; nil: the cookie is for siwa's host alone.
    public var cookieDomain: String?

    /// Whether a cookie set with `Domain=domain` reaches `host`: the domain itself or one of its subdomains.
    public static func cookieDomain(_ domain: String, covers host: String) -> Bool {
        let domain = (domain.hasPrefix(".") ? String(domain.dropFirst()) : domain).lowercased()
        let host = host.lowercased()
        return host == domain || host.hasSuffix("." + domain)
    }

    /// siwa alone at the edge: HTTPS with its own certificates and HTTP/2 (`tls_domains`, `tls_cert_file`); nil: plain
    /// HTTP, behind a proxy that terminates TLS.
    public var edge: EdgeSettings?

    /// `hsts_max_age`: seconds of `Strict-Transport-Security` on siwa's own answers over HTTPS; 0 (the default): none.
    public var hstsMaxAge: Int = Self.defaultHSTSMaxAge
    public static let defaultHSTSMaxAge = 0

    /// `check_cache_seconds`: how long a session looked up stays in memory (0: every lookup asks the store).
    public var checkCacheSeconds: Int = Self.defaultCheckCacheSeconds
    /// `check_cache_seconds`' default, written once, with the cache it sizes.
    public static let defaultCheckCacheSeconds = SessionCache.defaultLifetimeSeconds
    /// `host`, `port`, `db`, `session_lifetime` (seconds), `apple_timeout_ms` and `rate_limit_per_minute` unset in
    /// `siwa serve`, each written only here (the settings' initializer, `siwa serve`'s parse, the doctor and the
    /// configuration reference read them). The library's own `rateLimitPerMinute` is 0, no limit, unless set.
    public static let defaultHost = "127.0.0.1"
    public static let defaultPort = 8080
    public static let defaultDatabase = "./siwa.sqlite"
    public static let defaultSessionLifetime = 7 * 86_400
    public static let defaultAppleTimeoutMS = 10_000
    public static let serveRateLimitPerMinute = 60
    /// `admin_groups`: the groups whose members may use the operator's console (`/auth/admin`); empty: no console.
    public var adminGroups: [String] = []
    /// `event_webhooks`: the apps told of account events (issue 47, part B).
    public var eventWebhooks: [EventWebhook] = []
    /// `audit_log`: the file that gets one JSON object per audit event (`AuditTrail`); nil: the log only.
    public var auditLogPath: String?
    /// `client_header_timeout_ms`, `client_idle_timeout_ms`, `client_body_timeout_ms`, `client_send_timeout_ms`: how
    /// long a request head may take to arrive, a kept-alive connection may wait for its next request, a body may go
    /// without a byte, and an answer may wait for a client that takes none of it.
    public var clientLimits = ClientLimits()

    /// The OpenID Provider: issuer (`public_url`) and the clients of `oidc_clients`.
    public var provider: ProviderSettings

    /// The built-in proxy (`upstream`, `upstream_timeout_ms`, `skip_auth_routes`); nil when siwa fronts no upstream.
    public var upstream: UpstreamSettings?

    /// The return URL registered with Apple (the first one configured).
    public var returnURL: URL { apple.returnURLs[0] }

    /// Whether cookies must be `Secure` (and use the `__Host-` prefix): whenever the return URL is HTTPS.
    public var secureCookies: Bool { returnURL.scheme == "https" }

    /// The site's origin (scheme, host, port) as the return URL names it.
    public var origin: String { Self.origin(of: returnURL) }

    /// `scheme://host[:port]` of `url`.
    public static func origin(of url: URL) -> String {
        "\(url.scheme ?? "http")://" + authority(of: url)
    }

    /// `host[:port]` of `url`.
    static func authority(of url: URL) -> String {
        (url.host ?? "127.0.0.1") + (url.port.map { ":\($0)" } ?? "")
    }

    /// Creates settings.
    public init(
        mode: Mode, host: String = Self.defaultHost, port: Int = Self.defaultPort, database: String = Self.defaultDatabase,
        apple: AppleSignInConfiguration, sessionLifetime: TimeInterval = TimeInterval(Self.defaultSessionLifetime), button: ButtonSettings = ButtonSettings(),
        templatesDirectory: String = ResourceLocator.directory("Templates"), publicDirectory: String = ResourceLocator.directory("Public"),
        appleTimeoutMS: Int = Self.defaultAppleTimeoutMS, dataKeys: [String] = [TokenCipher.generateKey()]
    ) {
        self.mode = mode
        self.host = host
        self.port = port
        self.database = database
        self.apple = apple
        self.sessionLifetime = sessionLifetime
        self.button = button
        self.templatesDirectory = templatesDirectory
        self.publicDirectory = publicDirectory
        self.appleTimeoutMS = appleTimeoutMS
        self.dataKeys = dataKeys
        front = FrontSettings(publicOrigin: Self.origin(of: apple.returnURLs[0]))
        provider = ProviderSettings(issuer: Self.origin(of: apple.returnURLs[0]))
    }
}

/// Finds `Templates/` and `Public/`: in the working directory when there, else next to the package sources
/// (so `swift run` and `swift test` work from any directory).
public enum ResourceLocator {
    /// The directory `name` to use.
    public static func directory(_ name: String) -> String {
        let local = FileManager.default.currentDirectoryPath + "/" + name
        if FileManager.default.fileExists(atPath: local) { return local }
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return packageRoot.appendingPathComponent(name).path
    }
}
