import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How a relying party authenticates at the provider's token endpoint, by the names OpenID Connect Discovery gives
/// them (mod_auth_openidc's `OIDCProviderTokenEndpointAuth` and Authlib's `token_endpoint_auth_method` use them too).
public enum OIDCClientAuthentication: String, Sendable, CaseIterable {
    /// `Authorization: Basic` with the client id and secret.
    case clientSecretBasic = "client_secret_basic"
    /// `client_id` and `client_secret` in the form body.
    case clientSecretPost = "client_secret_post"
    /// A public client: `client_id` alone, PKCE carries the proof.
    case publicClient = "none"
}

/// Apache httpd with mod_auth_openidc that a test started: a relying party of the provider it was given.
public struct RunningApacheOIDC: Sendable {
    /// Apache itself: port, directory, logs.
    public let server: RunningProxy
    /// The port of the echo upstream that answers every page behind Apache.
    public let upstreamPort: Int
    /// The client id Apache presents to the provider.
    public let clientID: String

    /// `http://127.0.0.1:PORT`.
    public var origin: String { server.origin }
    /// Apache's port.
    public var port: Int { server.port }
    /// The absolute URL of `path` (with its query) on Apache.
    public func url(_ path: String) -> String { server.url(path) }
    /// The redirect URI to register for this client at the provider (`OIDCRedirectURI`).
    public var redirectURI: String { server.url(ApacheOIDC.redirectPath) }
    /// The page behind mod_auth_openidc: the echo upstream's JSON, with the claims in `OIDC_CLAIM_*` headers.
    public var protectedURL: String { server.url("/protected/") }
    /// A page outside the protected location (the echo upstream), to return to after logout.
    public var loggedOutURL: String { server.url("/logged-out") }
    /// The generated `httpd.conf`, e.g. for `apache2 -t -f`.
    public var configurationFile: URL { server.directory.appendingPathComponent(ApacheOIDC.configurationFileName) }

    /// mod_auth_openidc's logout: it ends its own session, revokes the tokens at the provider's
    /// `revocation_endpoint`, then redirects to the provider's `end_session_endpoint` with `id_token_hint` and
    /// `post_logout_redirect_uri=returnTo` (register `returnTo` as a post-logout redirect URI of this client).
    public func logoutURL(returningTo returnTo: String) -> String {
        redirectURI + "?logout=" + (returnTo.addingPercentEncoding(withAllowedCharacters: ApacheOIDC.unreserved) ?? returnTo)
    }

    /// Everything Apache logged so far (its error log has mod_auth_openidc's messages), to attach to a failure.
    public func logs() -> String { server.logs() }
}

