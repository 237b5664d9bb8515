import AppleIDEmulator
import AppleSignIn
import ArgumentParser
import Foundation
import SignInServer

/// What `siwa serve` will run: settings for the server and, in local mode, the emulator's.
struct ServePlan {
    var settings: ServerSettings
    var emulator: EmulatorConfiguration?
    var emulatorPort: Int
    var logLevel: String
    /// `event_loops`: the number of event loops of the process's one group; nil: NIO's default (a loop a core).
    var eventLoops: Int? = nil
    /// `emulator_port` and `log_level` unset, each written only here.
    static let defaultEmulatorPort = 9090
    static let defaultLogLevel = "info"
}

extension ServePlan {
    /// Reads settings from the layers; Apple mode when any Apple credential is given (then all are required).
    /// `creatingLocalKey: false` (the doctor) checks without creating local mode's data key file.
    init(values: LayeredValues, creatingLocalKey: Bool = true) throws {
        let host = values.string("host") ?? ServerSettings.defaultHost
        // With siwa's own TLS, `port` serves the redirect to HTTPS: 80 unless said.
        let tlsOn = !values.list("tls_domains").isEmpty || values.string("tls_cert_file") != nil
        let port = try values.int("port", default: tlsOn ? EdgeSettings.defaultPlainPort : ServerSettings.defaultPort)
        guard (0...65535).contains(port) else { throw ConfigurationError(field: "port", "must be between 0 and 65535") }
        let emulatorPort = try values.int("emulator_port", default: Self.defaultEmulatorPort)
        let appleFields = ["team_id", "key_id", "key_file", "services_id", "return_url"]
        let given = appleFields.filter { values.string($0) != nil }
        let sessionLifetime = TimeInterval(try values.int("session_lifetime", default: ServerSettings.defaultSessionLifetime))
        let button = try ButtonSettings(
            style: values.string("button_style").map { text in
                guard let style = ButtonSettings.Style(rawValue: text) else {
                    throw ConfigurationError(field: "button_style", "must be black, white or white-outline")
                }
                return style
            } ?? ButtonSettings.defaultStyle,
            title: values.string("button_title").map { text in
                guard let title = ButtonSettings.Title(rawValue: text) else {
                    throw ConfigurationError(field: "button_title", "must be sign-in, continue or sign-up")
                }
                return title
            } ?? ButtonSettings.defaultTitle,
            height: values.int("button_height", default: ButtonSettings.defaultHeight),
            cornerRadius: values.int("button_corner_radius", default: ButtonSettings.defaultCornerRadius)
        )
        let timeout = try values.int("apple_timeout_ms", default: ServerSettings.defaultAppleTimeoutMS)
        let database = values.string("db") ?? ServerSettings.defaultDatabase
        logLevel = values.string("log_level") ?? Self.defaultLogLevel
        // Unset: NIO's default, a loop a core.
        eventLoops = try values.string("event_loops").map { _ in try Self.bounded(values, "event_loops", default: 0, 1...256) }
        let rateLimit = try values.int("rate_limit_per_minute", default: ServerSettings.serveRateLimitPerMinute)
        let trustedProxies = values.list("trusted_proxies")
        do {
            _ = try TrustedProxies(trustedProxies)
        } catch {
            throw ConfigurationError(field: "trusted_proxies", "\(error)")
        }
        let publicURL = try values.string("public_url").map { text in
            guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host?.isEmpty == false,
                url.query == nil, url.path.isEmpty || url.path == "/"
            else { throw ConfigurationError(field: "public_url", "must be the absolute http(s) URL siwa is reached at, without a path, e.g. https://auth.example.com; got \(text)") }
            return text
        }
        let socket = try Self.socket(values, publicURL: publicURL)
        let edge = try Self.edge(values, host: host, port: port)
        if edge != nil, socket != nil { throw ConfigurationError(field: "socket", "siwa listens on a Unix socket behind a proxy, or terminates TLS itself: not both") }
        if let edge, edge.domains.isEmpty, publicURL == nil {
            throw ConfigurationError(field: "tls_domains", "names the domain browsers reach siwa at; with tls_cert_file give it (or public_url) too")
        }
        let hstsMaxAge = try Self.hstsMaxAge(values)
        let redirects = RedirectPolicy(domains: values.list("allowed_redirect_domains"))
        for domain in redirects.domains where domain.contains(":") || domain.contains("/") || domain.contains("*") || domain.contains(where: \.isWhitespace) {
            throw ConfigurationError(field: "allowed_redirect_domains", "entries are host names without scheme, port or wildcard (app.example.com, or .example.com for its subdomains); got \(domain)")
        }
        let access = AccessControl(try Self.access(values))
        let invitationContact = try Self.invitationContact(values)
        // siwa's own host is always a place to return to (the built-in proxy's sign-ins come back there).
        func front(_ origin: String) -> FrontSettings {
            var front = FrontSettings(publicOrigin: publicURL ?? origin, redirects: redirects.allowing(hostOf: publicURL ?? origin), access: access)
            front.invitationContact = invitationContact
            return front
        }
        let upstream = try Self.upstream(values)
        // `skip_auth_routes`: public rules ahead of `access_rules` (also for `siwa rules test`, which builds no gate).
        access.install(skipRoutes: upstream?.skipAuthRoutes ?? [])

        let cookieDomain = try Self.cookieDomain(values, covering: publicURL)
        let providerClients: [ProviderClientRecord]
        do {
            providerClients = try values.string("oidc_clients").map { try ProviderSettings.clients(fromJSON: $0) } ?? []
        } catch {
            throw ConfigurationError(field: "oidc_clients", "\(error)")
        }
        let clientLimits = try Self.clientLimits(values)
        let checkCacheSeconds = try values.int("check_cache_seconds", default: ServerSettings.defaultCheckCacheSeconds)
        guard (0...3600).contains(checkCacheSeconds) else {
            throw ConfigurationError(field: "check_cache_seconds", "must be between 0 (no cache) and 3600 seconds; got \(checkCacheSeconds)")
        }
        let adminGroups = try Self.groupNames(values, "admin_groups")
        let eventWebhooks: [EventWebhook]
        do {
            eventWebhooks = try values.string("event_webhooks").map { try EventWebhook.list(fromJSON: $0) } ?? []
        } catch {
            throw ConfigurationError(field: "event_webhooks", "\(error)")
        }
        let auditLog = values.string("audit_log").flatMap { $0.isEmpty ? nil : $0 }
        if let auditLog {
            let directory = (auditLog as NSString).deletingLastPathComponent
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: directory.isEmpty ? "." : directory, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw ConfigurationError(field: "audit_log", "the directory of \(auditLog) does not exist")
            }
        }

