import AppleSignIn
import SignInServer

/// One configuration key of `siwa serve` and `siwa doctor`: a file key, `SIWA_<KEY>` in the environment (and in
/// `.env`), and the flag `--<key-with-dashes>`. docs/configuration.md is made from these
/// (`siwa config reference`, tested to be its output).
struct SettingKey: Sendable, Hashable {
    /// The name in the config file, e.g. `data_key`.
    let name: String
    /// Whether its values are secret: redacted wherever configuration is printed or logged.
    let isSecret: Bool
    /// Whether it holds a list: comma-separated on the command line and in the environment, a JSON array in the file.
    let isList: Bool

    /// Whether it holds JSON (an array of objects): JSON text on the command line and in the environment, plain
    /// JSON in the file.
    let isJSON: Bool

    /// The default as the configuration reference shows it (Markdown), and what the key does.
    let defaultText: String
    let help: String

    init(_ name: String, secret: Bool = false, list: Bool = false, json: Bool = false, default defaultText: String = "none", help: String = "") {
        self.name = name
        self.isSecret = secret
        self.isList = list
        self.isJSON = json
        self.defaultText = defaultText
        self.help = help
    }

    /// `SIWA_DATA_KEY`.
    var environmentName: String { "SIWA_" + name.uppercased() }
    /// `--data-key`.
    var flag: String { "--" + name.replacingOccurrences(of: "_", with: "-") }