/// Runs Debian's Apache httpd (found by `ExternalTool.apache`) with Debian's mod_auth_openidc as an OpenID Connect
/// relying party of `provider`, on a free loopback port, while `body` runs; then stops it by its pid and deletes its
/// directory.
///
/// The module knows the provider by its discovery document only (`OIDCProviderMetadataURL
/// <provider>/.well-known/openid-configuration`, no endpoint set by hand), fetched at the first request that needs
/// it, so the provider may start after Apache, within `body`. It signs in with the code flow, PKCE S256 and a nonce,
/// scope `openid email profile`, authenticating at the token endpoint as `authentication` says; `REMOTE_USER` is
/// the `sub`. `/protected` needs a signed-in person; every page, protected or not, is answered by an echo upstream
/// the helper starts, so a test reads what the module passed in the echoed request headers: each claim of the
/// id_token and of userinfo as `OIDC_CLAIM_<name>` (e.g. `OIDC_CLAIM_name`, `OIDC_CLAIM_email`), the id_token's
/// payload as JSON in `OIDC_id_token_payload`, userinfo's answer as JSON in `OIDC_userinfo_json`. The redirect URI
/// is `apache.redirectURI` (`/protected/redirect_uri`); logout is `apache.logoutURL(returningTo:)`.
///
/// Register the client at the provider with `clientID`, `clientSecret` (none for `.publicClient`, which ignores it),
/// redirect URI `apache.redirectURI` and post-logout redirect URI `apache.loggedOutURL`. Apache's port is known only
/// in `body`, so a client whose registration needs it is registered there, before the provider starts:
///
/// ```swift
/// let siwaPort = try await FreePorts.reserve(1)[0]
/// try await withApacheOIDC(provider: "http://127.0.0.1:\(siwaPort)", clientID: "apache", clientSecret: secret) { apache in
///     // start siwa on siwaPort with oidc_clients [{"client_id": "apache", "client_secret": secret,
///     //   "redirect_uris": [apache.redirectURI], "post_logout_redirect_uris": [apache.loggedOutURL]}], then in Chromium:
///     // open apache.protectedURL → Apple (emulator) → back on the echo's JSON with OIDC_CLAIM_name;
///     // then apache.logoutURL(returningTo: apache.loggedOutURL).
/// }
/// ```
/// `directives` go at the end of the server configuration (e.g. `OIDCAuthRequestParams prompt=login`, `LogLevel
/// debug`), after the harness's own, so they may override them. A start that fails (a directive Apache does not
/// know, port taken three times) throws an error carrying Apache's output and error log.
public func withApacheOIDC<T: Sendable>(
    provider: String,
    clientID: String,
    clientSecret: String,
    authentication: OIDCClientAuthentication = .clientSecretBasic,
    scope: String = "openid email profile",
    directives: String = "",
    _ body: (RunningApacheOIDC) async throws -> T
) async throws -> T {
    try await ApacheOIDC.run(clientID: clientID, { directory, port, upstream, modules in
        ApacheOIDC.Settings(
            directory: directory, port: port, upstream: upstream, modules: modules, provider: provider,
            clientID: clientID, clientSecret: clientSecret, authentication: authentication, scope: scope, directives: directives
        )
    }, body)
}

/// Runs Apache httpd with mod_auth_openidc as `withApacheOIDC(provider:…)` does, but with the relying party's
/// directives given whole by `relyingParty` (for a documentation page's block, run as a reader copies it) in place of
/// the harness's: `OIDCProviderMetadataURL`, the client, `OIDCRedirectURI`, `<Location>`s, all of it. `relyingParty`
/// receives Apache's origin (`http://127.0.0.1:PORT`), known only once the port is chosen. The harness still writes
/// the server around it (port, logs, modules, the echo upstream answering every page with `ProxyPass /`), and
/// nothing of mod_auth_openidc's, so the module's defaults are the ones the page's reader gets (claims are passed
/// as `OIDC_CLAIM_*` headers and in the environment). `clientID` only labels the running Apache.
public func withApacheOIDC<T: Sendable>(
    clientID: String,
    relyingParty: (_ origin: String) -> String,
    _ body: (RunningApacheOIDC) async throws -> T
) async throws -> T {
    try await ApacheOIDC.run(clientID: clientID, { directory, port, upstream, modules in
        var settings = ApacheOIDC.Settings(
            directory: directory, port: port, upstream: upstream, modules: modules, provider: "",
            clientID: clientID, clientSecret: "", authentication: .clientSecretBasic, scope: "", directives: ""
        )
        settings.relyingParty = relyingParty("http://127.0.0.1:\(port)")
        return settings
    }, body)
}

extension ExternalTool {
    /// Debian's Apache httpd (in /usr/sbin, which is not on a non-root user's PATH); its modules, mod_auth_openidc
    /// among them, are found by `ApacheOIDC.modulesDirectory()`.
    public static let apache = ExternalTool(
        name: "apache2", environmentVariable: "SIWA_TEST_APACHE", installedBy: "apt-get install apache2 libapache2-mod-auth-openidc",
        fallbacks: [URL(fileURLWithPath: "/usr/sbin/apache2")]
    )