        if given.isEmpty {
            let publicHost = (host == "0.0.0.0" || host == "::") ? "127.0.0.1" : host
            let direct = edge.map(Self.origin(of:)) ?? "http://\(publicHost):\(port)"
            // Behind a proxy (`public_url`), the browser returns there; Apple's notifications come straight here.
            let origin = publicURL.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 } ?? direct
            let returnURL = origin + "/auth/apple/callback"
            var apple = try AppleSignInConfiguration(
                teamID: EmulatorConfiguration.testTeamID, keyID: EmulatorConfiguration.testKeyID,
                servicesID: EmulatorConfiguration.testServicesID, extraAudiences: [EmulatorConfiguration.testBundleID],
                returnURLs: [returnURL], privateKeyPEM: EmulatorConfiguration.testPrivateKeyPEM,
                appleBaseURL: "http://127.0.0.1:\(emulatorPort)"
            )
            // A site on another loopback name (`http://auth.example.localhost:8080`) reaches the emulator under that
            // name too, so Apple's form_post back to it stays same-site and the binding cookie comes with it.
            if let publicHost = publicURL.flatMap({ URL(string: $0)?.host }), RedirectPolicy.isLoopback(host: publicHost),
                let base = URL(string: "http://\(publicHost.contains(":") && !publicHost.hasPrefix("[") ? "[\(publicHost)]" : publicHost):\(emulatorPort)")
            {
                apple.authorizeBaseURL = base
            }
            let keyPath = (database.contains("://") ? ServerSettings.defaultDatabase : database) + ".key"
            let dataKeys = !values.list("data_key").isEmpty ? try Self.checked(dataKeys: values.list("data_key"))
                : creatingLocalKey ? [try LocalDataKey.loadOrCreate(path: keyPath)] : [TokenCipher.generateKey()]
            settings = ServerSettings(mode: .local, host: host, port: port, database: database, apple: apple, sessionLifetime: sessionLifetime, button: button, appleTimeoutMS: timeout, dataKeys: dataKeys)
            settings.rateLimitPerMinute = rateLimit
            settings.trustedProxies = trustedProxies
            settings.socketPath = socket
            settings.front = front(origin)
            settings.provider = ProviderSettings(issuer: settings.front.publicOrigin, clients: providerClients)
            settings.upstream = upstream
            settings.cookieDomain = cookieDomain
            settings.checkCacheSeconds = checkCacheSeconds
            settings.auditLogPath = auditLog
            settings.adminGroups = adminGroups
            settings.eventWebhooks = eventWebhooks
            settings.clientLimits = clientLimits
            settings.edge = edge
            settings.hstsMaxAge = hstsMaxAge
            try Self.check(cookieDomain: cookieDomain, covers: settings.returnURL)
            // On a Unix socket siwa is reached through the proxy only, the emulator's notifications too.
            emulator = .defaults(redirectURIs: [returnURL], notificationURL: (socket == nil ? direct : origin) + "/auth/apple/notifications")
            self.emulatorPort = emulatorPort
            return
        }
        if let missing = appleFields.first(where: { values.string($0) == nil }) {
            throw ConfigurationError(field: missing, "is required in Apple mode (given: \(given.joined(separator: ", "))); set all of \(appleFields.joined(separator: ", ")) or none for local mode")
        }
        let keyPath = values.string("key_file") ?? ""
        guard let keyData = FileManager.default.contents(atPath: keyPath), let pem = String(data: keyData, encoding: .utf8) else {
            throw ConfigurationError(field: "key_file", "cannot read \(keyPath); give the path of AuthKey_<KEYID>.p8")
        }
        let apple = try AppleSignInConfiguration(
            teamID: values.string("team_id") ?? "", keyID: values.string("key_id") ?? "", servicesID: values.string("services_id") ?? "",
            extraAudiences: values.list("extra_audiences"), returnURLs: values.list("return_url"), privateKeyPEM: pem,
            appleBaseURL: values.string("apple_base_url") ?? AppleSignInConfiguration.appleBaseURL,
            acceptedIssuers: values.list("accepted_issuers").isEmpty ? nil : values.list("accepted_issuers"),
            clientSecretLifetime: TimeInterval(try values.int("client_secret_lifetime", default: AppleSignInConfiguration.defaultClientSecretLifetime))
        )
        if apple.isApple, apple.returnURLs[0].scheme != "https" {
            throw ConfigurationError(field: "return_url", "must be https in Apple mode")
        }
        let dataKeys = try Self.checked(dataKeys: values.list("data_key"))
        guard !dataKeys.isEmpty else {
            throw ConfigurationError(field: "data_key", "is required in Apple mode: refresh tokens are encrypted at rest with it. Create one with `openssl rand -base64 32`; to rotate, list the new key first, comma-separated, then the old ones")
        }
        settings = ServerSettings(mode: .apple, host: host, port: port, database: database, apple: apple, sessionLifetime: sessionLifetime, button: button, appleTimeoutMS: timeout, dataKeys: dataKeys)
        settings.rateLimitPerMinute = rateLimit
        settings.trustedProxies = trustedProxies
        settings.socketPath = socket
        settings.front = front(settings.origin)
        settings.provider = ProviderSettings(issuer: settings.front.publicOrigin, clients: providerClients)
        settings.upstream = upstream
        settings.cookieDomain = cookieDomain
        settings.checkCacheSeconds = checkCacheSeconds
        settings.auditLogPath = auditLog
        settings.adminGroups = adminGroups
        settings.eventWebhooks = eventWebhooks
        settings.clientLimits = clientLimits
        settings.edge = edge
        settings.hstsMaxAge = hstsMaxAge
        try Self.check(cookieDomain: cookieDomain, covers: settings.returnURL)
        emulator = nil
        self.emulatorPort = emulatorPort
    }
}