    /// Every key, in the README's order.
    static let all: [SettingKey] = [
        SettingKey("host", default: "`\(ServerSettings.defaultHost)`", help: "listen address"),
        SettingKey("port", default: "`\(ServerSettings.defaultPort)`; `\(EdgeSettings.defaultPlainPort)` with `tls_domains` or `tls_cert_file`", help: "listen port (with siwa's own TLS: the plain port, which only redirects to HTTPS and answers ACME's HTTP-01 and the health checks)"),
        SettingKey("socket", default: "—", help: "a Unix socket to listen on instead of `host`:`port`, for nginx or Caddy on the same machine (faster than loopback TCP); needs `public_url`; its peers are trusted as proxies (the socket is mode 0660: add the proxy's user to siwa's group)"),
        SettingKey("db", default: "`\(ServerSettings.defaultDatabase)`", help: "SQLite database path"),
        SettingKey("tls_domains", list: true, default: "none", help: "siwa alone at the edge (see [siwa alone at the edge](edge.md)): the DNS names it serves HTTPS for, obtaining their certificate by ACME unless `tls_cert_file` is given; the first one answers a TLS hello without SNI, a hello for any other name gets an alert. With it, `port` (80 by default then) serves only the redirect to HTTPS, ACME's HTTP-01 and the health checks"),
        SettingKey("https_port", default: "`\(EdgeSettings.defaultHTTPSPort)`", help: "where HTTPS (HTTP/1.1 and HTTP/2) is served when `tls_domains` or `tls_cert_file` is set"),
        SettingKey("tls_cert_file", default: "none", help: "a certificate chain (PEM, leaf first) the operator brings instead of ACME, with `tls_key_file`; reloaded when the files change and on SIGHUP, without dropping connections"),
        SettingKey("tls_key_file", default: "none", help: "the private key (PEM) of `tls_cert_file`"),
        SettingKey("acme_directory", default: "Let's Encrypt's", help: "the ACME server's directory URL (`https://acme-v02.api.letsencrypt.org/directory`; for a first try its staging directory `https://acme-staging-v02.api.letsencrypt.org/directory`)"),
        SettingKey("acme_email", default: "none", help: "the ACME account's contact, for the CA's expiry notices"),
        SettingKey("acme_ca_file", default: "the system's", help: "PEM of the CA to trust for a private ACME server (step-ca, pebble)"),
        SettingKey("acme_challenges", list: true, default: "`\(ACMESettings().challenges.map(\.rawValue).joined(separator: ","))`", help: "the challenges siwa answers, in the order tried: `tls-alpn-01` on `https_port`, `http-01` on `port`; list only what the firewall lets the CA reach"),
        SettingKey("acme_eab_kid", default: "none", help: "the key ID of the external account binding (RFC 8555 7.3.4) a CA requires to open an account (ZeroSSL, Google Trust Services, a step-ca that asks for one), with `acme_eab_hmac_key`"),
        SettingKey("acme_eab_hmac_key", secret: true, default: "none", help: "the HMAC key your CA gives with `acme_eab_kid`, base64url as the CA shows it; secret, redacted wherever configuration is printed"),
        SettingKey("hsts_max_age", default: "`\(ServerSettings.defaultHSTSMaxAge)`", help: "seconds of `Strict-Transport-Security` on siwa's own answers over HTTPS (0: none; 31536000 once HTTPS is settled for good)"),
        SettingKey("h2_max_concurrent_streams", default: "`\(HTTP2Limits.defaultMaxConcurrentStreams)`", help: "HTTP/2: streams a client may have open at once"),
        SettingKey("h2_max_header_list_size", default: "`\(HTTP2Limits.defaultMaxHeaderListSize)`", help: "HTTP/2: the largest header list (decoded) a request may carry"),
        SettingKey("h2_stall_timeout_ms", default: "`\(HTTP2Limits.defaultStallTimeoutMS)`", help: "HTTP/2: a stream that cannot write this long (the client's window stays shut) ends its connection"),
        SettingKey("h2_max_resets", default: "`\(HTTP2Limits.defaultMaxResets)`", help: "HTTP/2: streams a client may reset, or make siwa reset with malformed requests, in 30 seconds before its connection ends (rapid reset; MadeYouReset)"),
        SettingKey("h2_max_control_frames", default: "`\(HTTP2Limits.defaultMaxControlFrames)`", help: "HTTP/2: SETTINGS, PING and PRIORITY frames a client may send in 30 seconds before its connection ends"),
        SettingKey("emulator_port", default: "`\(ServePlan.defaultEmulatorPort)`", help: "in-process emulator port (local mode)"),
        SettingKey("team_id", default: "—", help: "Team ID (Apple mode)"),
        SettingKey("key_id", default: "—", help: "Key ID of the `.p8` key (Apple mode)"),
        SettingKey("key_file", default: "—", help: "path of `AuthKey_<KEYID>.p8` (Apple mode)"),
        SettingKey("services_id", default: "—", help: "Services ID, the web `client_id` (Apple mode)"),
        SettingKey("return_url", list: true, default: "—", help: "return URL(s), comma-separated, exactly as registered; the first is used"),
        SettingKey("extra_audiences", list: true, default: "none", help: "bundle IDs of native apps whose tokens are accepted"),
        SettingKey("apple_base_url", default: "`\(AppleSignInConfiguration.appleBaseURL)`", help: "where Apple is (point it at an emulator)"),
        SettingKey("accepted_issuers", list: true, default: "`\(AppleSignInConfiguration.appleBaseURL)`", help: "accepted `iss` values (also in local mode: the emulator signs as Apple)"),
        SettingKey("client_secret_lifetime", default: "`\(AppleSignInConfiguration.defaultClientSecretLifetime)`", help: "seconds, at most 15777000"),
        SettingKey("session_lifetime", default: "`\(ServerSettings.defaultSessionLifetime)`", help: "seconds"),
        SettingKey("button_style", default: "`\(ButtonSettings.defaultStyle.rawValue)`", help: "`black`, `white`, `white-outline`"),
        SettingKey("button_title", default: "`\(ButtonSettings.defaultTitle.rawValue)`", help: "`sign-in`, `continue`, `sign-up`"),
        SettingKey("button_height", default: "`\(ButtonSettings.defaultHeight)`", help: "CSS pixels, 30–64"),
        SettingKey("button_corner_radius", default: "`\(ButtonSettings.defaultCornerRadius)`", help: "CSS pixels"),
        SettingKey("apple_timeout_ms", default: "`\(ServerSettings.defaultAppleTimeoutMS)`", help: "timeout of every call to Apple"),
        SettingKey("log_level", default: "`\(ServePlan.defaultLogLevel)`", help: "`trace` … `critical`"),
        SettingKey("event_loops", default: "the number of cores", help: "threads that serve connections, as nginx's `worker_processes` (1–256): on a machine shared with the upstream or the proxy in front, fewer loops than cores trade some throughput for a shorter tail (docs/benchmarks.md, \"The p99 and the number of event loops\")"),
        SettingKey("data_key", secret: true, list: true, default: "local mode: created in `<db>.key` (mode 0600)", help: "AES-256 keys (base64, 32 bytes), comma-separated, newest first; required in Apple mode. New tokens are sealed with the first, all listed keys open. Refresh tokens sealed with a key you remove can no longer be read: their users' refresh checks and revocation on deletion are skipped (deletion itself still completes)"),
        SettingKey("rate_limit_per_minute", default: "`\(ServerSettings.serveRateLimitPerMinute)`", help: "sign-in starts, callbacks and native sign-ins per client and minute (0: off)"),
        SettingKey("trusted_proxies", list: true, default: "none", help: "proxies whose `X-Forwarded-*` headers are believed: IP addresses or CIDR ranges (`127.0.0.1`, `10.0.0.0/8`, `::1`, `fd00::/8`); a peer seen as `::ffff:10.0.0.7` (siwa on `--host ::`) matches as `10.0.0.7`; anything else stops `serve`"),
        SettingKey("notifications_url", default: "—", help: "checked by `siwa doctor` (the URL registered for server-to-server notifications)"),
        SettingKey("public_url", default: "the return URL's origin", help: "where browsers reach siwa (`https://auth.example.com`): the base of every absolute URL the front writes (the forward-auth redirect to the sign-in, the denied page's sign-out link, the assertion's `iss`; in local mode the return URL); `siwa doctor` checks it against the return URL's host"),
        SettingKey("allowed_redirect_domains", list: true, default: "none", help: "hosts an `rd` URL may name after sign-in or sign-out (`app.example.com` on any port; `.example.com` for its subdomains; no `*` or port: refused at start); `https` only, or `http` on loopback. `public_url`'s own host is always allowed"),
        SettingKey("allowed_emails", list: true, default: "anyone", help: "forward-auth: these emails may pass (any rule passing is enough; all three empty = any Apple user)"),
        SettingKey("allowed_email_domains", list: true, default: "anyone", help: "forward-auth: emails on these domains may pass; a private relay address only when `privaterelay.appleid.com` is listed"),
        SettingKey("allowed_subs", list: true, default: "anyone", help: "forward-auth: these Apple `sub`s may pass"),
        SettingKey("allowed_groups", list: true, default: "anyone", help: "members of these groups may pass (with the three above, the global policy: it decides a request no rule of `access_rules` matches)"),
        SettingKey("groups", json: true, default: "none", help: "groups declared in configuration: a JSON object of names (`[a-z0-9][a-z0-9_.-]*`) to members (`ada@example.com`, `@example.com`, `sub:<Apple sub>`), JSON text in the environment and on the command line; joined with the store's (`siwa groups`); reloaded on SIGHUP and when the file changes"),
        SettingKey("access_rules", json: true, default: "none", help: "an ordered JSON array of rules, the first match decides (see [Who may enter which app](access.md)): `hosts`, `paths`, `methods`, `policy` (`public`, `deny`, `allow` with `emails`, `email_domains`, `subs`, `groups`, `clients`), `cors_preflight`, `pass_authorization`, `max_auth_age` (a sign-in at most this old: `900`, `\"15m\"`); a bad rule stops the start naming its index and field; reloaded on SIGHUP and when the file changes"),
        SettingKey("audit_log", default: "none", help: "a file that gets one JSON object per audit event (sign-ins, sign-outs, denied decisions, changes of groups, rules and clients), appended, reopened on SIGHUP"),
        SettingKey("event_webhooks", secret: true, json: true, default: "none", help: "the apps told of account events, a JSON array of `{\"name\", \"url\", \"secret\": \"whsec_…\", \"events\": […]}` with events among person.joined, person.deleted, person.consent_revoked, person.email_disabled, person.email_enabled, person.groups_changed; signed by the Standard Webhooks convention (see [Invitations and account events](people.md)); JSON text in the environment and on the command line, plain JSON in the file; secret, redacted wherever configuration is printed"),
        SettingKey("invitation_contact", default: "none", help: "whom a person a rule refuses may ask for an invitation (an address, a team), named on the 403 page, which says that access comes by invitation"),
        SettingKey("admin_groups", list: true, default: "none", help: "the groups whose members may use the operator's console at `/auth/admin` (people, their sessions, groups, OpenID clients, the latest audit events); empty: no console"),
        SettingKey("upstream", default: "none", help: "the built-in proxy: the site siwa stands in front of (`http://127.0.0.1:3000`, an absolute `http`/`https` URL); every path siwa does not own is passed to it for people the access policy lets in (see The built-in proxy)"),
        SettingKey("upstream_http2", default: "`false`", help: "speak HTTP/2 to the upstream, with prior knowledge (h2c, an `http` upstream): every request a stream of one connection, trailers passed on, so a gRPC service works behind siwa; WebSockets stay on HTTP/1.1"),
        SettingKey("upstream_timeout_ms", default: "`\(UpstreamSettings.defaultTimeoutMS)`", help: "how long siwa waits for the upstream's response headers once the request has been sent (then 504); a body that has started is never cut"),
        SettingKey("skip_auth_routes", list: true, default: "none", help: "routes passed to the upstream without a sign-in and without identity headers: `METHOD=regex`, `*=regex` or a bare regex, searched in the normalized path (see \"What the door refuses\" in [In front of a site](front.md); anchor it: `GET=^/health$`); in the config file a JSON array, which is how a regex with a comma is written"),
        SettingKey("strip_request_headers", list: true, default: "none", help: "more client headers never passed to the upstream, besides siwa's own list (see \"What the door refuses\"); `_` and `-` are one"),
        SettingKey("upstream_idle_timeout_ms", default: "`\(UpstreamSettings.defaultIdleTimeoutMS)`", help: "an upstream answer's body, or a WebSocket, silent this long (no byte either way) is ended"),
        SettingKey("upstream_max_connections", default: "`\(UpstreamSettings.defaultMaxConnections)`", help: "at most this many requests and WebSockets at the upstream at once; as many more wait in line, for at most `upstream_timeout_ms`; past that, the 503 page"),
        SettingKey("client_header_timeout_ms", default: "`\(ClientLimits.defaultHeaderTimeoutMS)`", help: "a request head must arrive whole within this of its first byte, or the client gets 408 and the connection ends"),
        SettingKey("client_idle_timeout_ms", default: "`\(ClientLimits.defaultIdleTimeoutMS)`", help: "a kept-alive client connection with no request in progress ends after this"),
        SettingKey("client_body_timeout_ms", default: "`\(ClientLimits.defaultBodyTimeoutMS)`", help: "a request body may go this long without a byte while siwa reads it and before its answer has begun, or the client gets 408 (over HTTP/2 its stream ends, the connection stays)"),
        SettingKey("client_send_timeout_ms", default: "`\(ClientLimits.defaultSendTimeoutMS)`", help: "HTTP/1.1: an answer the client takes no byte of this long ends its connection (HTTP/2 has h2_stall_timeout_ms)"),
        SettingKey("shutdown_timeout_ms", default: "`\(ClientLimits.defaultShutdownTimeoutMS)`", help: "on a graceful shutdown (SIGTERM), how long answers under way (server-sent events, a long download, HTTP/2 streams) may go on before their connections are closed"),
        SettingKey("cookie_domain", default: "none", help: "a parent domain of siwa's host (`.example.com`): the session cookie is set for it (`__Secure-siwa_session`, `Domain=example.com`), so sites on sibling hosts behind one siwa see one session; must cover the host of `public_url` and of the return URL"),
        SettingKey("check_cache_seconds", default: "`\(ServerSettings.defaultCheckCacheSeconds)`", help: "how long a session looked up stays in this instance's memory (0: every request asks the store); how stale a sign-out can be seen is in \"Put siwa in front of your site\""),
        SettingKey("oidc_clients", secret: true, json: true, default: "none", help: "the OpenID Provider's clients: a JSON array of `{\"client_id\", \"client_secret\", \"redirect_uris\", \"post_logout_redirect_uris\", \"scopes\", \"public\", \"id_token_signed_response_alg\", \"pairwise_subject\", \"allowed_groups\", \"backchannel_logout_uri\", \"iss_in_errors\", \"device\", \"service\"}` (see [OpenID provider](provider.md); JSON text in the environment and on the command line, plain JSON in the file); secret, redacted wherever configuration is printed. Clients can also be registered in the store with `siwa oidc add-client`"),
    ]

    /// The key named `name`, if there is one.
    static func named(_ name: String) -> SettingKey? {
        all.first { $0.name == name }
    }
}