    /// Perl (Debian's perl-base, always there), which starts Apache with no signal blocked: see
    /// `ApacheOIDC.launcherArguments`.
    static let apacheLauncher = ExternalTool(
        name: "perl", environmentVariable: "SIWA_TEST_PERL", installedBy: "apt-get install perl-base", fallbacks: [URL(fileURLWithPath: "/usr/bin/perl")]
    )
}

/// The configuration withApacheOIDC writes.
enum ApacheOIDC {
    static let configurationFileName = "httpd.conf"

    /// Starts the echo upstream and Apache with the configuration `settings` makes for its directory, port, the
    /// upstream's port and the modules' directory; runs `body`; stops both.
    static func run<T: Sendable>(
        clientID: String,
        _ settings: (_ directory: URL, _ port: Int, _ upstream: Int, _ modules: URL) -> Settings,
        _ body: (RunningApacheOIDC) async throws -> T
    ) async throws -> T {
        let apache2 = try ExternalTool.apache.executable()
        let modules = try modulesDirectory()
        return try await withEchoUpstream { upstream in
            try await ProxyHarness.run(.apacheLauncher, { directory, port in
                ProxyLaunch(
                    files: [configurationFileName: configuration(settings(directory, port, upstream, modules))],
                    arguments: launcherArguments + [
                        apache2.path, "-f", directory.appendingPathComponent(configurationFileName).path, "-DFOREGROUND",
                    ],
                    logFiles: [configurationFileName, "error.log", "access.log"]
                )
            }, ready: { apache in
                // Apache writes its pid file after it has bound its port, so a connection then reaches this Apache.
                guard FileManager.default.fileExists(atPath: apache.directory.appendingPathComponent("httpd.pid").path) else { return false }
                return await TCPProbe.acceptsConnections(on: apache.port)
            }) { apache in
                try await body(RunningApacheOIDC(server: apache, upstreamPort: upstream, clientID: clientID))
            }
        }
    }

    static let redirectPath = "/protected/redirect_uri"
    /// RFC 3986's unreserved characters: all that a URL carried in a query parameter keeps unescaped.
    static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    /// What one configuration is made of.
    struct Settings {
        var directory: URL
        var port: Int
        var upstream: Int
        var modules: URL
        var provider: String
        var clientID: String
        var clientSecret: String
        var authentication: OIDCClientAuthentication
        var scope: String
        var directives: String
        /// The relying party's directives given whole (`withApacheOIDC(clientID:relyingParty:)`), in place of the
        /// harness's own and of every field above from `provider` on.
        var relyingParty: String?
    }

    /// Perl's arguments before Apache's command line: clear the signal mask, then exec Apache. A program started
    /// from Swift concurrency inherits the signal mask of a dispatch worker thread, which blocks SIGTERM; nginx and
    /// Go programs unblock what they wait for, Apache does not, so it would never see the SIGTERM that stops it, and
    /// its children would outlive the SIGKILL that follows.
    static let launcherArguments = [
        "-MPOSIX", "-e", #"sigprocmask(SIG_SETMASK, POSIX::SigSet->new) or die "sigprocmask: $!\n"; exec { $ARGV[0] } @ARGV or die "exec $ARGV[0]: $!\n";"#,
    ]

    /// Where Apache's shared modules are: `$SIWA_TEST_APACHE_MODULES` (scripts/test exports it), else Debian's
    /// directory; an error saying how to install mod_auth_openidc when it is not there.
    static func modulesDirectory() throws -> URL {
        let configured = ProcessInfo.processInfo.environment["SIWA_TEST_APACHE_MODULES"].flatMap { $0.isEmpty ? nil : $0 }
        let directory = URL(fileURLWithPath: configured ?? "/usr/lib/apache2/modules", isDirectory: true)
        guard FileManager.default.fileExists(atPath: directory.appendingPathComponent("mod_auth_openidc.so").path) else {
            throw ExternalToolError("mod_auth_openidc.so is not in \(directory.path). Run ./scripts/test, which installs it (apt-get install libapache2-mod-auth-openidc) and exports SIWA_TEST_APACHE_MODULES.")
        }
        return directory
    }

