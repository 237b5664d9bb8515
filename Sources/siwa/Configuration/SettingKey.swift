/// One configuration key of `siwa serve` and `siwa doctor`: a file key, `SIWA_<KEY>` in the environment (and in
/// `.env`), and the flag `--<key-with-dashes>`. The README's configuration table lists the same keys (tested).
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

    init(_ name: String, secret: Bool = false, list: Bool = false, json: Bool = false) {
        self.name = name
        self.isSecret = secret
        self.isList = list
        self.isJSON = json
    }

    /// `SIWA_DATA_KEY`.
    var environmentName: String { "SIWA_" + name.uppercased() }
    /// `--data-key`.
    var flag: String { "--" + name.replacingOccurrences(of: "_", with: "-") }

    /// Every key, in the README's order.
    static let all: [SettingKey] = [
        SettingKey("host"), SettingKey("port"), SettingKey("socket"), SettingKey("db"), SettingKey("emulator_port"),
        SettingKey("team_id"), SettingKey("key_id"), SettingKey("key_file"), SettingKey("services_id"),
        SettingKey("return_url", list: true), SettingKey("extra_audiences", list: true), SettingKey("apple_base_url"),
        SettingKey("accepted_issuers", list: true), SettingKey("client_secret_lifetime"), SettingKey("session_lifetime"),
        SettingKey("button_style"), SettingKey("button_title"), SettingKey("button_height"), SettingKey("button_corner_radius"),
        SettingKey("apple_timeout_ms"), SettingKey("log_level"), SettingKey("data_key", secret: true, list: true),
        SettingKey("rate_limit_per_minute"), SettingKey("trusted_proxies", list: true), SettingKey("notifications_url"),
        SettingKey("public_url"), SettingKey("allowed_redirect_domains", list: true), SettingKey("allowed_emails", list: true),
        SettingKey("allowed_email_domains", list: true), SettingKey("allowed_subs", list: true),
        SettingKey("allowed_groups", list: true), SettingKey("groups", json: true), SettingKey("access_rules", json: true), SettingKey("audit_log"), SettingKey("admin_groups", list: true),
        SettingKey("upstream"), SettingKey("upstream_timeout_ms"), SettingKey("skip_auth_routes", list: true),
        SettingKey("strip_request_headers", list: true), SettingKey("upstream_idle_timeout_ms"), SettingKey("upstream_max_connections"),
        SettingKey("client_header_timeout_ms"), SettingKey("client_idle_timeout_ms"),
        SettingKey("cookie_domain"), SettingKey("check_cache_seconds"), SettingKey("oidc_clients", secret: true, json: true),
    ]

    /// The key named `name`, if there is one.
    static func named(_ name: String) -> SettingKey? {
        all.first { $0.name == name }
    }
}