extension ServePlan {
    /// `allowed_emails`, `allowed_email_domains`, `allowed_subs`, `allowed_groups`: the global policy.
    static func accessPolicy(_ values: LayeredValues) throws -> AccessPolicy {
        let groups = try groupNames(values, "allowed_groups")
        return AccessPolicy(emails: values.list("allowed_emails"), emailDomains: values.list("allowed_email_domains"), subjects: values.list("allowed_subs"), groups: groups)
    }

    /// `invitation_contact`: one line of at most 200 characters, or nothing.
    static func invitationContact(_ values: LayeredValues) throws -> String? {
        guard let text = values.string("invitation_contact")?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
        guard text.count <= 200, !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw ConfigurationError(field: "invitation_contact", "one line of at most 200 characters (an address or a team to ask for an invitation)")
        }
        return text
    }

    /// A list of group names (`allowed_groups`, `admin_groups`), each checked.
    static func groupNames(_ values: LayeredValues, _ key: String) throws -> [String] {
        let names = values.list(key)
        for name in names {
            do {
                try GroupName.check(name)
            } catch {
                throw ConfigurationError(field: key, error.description)
            }
        }
        return names
    }

    /// `access_rules`, the global policy and `groups` (what SIGHUP and a change of the configuration file reload). A
    /// bad rule or group stops the start, named by its index and field.
    static func access(_ values: LayeredValues) throws -> AccessConfiguration {
        let global = try accessPolicy(values)
        let rules: [AccessRule]
        do {
            rules = try values.string("access_rules").map { try AccessRule.parse(json: $0) } ?? []
        } catch {
            throw ConfigurationError(field: "access_rules", "\(error)")
        }
        let groups: [String: [GroupMember]]
        do {
            groups = try values.string("groups").map { try AccessConfiguration.groups(json: $0) } ?? [:]
        } catch {
            throw ConfigurationError(field: "groups", "\(error)")
        }
        return AccessConfiguration(rules: rules, global: global, groups: groups)
    }

    /// `cookie_domain`: a parent domain of siwa's host (`.example.com` or `example.com`), never an IP address, or nil.
    static func cookieDomain(_ values: LayeredValues, covering publicURL: String?) throws -> String? {
        guard let text = values.string("cookie_domain"), !text.isEmpty else { return nil }
        let domain = (text.hasPrefix(".") ? String(text.dropFirst()) : text).lowercased()
        let labels = domain.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 2, labels.allSatisfy({ !$0.isEmpty && $0.allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" } }),
            !labels.allSatisfy({ $0.allSatisfy(\.isNumber) })
        else {
            throw ConfigurationError(field: "cookie_domain", "must be a parent domain of siwa's host such as .example.com (at least two labels, no IP address, port or scheme); got \(text)")
        }
        if let publicURL, let host = URL(string: publicURL)?.host, !ServerSettings.cookieDomain(domain, covers: host) {
            throw ConfigurationError(field: "cookie_domain", "\(text) does not cover \(host), the host of public_url, where the session cookie is set")
        }
        return domain
    }

    /// The session cookie is set by Apple's return: `cookie_domain` must cover the return URL's host.
    /// `keys` when each is a data key (32 random bytes in base64): a bad one is a configuration error, named, before
    /// anything starts (it used to surface from the store's cipher as a plain error, exit 1).
    static func checked(dataKeys keys: [String]) throws -> [String] {
        guard !keys.isEmpty else { return keys }
        do {
            _ = try TokenCipher(base64Keys: keys)
        } catch {
            throw ConfigurationError(field: "data_key", "each key must be 32 random bytes in base64 (create one with `openssl rand -base64 32`)")
        }
        return keys
    }

    static func check(cookieDomain: String?, covers returnURL: URL) throws {
        guard let cookieDomain, let host = returnURL.host, !ServerSettings.cookieDomain(cookieDomain, covers: host) else { return }
        throw ConfigurationError(field: "cookie_domain", "\(cookieDomain) does not cover \(host), the host of the return URL, where the session cookie is set")
    }

    /// `client_header_timeout_ms`, `client_idle_timeout_ms`, `client_body_timeout_ms`, `client_send_timeout_ms` and
    /// `shutdown_timeout_ms`.
    static func clientLimits(_ values: LayeredValues) throws -> ClientLimits {
        var limits = ClientLimits()
        limits.headerTimeoutMS = try positiveMilliseconds(values, "client_header_timeout_ms", default: limits.headerTimeoutMS)
        limits.idleTimeoutMS = try positiveMilliseconds(values, "client_idle_timeout_ms", default: limits.idleTimeoutMS)
        limits.bodyTimeoutMS = try positiveMilliseconds(values, "client_body_timeout_ms", default: limits.bodyTimeoutMS)
        limits.sendTimeoutMS = try positiveMilliseconds(values, "client_send_timeout_ms", default: limits.sendTimeoutMS)
        limits.shutdownTimeoutMS = try positiveMilliseconds(values, "shutdown_timeout_ms", default: limits.shutdownTimeoutMS)
        return limits
    }

    /// A duration key in milliseconds, more than 0.
    static func positiveMilliseconds(_ values: LayeredValues, _ key: String, default value: Int) throws -> Int {
        let milliseconds = try values.int(key, default: value)
        guard milliseconds > 0 else { throw ConfigurationError(field: key, "must be more than 0 milliseconds; got \(milliseconds)") }
        return milliseconds
    }

    /// `upstream`, `upstream_timeout_ms` and `skip_auth_routes`: the built-in proxy, or nil without `upstream`.
    static func upstream(_ values: LayeredValues) throws -> UpstreamSettings? {
        let timeout = try positiveMilliseconds(values, "upstream_timeout_ms", default: UpstreamSettings.defaultTimeoutMS)
        let idle = try positiveMilliseconds(values, "upstream_idle_timeout_ms", default: UpstreamSettings.defaultIdleTimeoutMS)
        let maxConnections = try values.int("upstream_max_connections", default: UpstreamSettings.defaultMaxConnections)
        guard maxConnections > 0 else { throw ConfigurationError(field: "upstream_max_connections", "must be at least 1; got \(maxConnections)") }
        let entries = values.list("skip_auth_routes")
        let stripped = values.list("strip_request_headers")
        guard let url = values.string("upstream") else {
            if values.string("upstream_http2") != nil { throw ConfigurationError(field: "upstream_http2", "applies to the built-in proxy only: set upstream too") }
            if !entries.isEmpty { throw ConfigurationError(field: "skip_auth_routes", "applies to the built-in proxy only: set upstream too") }
            if !stripped.isEmpty { throw ConfigurationError(field: "strip_request_headers", "applies to the built-in proxy only: set upstream too") }
            return nil
        }
        var routes: [SkipAuthRoute] = []
        for entry in entries {
            do {
                routes.append(try SkipAuthRoute(entry))
            } catch {
                throw ConfigurationError(field: "skip_auth_routes", error.description + " (entries are METHOD=regex, *=regex or a regex; in the config file a JSON array, so an entry may contain a comma)")
            }
        }
        let http2: Bool
        switch values.string("upstream_http2")?.lowercased() {
        case nil, "false", "0", "no": http2 = false
        case "true", "1", "yes": http2 = true
        case let other?: throw ConfigurationError(field: "upstream_http2", "must be true or false; got \(other)")
        }
        if http2, !url.lowercased().hasPrefix("http://") {
            throw ConfigurationError(field: "upstream_http2", "speaks HTTP/2 without TLS (h2c, as gRPC services listen on loopback): the upstream must be an http:// URL")
        }
        do {
            var settings = try UpstreamSettings(url: url, timeoutMS: timeout, skipAuthRoutes: routes, stripRequestHeaders: stripped)
            settings.idleTimeoutMS = idle
            settings.maxConnections = maxConnections
            settings.http2 = http2
            return settings
        } catch {
            throw ConfigurationError(field: error.description.hasPrefix("strip_request_headers") ? "strip_request_headers" : "upstream", error.description)
        }
    }
}

/// The data key of local mode: created once in a file only its owner can read.
enum LocalDataKey {
    static func loadOrCreate(path: String) throws -> String {
        if let data = FileManager.default.contents(atPath: path) {
            return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let key = TokenCipher.generateKey()
        guard FileManager.default.createFile(atPath: path, contents: Data((key + "\n").utf8), attributes: [.posixPermissions: 0o600]) else {
            throw ConfigurationError(field: "data_key", "cannot create the local data key file \(path)")
        }
        return key
    }
}

extension ServePlan {
    /// `socket`: a Unix socket to listen on instead of `host`:`port`. Browsers then reach siwa through the proxy
    /// only, so `public_url` must say where; the socket's directory must exist, and what is at the path already
    /// must be a socket (a stale one, replaced at start), never a file siwa would delete.
    static func socket(_ values: LayeredValues, publicURL: String?) throws -> String? {
        guard let path = values.string("socket"), !path.isEmpty else { return nil }
        guard publicURL != nil else {
            throw ConfigurationError(field: "socket", "needs public_url: on a Unix socket siwa is reached through the proxy in front, so say where browsers reach it, e.g. https://auth.example.com")
        }
        // sun_path holds 108 bytes, its terminating NUL included.
        guard path.utf8.count <= 107 else { throw ConfigurationError(field: "socket", "a Unix socket path is at most 107 bytes; got \(path.utf8.count)") }
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw ConfigurationError(field: "socket", "the directory \(directory) does not exist; create it (owned by siwa's user) or name another path")
        }
        var status = stat()
        if lstat(path, &status) == 0, status.st_mode & S_IFMT != S_IFSOCK {
            throw ConfigurationError(field: "socket", "\(path) exists and is not a socket; siwa replaces only a stale socket there")
        }
        return path
    }

    /// Before `siwa serve` listens on `path`: a socket there that a server still answers on (another siwa, or this
    /// one not yet stopped) is not taken over (the server would replace it, and the running one would be cut off
    /// from its proxy); one nobody answers on is stale, and replaced.
    static func checkSocketFree(_ path: String) throws {
        var status = stat()
        if lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFSOCK {
            let fd = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw ConfigurationError(field: "socket", "cannot check \(path): errno \(errno)") }
            defer { close(fd) }
            var address = unixAddress(path)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            if connected == 0 {
                throw ConfigurationError(field: "socket", "\(path) is in use: a server answers on it (another siwa serve?); stop it or name another path")
            }
        }
    }

    /// The address of the Unix socket at `path` (cut to what `sun_path` holds; `socket` refuses longer paths).
    static func unixAddress(_ path: String) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { out in
            let bytes = Array(path.utf8.prefix(out.count - 1))
            out.copyBytes(from: bytes)
            out[bytes.count] = 0
        }
        return address
    }
}