    /// The modules loaded, by Apache's module name and file; Debian's /etc/apache2 is not read.
    static let modules: [(name: String, file: String)] = [
        ("mpm_event_module", "mod_mpm_event.so"),
        ("authn_core_module", "mod_authn_core.so"),
        ("authz_core_module", "mod_authz_core.so"),
        ("authz_user_module", "mod_authz_user.so"),
        ("headers_module", "mod_headers.so"),
        ("proxy_module", "mod_proxy.so"),
        ("proxy_http_module", "mod_proxy_http.so"),
        ("auth_openidc_module", "mod_auth_openidc.so"),
    ]

    /// A value as one argument of a directive: in double quotes, with `\` and `"` escaped.
    static func quoted(_ value: String) -> String {
        "\"" + value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }

    /// The whole `httpd.conf`, every path inside the test's directory.
    static func configuration(_ settings: Settings) -> String {
        let path = settings.directory.path
        let loads = modules.map { "LoadModule \($0.name) \(quoted(settings.modules.appendingPathComponent($0.file).path))" }.joined(separator: "\n")
        // As root, Apache's children must run as another user: Debian's www-data (it only has to reach the loopback).
        let user = geteuid() == 0 ? "User www-data\nGroup www-data\n" : ""
        return """
            # Written for one test by TestSupport's withApacheOIDC; deleted with its directory.
            ServerRoot \(quoted(path))
            ServerName 127.0.0.1
            Listen 127.0.0.1:\(settings.port)
            PidFile \(quoted(path + "/httpd.pid"))
            DefaultRuntimeDir \(quoted(path))
            ErrorLog \(quoted(path + "/error.log"))
            LogLevel warn auth_openidc:info
            LogFormat "%h \\"%r\\" %>s %b user=%u" harness
            CustomLog \(quoted(path + "/access.log")) harness
            \(loads)
            \(user)StartServers 1
            Timeout 30

            # Every page is the echo upstream's.
            ProxyPreserveHost On
            ProxyPass / http://127.0.0.1:\(settings.upstream)/

            \(settings.relyingParty ?? relyingParty(settings))

            \(settings.directives)

            """
    }

    /// The harness's relying party: the provider by its discovery document only; /protected needs a signed-in person.
    static func relyingParty(_ settings: Settings) -> String {
        let origin = "http://127.0.0.1:\(settings.port)"
        let provider = settings.provider.hasSuffix("/") ? String(settings.provider.dropLast()) : settings.provider
        // A public client has no secret, and the module takes no empty one.
        let secret = settings.authentication == .publicClient ? "" : "OIDCClientSecret \(quoted(settings.clientSecret))\n"
        return """
            OIDCProviderMetadataURL \(quoted(provider + "/.well-known/openid-configuration"))
            OIDCClientID \(quoted(settings.clientID))
            \(secret)OIDCProviderTokenEndpointAuth \(settings.authentication.rawValue)
            OIDCRedirectURI \(quoted(origin + redirectPath))
            OIDCCryptoPassphrase \(quoted(UUID().uuidString))
            OIDCScope \(quoted(settings.scope))
            OIDCPKCEMethod S256
            OIDCRemoteUserClaim sub
            OIDCPassClaimsAs headers
            OIDCPassIDTokenAs claims payload
            OIDCPassUserInfoAs claims json
            # A test's HTTP client and its browser may differ in User-Agent: the state is bound to the cookie only.
            OIDCStateInputHeaders none
            OIDCHTTPTimeoutShort 10
            OIDCHTTPTimeoutLong 10
            <Location /protected>
                AuthType openid-connect
                Require valid-user
            </Location>
            """
    }
}
