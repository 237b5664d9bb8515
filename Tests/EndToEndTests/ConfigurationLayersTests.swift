import AppleIDEmulator
import AppleSignIn
import ArgumentParser
import Foundation
import Logging
import NIOCore
import NIOPosix
import SignInServer
@testable import siwa
import Testing

/// The one configuration of `siwa serve` and `siwa doctor`: every key in every layer, the layers' order, secrets
/// redacted, and the README's table in step with the keys the code knows.
@Suite("Configuration layers")
struct ConfigurationLayersTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// A temporary directory with `files` written into it.
    static func directory(_ files: [String: String]) throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-config-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        for (name, text) in files { try text.write(to: directory.appendingPathComponent(name), atomically: true, encoding: .utf8) }
        return directory
    }

    @Test("siwa --help and every subcommand's help say what it does in one line and show an example")
    func helpShowsExamples() {
        func walk(_ command: any ParsableCommand.Type, _ path: String) {
            let configuration = command.configuration
            #expect(!configuration.abstract.isEmpty && !configuration.abstract.contains("\n"), "\(path): one line saying what it does")
            #expect(Siwa.helpMessage(for: command).contains("Example: siwa"), "\(path): an example")
            for sub in configuration.subcommands { walk(sub, path + " " + (sub.configuration.commandName ?? "?")) }
        }
        walk(Siwa.self, "siwa")
    }

    @Test("docs/configuration.md is what siwa config reference prints: it never drifts from the keys the code knows")
    func referenceGenerated() throws {
        let committed = try String(contentsOf: Self.root.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
        #expect(committed == ConfigCommand.reference, "run: swift run siwa config reference > docs/configuration.md")
    }

    @Test("the configuration reference (docs/configuration.md) lists exactly the keys the code knows, each with its environment variable")
    func readmeTable() throws {
        let section = try String(contentsOf: Self.root.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
        var rows: [(key: String, environment: String, flag: String)] = []
        for match in section.matches(of: /\n\| `([a-z0-9_]+)` \| `([A-Z0-9_]+)` \| `(--[a-z0-9-]+)` \|/) {
            rows.append((String(match.1), String(match.2), String(match.3)))
        }
        #expect(rows.map(\.key) == SettingKey.all.map(\.name))
        for row in rows {
            #expect(row.environment == "SIWA_" + row.key.uppercased())
            #expect(row.flag == "--" + row.key.replacingOccurrences(of: "_", with: "-"))
        }
    }

    @Test("every default the configuration reference states (a value in backticks) is what siwa serve runs with when its key is unset: in local mode, in Apple mode at its own edge, and in front of an upstream")
    func statedDefaultsAreServed() async throws {
        let directory = try Self.directory(["AuthKey.p8": EmulatorConfiguration.testPrivateKeyPEM])
        defer { try? FileManager.default.removeItem(at: directory) }
        let local = try ServePlan(values: try await LayeredValues(arguments: [], environment: [:], dotEnvPath: nil), creatingLocalKey: false)
        let apple = try ServePlan(
            values: try await LayeredValues(
                arguments: [
                    "--team-id", EmulatorConfiguration.testTeamID, "--key-id", EmulatorConfiguration.testKeyID,
                    "--services-id", EmulatorConfiguration.testServicesID, "--key-file", directory.appendingPathComponent("AuthKey.p8").path,
                    "--return-url", "https://auth.example.com/auth/apple/callback", "--data-key", TokenCipher.generateKey(),
                    "--tls-domains", "auth.example.com", "--upstream", "http://127.0.0.1:3000",
                ],
                environment: [:], dotEnvPath: nil
            )
        )
        let edge = try #require(apple.settings.edge)
        let upstream = try #require(apple.settings.upstream)
        guard case .acme(let acme) = edge.source else {
            Issue.record("tls_domains without certificate files is ACME")
            return
        }
        let limits = local.settings.clientLimits
        // What serve runs with, key by key, where the key applies.
        let served: [String: String] = [
            "host": local.settings.host, "port": String(local.settings.port), "db": local.settings.database,
            "https_port": String(edge.httpsPort), "acme_challenges": acme.challenges.map(\.rawValue).joined(separator: ","),
            "hsts_max_age": String(local.settings.hstsMaxAge),
            "h2_max_concurrent_streams": String(edge.http2.maxConcurrentStreams), "h2_max_header_list_size": String(edge.http2.maxHeaderListSize),
            "h2_stall_timeout_ms": String(edge.http2.stallTimeoutMS), "h2_max_resets": String(edge.http2.maxResets),
            "h2_max_control_frames": String(edge.http2.maxControlFrames),
            "emulator_port": String(local.emulatorPort),
            "apple_base_url": apple.settings.apple.appleBaseURL.absoluteString, "accepted_issuers": apple.settings.apple.acceptedIssuers.joined(separator: ","),
            "client_secret_lifetime": String(Int(apple.settings.apple.clientSecretLifetime)),
            "session_lifetime": String(Int(local.settings.sessionLifetime)),
            "button_style": local.settings.button.style.rawValue, "button_title": local.settings.button.title.rawValue,
            "button_height": String(local.settings.button.height), "button_corner_radius": String(local.settings.button.cornerRadius),
            "apple_timeout_ms": String(local.settings.appleTimeoutMS), "log_level": local.logLevel,
            "rate_limit_per_minute": String(local.settings.rateLimitPerMinute),
            "upstream_http2": String(upstream.http2), "upstream_timeout_ms": String(upstream.timeoutMS),
            "upstream_idle_timeout_ms": String(upstream.idleTimeoutMS), "upstream_max_connections": String(upstream.maxConnections),
            "client_header_timeout_ms": String(limits.headerTimeoutMS), "client_idle_timeout_ms": String(limits.idleTimeoutMS),
            "client_body_timeout_ms": String(limits.bodyTimeoutMS), "client_send_timeout_ms": String(limits.sendTimeoutMS),
            "shutdown_timeout_ms": String(limits.shutdownTimeoutMS),
            "check_cache_seconds": String(local.settings.checkCacheSeconds),
        ]
        var stated: [String: String] = [:]
        for key in SettingKey.all {
            if let literal = key.defaultText.firstMatch(of: /^`([^`]+)`/) { stated[key.name] = String(literal.1) }
        }
        // Every key whose default is a value has its check here, and nothing else does.
        #expect(Set(stated.keys) == Set(served.keys))
        for (name, value) in stated.sorted(by: { $0.key < $1.key }) {
            #expect(served[name] == value, "\(name): the reference says \(value), serve runs with \(served[name] ?? "nothing")")
        }
        // `port` with siwa's own TLS: the second value its default names.
        let port = try #require(SettingKey.named("port"))
        #expect(port.defaultText.contains("`\(apple.settings.port)` with `tls_domains`"))
        #expect(apple.settings.port != local.settings.port)
        // The library's own settings start from the same values (`ServerSettings`' initializer, `ClientLimits`,
        // `HTTP2Limits`, `ButtonSettings`), but for the rate limit, which serve turns on.
        let library = ServerSettings(mode: .local, apple: local.settings.apple)
        #expect(library.host == local.settings.host && library.port == local.settings.port && library.database == local.settings.database)
        #expect(library.sessionLifetime == local.settings.sessionLifetime && library.appleTimeoutMS == local.settings.appleTimeoutMS)
        #expect(library.button == local.settings.button && library.clientLimits == limits && library.hstsMaxAge == local.settings.hstsMaxAge)
        #expect(library.checkCacheSeconds == local.settings.checkCacheSeconds && HTTP2Limits() == edge.http2)
        #expect(library.rateLimitPerMinute == 0 && local.settings.rateLimitPerMinute > 0)
    }

    @Test("command line > environment > .env > config file, and --print-config says where each value came from")
    func layerOrder() async throws {
        let directory = try Self.directory([
            "siwa.json": #"{"host": "file.example", "port": 1111, "db": "file.sqlite", "log_level": "debug", "trusted_proxies": ["10.0.0.1", "10.0.0.2"]}"#,
            ".env": "SIWA_PORT=2222\nSIWA_DB=dotenv.sqlite\nSIWA_LOG_LEVEL=notice\n",
        ])
        defer { try? FileManager.default.removeItem(at: directory) }
        let values = try await LayeredValues(
            arguments: ["--config", directory.appendingPathComponent("siwa.json").path, "--log-level", "error"],
            environment: ["SIWA_DB": "environment.sqlite", "SIWA_LOG_LEVEL": "warning"],
            dotEnvPath: directory.appendingPathComponent(".env").path
        )
        #expect(values.string("log_level") == "error")
        #expect(values.source(of: "log_level") == "command line")
        #expect(values.string("db") == "environment.sqlite")
        #expect(values.source(of: "db") == "environment")
        #expect(try values.int("port", default: 8080) == 2222)
        #expect(values.source(of: "port") == ".env")
        #expect(values.string("host") == "file.example")
        #expect(values.source(of: "host") == "config file")
        #expect(values.list("trusted_proxies") == ["10.0.0.1", "10.0.0.2"])
        #expect(values.source(of: "session_lifetime") == nil)
        let printed = values.printed()
        #expect(printed.contains("log_level = error  (command line)"))
        #expect(printed.contains("port = 2222  (.env)"))
        #expect(printed.contains("session_lifetime = (default)"))
        // ServePlan reads the same object.
        let plan = try ServePlan(values: values)
        #expect(plan.settings.port == 2222)
        #expect(plan.settings.database == "environment.sqlite")
        #expect(plan.logLevel == "error")
    }

    @Test("every key can be set by its flag, its environment variable and the config file")
    func everyKeyInEveryLayer() async throws {
        for key in SettingKey.all {
            let fromFlag = try await LayeredValues(arguments: [key.flag, "v-\(key.name)"], environment: [:], dotEnvPath: nil)
            #expect(fromFlag.string(key.name) == "v-\(key.name)", "\(key.flag)")
            #expect(fromFlag.source(of: key.name) == "command line")
            let fromEnvironment = try await LayeredValues(arguments: [], environment: [key.environmentName: "e-\(key.name)"], dotEnvPath: nil)
            #expect(fromEnvironment.string(key.name) == "e-\(key.name)", "\(key.environmentName)")
            let directory = try Self.directory(["c.json": #"{"\#(key.name)": "f-\#(key.name)"}"#])
            defer { try? FileManager.default.removeItem(at: directory) }
            let fromFile = try await LayeredValues(arguments: [], configFile: directory.appendingPathComponent("c.json").path, environment: [:], dotEnvPath: nil)
            #expect(fromFile.string(key.name) == "f-\(key.name)", "file key \(key.name)")
        }
    }

    @Test("every key that holds a JSON array is read as JSON: its text with commas and spaces comes back whole from the flag (both spellings) and the environment, and the file's array as JSON text")
    func jsonKeys() async throws {
        let helpSaysJSON = SettingKey.all.filter { $0.help.contains("JSON array") && !$0.isList }
        #expect(!helpSaysJSON.isEmpty)
        for key in helpSaysJSON {
            #expect(key.isJSON, "\(key.name) holds a JSON array but is not marked json: a value with commas was misread")
        }
        let text = #"[{"name": "a, b", "events": ["x", "y"]}]"#
        for key in SettingKey.all where key.isJSON {
            for arguments in [[key.flag + "=" + text], [key.flag, text]] {
                let read = try await LayeredValues(arguments: arguments, environment: [:], dotEnvPath: nil)
                #expect(read.string(key.name) == text, "\(arguments.joined(separator: " "))")
            }
            let environment = try await LayeredValues(arguments: [], environment: [key.environmentName: text], dotEnvPath: nil)
            #expect(environment.string(key.name) == text, "\(key.environmentName)")
            let directory = try Self.directory(["c.json": #"{"\#(key.name)": \#(text)}"#])
            defer { try? FileManager.default.removeItem(at: directory) }
            let file = try await LayeredValues(arguments: [], configFile: directory.appendingPathComponent("c.json").path, environment: [:], dotEnvPath: nil)
            let parsed = try #require(file.string(key.name).flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) } as? [[String: Any]], "file key \(key.name)")
            #expect(parsed.first?["name"] as? String == "a, b")
        }
    }

    @Test("lists: comma-separated in the environment and on the command line, JSON arrays in the file")
    func lists() async throws {
        let cli = try await LayeredValues(arguments: ["--trusted-proxies", "10.0.0.1, 10.0.0.2"], environment: [:], dotEnvPath: nil)
        #expect(cli.list("trusted_proxies") == ["10.0.0.1", "10.0.0.2"])
        let environment = try await LayeredValues(arguments: [], environment: ["SIWA_EXTRA_AUDIENCES": "com.a.app,com.b.app"], dotEnvPath: nil)
        #expect(environment.list("extra_audiences") == ["com.a.app", "com.b.app"])
    }

    @Test("secrets are redacted wherever configuration is printed")
    func secretsRedacted() async throws {
        let key = "c2VjcmV0LWRhdGEta2V5LXRoYXQtbXVzdC1ub3Qtc2hvdw=="
        for values in [
            try await LayeredValues(arguments: ["--data-key", key], environment: [:], dotEnvPath: nil),
            try await LayeredValues(arguments: [], environment: ["SIWA_DATA_KEY": key], dotEnvPath: nil),
        ] {
            let printed = values.printed()
            #expect(!printed.contains(key))
            #expect(printed.contains("data_key = <redacted>"))
        }
    }

    @Test("an unknown flag or file key is refused, naming it")
    func unknownKeys() async throws {
        await #expect { _ = try await LayeredValues(commandArguments: ["--prot", "8080"]) } throws: { error in
            (error as? ConfigurationError)?.field == "--prot"
        }
        let directory = try Self.directory(["c.json": #"{"prot": 8080}"#])
        defer { try? FileManager.default.removeItem(at: directory) }
        await #expect { _ = try await LayeredValues(arguments: [], configFile: directory.appendingPathComponent("c.json").path, environment: [:], dotEnvPath: nil) } throws: { error in
            (error as? ConfigurationError)?.field == "prot"
        }
    }

    @Test("upstream, upstream_timeout_ms, skip_auth_routes, upstream_http2 and the edge's keys: a bad value stops start-up naming its key; a file's JSON array keeps a regex with a comma whole")
    func upstreamKeys() async throws {
        let refused: [([String], String)] = [
            (["--upstream", "127.0.0.1:3000"], "upstream"),
            (["--upstream", "ftp://127.0.0.1/"], "upstream"),
            (["--upstream", "http://127.0.0.1:3000/?a=b"], "upstream"),
            (["--upstream", "http://127.0.0.1:3000", "--upstream-timeout-ms", "0"], "upstream_timeout_ms"),
            (["--upstream", "http://127.0.0.1:3000", "--skip-auth-routes", "GET=^/health($"], "skip_auth_routes"),
            (["--skip-auth-routes", "^/health$"], "skip_auth_routes"),
            (["--upstream-http2", "true"], "upstream_http2"),
            (["--upstream", "https://127.0.0.1:3000", "--upstream-http2", "true"], "upstream_http2"),
            (["--upstream", "http://127.0.0.1:3000", "--upstream-http2", "maybe"], "upstream_http2"),
            (["--tls-cert-file", "/nonexistent.pem", "--tls-key-file", "/nonexistent.key", "--tls-domains", "a.example.com"], "tls_cert_file"),
            (["--tls-cert-file", "/etc/hostname"], "tls_key_file"),
            (["--tls-domains", "*.example.com"], "tls_domains"),
            (["--tls-domains", "a.example.com", "--acme-challenges", "dns-01"], "acme_challenges"),
            (["--tls-domains", "a.example.com", "--acme-directory", "http://ca.example/dir"], "acme_directory"),
            (["--tls-domains", "a.example.com", "--https-port", "8443", "--port", "8443"], "https_port"),
            (["--acme-email", "a@example.com"], "acme_email"),
            (["--tls-domains", "a.example.com", "--h2-max-concurrent-streams", "0"], "h2_max_concurrent_streams"),
            (["--tls-domains", "a.example.com", "--hsts-max-age", "-1"], "hsts_max_age"),
            (["--tls-domains", "a.example.com", "--acme-eab-kid", "kid-1"], "acme_eab_hmac_key"),
            (["--tls-domains", "a.example.com", "--acme-eab-hmac-key", "c2VjcmV0LWhtYWMta2V5LXZhbHVlLTEyMzQ1Ng"], "acme_eab_kid"),
            (["--tls-domains", "a.example.com", "--acme-eab-kid", "kid-1", "--acme-eab-hmac-key", "not base64url!"], "acme_eab_hmac_key"),
            (["--tls-domains", "a.example.com", "--acme-eab-kid", "kid-1", "--acme-eab-hmac-key", "c2hvcnQ"], "acme_eab_hmac_key"),
            (["--tls-domains", "a.example.com", "--acme-eab-kid", "kid 1", "--acme-eab-hmac-key", "c2VjcmV0LWhtYWMta2V5LXZhbHVlLTEyMzQ1Ng"], "acme_eab_kid"),
            (["--acme-eab-kid", "kid-1", "--acme-eab-hmac-key", "c2VjcmV0LWhtYWMta2V5LXZhbHVlLTEyMzQ1Ng"], "acme_eab_kid"),
        ]
        for (arguments, field) in refused {
            let values = try await LayeredValues(arguments: arguments, environment: [:], dotEnvPath: nil)
            #expect("\(arguments)") { _ = try ServePlan(values: values, creatingLocalKey: false) } throws: { error in
                // An error names the key, never the HMAC key's value.
                (error as? ConfigurationError)?.field == field && !"\(error)".contains("c2VjcmV0") && !"\(error)".contains("not base64url!")
            }
        }
        // The binding reaches the settings, its key padded or not, and is never printed.
        for encoded in ["c2VjcmV0LWhtYWMta2V5LXZhbHVlLTEyMzQ1Ng", "c2VjcmV0LWhtYWMta2V5LXZhbHVlLTEyMzQ1Ng=="] {
            let values = try await LayeredValues(
                arguments: ["--tls-domains", "a.example.com", "--acme-eab-kid", "kid-1"], environment: ["SIWA_ACME_EAB_HMAC_KEY": encoded], dotEnvPath: nil
            )
            let plan = try ServePlan(values: values, creatingLocalKey: false)
            guard case .acme(let acme)? = plan.settings.edge?.source else {
                Issue.record("no ACME settings")
                continue
            }
            #expect(acme.externalAccount?.keyID == "kid-1")
            #expect(acme.externalAccount.map { String(decoding: $0.macKey, as: UTF8.self) } == "secret-hmac-key-value-123456")
            #expect(!"\(acme)".contains("c2VjcmV0") && !"\(acme)".contains("secret-hmac"))
            #expect(values.printed().contains("acme_eab_hmac_key = <redacted>"), "\(values.printed())")
            #expect(!values.printed().contains("c2VjcmV0"))
        }
        let directory = try Self.directory(["c.json": #"{"upstream": "http://127.0.0.1:3000/app/", "skip_auth_routes": ["GET=^/a{1,2}$", "^/public/"]}"#])
        defer { try? FileManager.default.removeItem(at: directory) }
        let fromFile = try await LayeredValues(arguments: [], configFile: directory.appendingPathComponent("c.json").path, environment: [:], dotEnvPath: nil)
        let upstream = try #require(try ServePlan(values: fromFile, creatingLocalKey: false).settings.upstream)
        #expect(upstream.skipAuthRoutes.map(\.description) == ["GET=^/a{1,2}$", "^/public/"])
        #expect(upstream.origin == "http://127.0.0.1:3000")
        #expect(upstream.basePath == "/app")
        #expect(upstream.timeoutMS == 30_000)
        let fromEnvironment = try await LayeredValues(
            arguments: [], environment: ["SIWA_UPSTREAM": "http://[::1]:3000", "SIWA_SKIP_AUTH_ROUTES": "GET=^/health$, POST=^/hook$"], dotEnvPath: nil
        )
        let routes = try #require(try ServePlan(values: fromEnvironment, creatingLocalKey: false).settings.upstream).skipAuthRoutes
        #expect(routes.map(\.description) == ["GET=^/health$", "POST=^/hook$"])
        #expect(routes.map { $0.method?.rawValue } == ["GET", "POST"])
    }

    @Test("cookie_domain, check_cache_seconds, public_url and data_key in local mode: bad values stop serve naming the key; good ones reach the settings")
    func frontKeys() async throws {
        let refused: [([String], String)] = [
            (["--cookie-domain", "example"], "cookie_domain"),
            (["--cookie-domain", "10.0.0.1"], "cookie_domain"),
            (["--cookie-domain", "https://example.com"], "cookie_domain"),
            // Local mode without public_url returns to 127.0.0.1, which no domain covers.
            (["--cookie-domain", ".example.com"], "cookie_domain"),
            (["--public-url", "https://auth.example.com", "--cookie-domain", ".example.org"], "cookie_domain"),
            (["--check-cache-seconds", "-1"], "check_cache_seconds"),
            (["--check-cache-seconds", "soon"], "check_cache_seconds"),
            (["--trusted-proxies", "127.0.0.1,proxy.example.com"], "trusted_proxies"),
            (["--trusted-proxies", "10.0.0.0/33"], "trusted_proxies"),
            (["--allowed-redirect-domains", "*.example.com"], "allowed_redirect_domains"),
            (["--allowed-redirect-domains", "app.example.com:8443"], "allowed_redirect_domains"),
            // 16 bytes, and not base64 at all: a configuration error naming the key (exit 78), not the store's.
            (["--data-key", "c2l4dGVlbiBieXRlcyBrZXk="], "data_key"),
            (["--data-key", "not a key"], "data_key"),
        ]
        for (arguments, field) in refused {
            let values = try await LayeredValues(arguments: arguments, environment: [:], dotEnvPath: nil)
            #expect("\(arguments)") { _ = try ServePlan(values: values, creatingLocalKey: false) } throws: { ($0 as? ConfigurationError)?.field == field }
        }
        let values = try await LayeredValues(
            arguments: ["--public-url", "http://auth.example.localhost:8080", "--cookie-domain", ".Example.localhost", "--check-cache-seconds", "0", "--emulator-port", "9191"],
            environment: [:], dotEnvPath: nil
        )
        let settings = try ServePlan(values: values, creatingLocalKey: false).settings
        #expect(settings.cookieDomain == "example.localhost")
        #expect(settings.checkCacheSeconds == 0)
        // Local mode behind public_url: Apple returns there, and the browser meets the emulator on the same name.
        #expect(settings.returnURL.absoluteString == "http://auth.example.localhost:8080/auth/apple/callback")
        #expect(settings.apple.authorizeBaseURL.absoluteString == "http://auth.example.localhost:9191")
        #expect(settings.apple.appleBaseURL.absoluteString == "http://127.0.0.1:9191")
        let defaults = try ServePlan(values: try await LayeredValues(arguments: [], environment: [:], dotEnvPath: nil), creatingLocalKey: false).settings
        #expect(defaults.checkCacheSeconds == 5)
        #expect(defaults.cookieDomain == nil)
        #expect(defaults.returnURL.absoluteString == "http://127.0.0.1:8080/auth/apple/callback")
    }

    @Test("event_loops: 0, 257, a word or a fraction stop serve naming the key; a good value runs siwa serve with that many event loops (its threads, counted in /proc), through which a person signs in and is then let by /auth/check; unset, NIO's default of one a core")
    func eventLoops() async throws {
        for bad in ["0", "257", "-2", "many", "1.5"] {
            let values = try await LayeredValues(arguments: ["--event-loops", bad], environment: [:], dotEnvPath: nil)
            #expect("\(bad)") { _ = try ServePlan(values: values, creatingLocalKey: false) } throws: {
                ($0 as? ConfigurationError)?.field == "event_loops"
            }
        }
        let unset = try ServePlan(values: try await LayeredValues(arguments: [], environment: [:], dotEnvPath: nil), creatingLocalKey: false)
        #expect(unset.eventLoops == nil)
        let fromFile = try Self.directory(["siwa.json": #"{"event_loops": 2}"#])
        defer { try? FileManager.default.removeItem(at: fromFile) }
        let filed = try await LayeredValues(arguments: ["--config", fromFile.appendingPathComponent("siwa.json").path], environment: [:], dotEnvPath: nil)
        #expect(try ServePlan(values: filed, creatingLocalKey: false).eventLoops == 2)
        for loops in [1, 3] {
            try await LocalSite.runProcess(settings: ["event_loops": String(loops)]) { site, process in
                #expect(Self.eventLoopThreads(process.pid) == loops, "siwa serve --event-loops \(loops)")
                try await Visit.withClient { visit in
                    #expect(try await visit.send(site.url("/auth/check")).status == 401)
                    let user = try #require(site.users.first)
                    let (session, _) = try await visit.signIn(site, user: user)
                    let check = try await visit.send(site.url("/auth/check"), cookies: ["siwa_session": session])
                    #expect(check.status == 202 && check.headers["X-Auth-Request-User"].first == user.sub, "\(check.status)")
                }
                #expect(Self.eventLoopThreads(process.pid) == loops, "after answering, still \(loops)")
            }
        }
    }

    /// The threads of process `pid` that are NIO's event loops (NIO names the singleton group's `NIO-SGLTN-<group>-#<n>`; its blocking pool's are `SGLTN-TP-#<n>`).
    static func eventLoopThreads(_ pid: pid_t) -> Int {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.filter { task in
            let name = (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8)) ?? ""
            return name.hasPrefix("NIO-SGLTN-")
        }.count
    }

    @Test("socket: without public_url, in a directory that does not exist, or on a path holding a file, serve stops naming the key and the file is left alone; a good one reaches the settings and trusts its peers")
    func socketKey() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-socket-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("notes.txt").path
        try "keep me".write(toFile: file, atomically: true, encoding: .utf8)
        let refused: [[String]] = [
            ["--socket", directory.appendingPathComponent("siwa.sock").path],
            ["--socket", directory.appendingPathComponent("missing/siwa.sock").path, "--public-url", "https://auth.example.com"],
            ["--socket", file, "--public-url", "https://auth.example.com"],
            ["--socket", "/tmp/" + String(repeating: "s", count: 110), "--public-url", "https://auth.example.com"],
        ]
        for arguments in refused {
            let values = try await LayeredValues(arguments: arguments, environment: [:], dotEnvPath: nil)
            #expect("\(arguments)") { _ = try ServePlan(values: values, creatingLocalKey: false) } throws: { ($0 as? ConfigurationError)?.field == "socket" }
        }
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "keep me")
        let path = directory.appendingPathComponent("siwa.sock").path
        let values = try await LayeredValues(arguments: ["--socket", path, "--public-url", "https://auth.example.com"], environment: [:], dotEnvPath: nil)
        let plan = try ServePlan(values: values, creatingLocalKey: false)
        #expect(plan.settings.socketPath == path)
        #expect(plan.settings.origin == "https://auth.example.com")
        // A socket a server answers on is not taken over; a stale one (nobody listening) is free to replace.
        let listening = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(unixDomainSocketPath: path).get()
        #expect { try ServePlan.checkSocketFree(path) } throws: { ($0 as? ConfigurationError)?.field == "socket" }
        try await listening.close()
        // A socket file nobody listens on, as a crash leaves it (a server closed by NIO removes its file).
        let stale = directory.appendingPathComponent("stale.sock").path
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = ServePlan.unixAddress(stale)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        close(fd)
        #expect(FileManager.default.fileExists(atPath: stale))
        #expect(throws: Never.self) { try ServePlan.checkSocketFree(stale) }
        // A peer on the socket has no address: it is the proxy in front. Without the socket, such a peer is not.
        #expect(try TrustedProxies([], socketPeers: true).contains(nil))
        #expect(try TrustedProxies(["127.0.0.1"]).contains(nil) == false)
        #expect(try TrustedProxies([], socketPeers: true).contains("203.0.113.9") == false)
    }

    @Test("SIGHUP: the access policy of the configuration as it is now is put in force, the change named rule by rule; a file that no longer reads changes nothing")
    func policyReload() async throws {
        let directory = try Self.directory(["c.json": #"{"allowed_emails": ["a@example.org"], "allowed_subs": ["001.x"]}"#])
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("c.json")
        let arguments = ["--config", file.path, "--allowed-email-domains", "example.com"]
        let front = try ServePlan(values: try await LayeredValues(commandArguments: arguments), creatingLocalKey: false).settings.front
        #expect(front.policy == AccessPolicy(emails: ["a@example.org"], emailDomains: ["example.com"], subjects: ["001.x"]))
        // A copy of the settings (what the controllers hold) sees what the reload puts in force.
        let held = front
        let reloader = PolicyReloader(arguments: arguments, front: front, logger: Logger(label: "siwa.test"))

        try #"{"allowed_emails": ["b@example.org", "c@example.org"]}"#.write(to: file, atomically: true, encoding: .utf8)
        let before = front.policy
        await reloader.reload()
        #expect(held.policy == AccessPolicy(emails: ["b@example.org", "c@example.org"], emailDomains: ["example.com"]))
        #expect(!held.policy.allows(subject: "001.x", email: "a@example.org"))
        #expect(held.policy.allows(subject: "001.y", email: "C@example.org"))
        #expect(AccessConfiguration.changes(from: before, to: held.policy) == [
            "allowed_emails +b@example.org +c@example.org -a@example.org", "allowed_subs -001.x",
        ])

        try "{ not json".write(to: file, atomically: true, encoding: .utf8)
        await reloader.reload()
        #expect(held.policy == AccessPolicy(emails: ["b@example.org", "c@example.org"], emailDomains: ["example.com"]))
    }

    @Test("the doctor runs serve's own parse: a value only serve reads, broken, fails the doctor too")
    func doctorSharesServesParse() async throws {
        let directory = try Self.directory([:])
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = directory.appendingPathComponent("d.sqlite").path
        let broken = try await LayeredValues(commandArguments: ["--db", database, "--rate-limit-per-minute", "many"])
        let serve = try #require(await DoctorCommand.checks(broken, online: false).first { $0.name == "serve" })
        #expect(!serve.passed)
        #expect(serve.message.contains("rate_limit_per_minute"))
        let badProxy = try await LayeredValues(commandArguments: ["--db", database, "--trusted-proxies", "10.0.0.0/33"])
        let proxyCheck = try #require(await DoctorCommand.checks(badProxy, online: false).first { $0.name == "serve" })
        #expect(!proxyCheck.passed)
        #expect(proxyCheck.message.contains("trusted_proxies") && proxyCheck.message.contains("10.0.0.0/33"))
        let fine = try await LayeredValues(commandArguments: ["--db", database])
        let checks = await DoctorCommand.checks(fine, online: false)
        let failing = checks.filter { !$0.passed }.map(\.line)
        #expect(failing.isEmpty, "\(failing)")
        // Checking local mode creates nothing: no data key file beside the database.
        let keyFileExists = FileManager.default.fileExists(atPath: database + ".key")
        #expect(!keyFileExists)
    }

    @Test("access_rules, groups and allowed_groups: read from the file, the environment and the command line; a bad rule or group stops serve and fails the doctor naming its index and field")
    func accessConfiguration() async throws {
        let rules = #"[{"paths": ["^/health$"], "policy": "public"}, {"hosts": ["*.example.com"], "policy": "allow", "groups": ["admins"]}]"#
        let directory = try Self.directory(["c.json": #"{"access_rules": \#(rules), "groups": {"admins": ["ada@example.com", "@example.org"]}, "allowed_groups": ["admins"]}"#])
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = directory.appendingPathComponent("d.sqlite").path
        let file = directory.appendingPathComponent("c.json").path
        let access = try ServePlan(values: try await LayeredValues(commandArguments: ["--config", file, "--db", database]), creatingLocalKey: false).settings.front.access
        #expect(access.rules.map(\.label) == ["0", "1"])
        #expect(access.configuration.global.groups == ["admins"])
        #expect(access.groups(subject: "s", email: "eve@example.org") == ["admins"])
        // JSON text on the command line.
        let flagged = try ServePlan(values: try await LayeredValues(commandArguments: ["--db", database, "--access-rules", rules, "--groups", #"{"ops": ["sub:001.x"]}"#]), creatingLocalKey: false)
        #expect(flagged.settings.front.access.rules.count == 2 && flagged.settings.front.access.groups(subject: "001.x", email: nil) == ["ops"])
        for (flag, value, field, names) in [
            ("--access-rules", #"[{"policy": "public"}, {"paths": ["(x"], "policy": "deny"}]"#, "access_rules", "access_rules[1].paths[0]"),
            ("--access-rules", #"[{"policy": "allow", "groupz": ["a"]}]"#, "access_rules", "access_rules[0].groupz"),
            ("--groups", #"{"Admins": ["a@example.com"]}"#, "groups", "groups.Admins"),
            ("--groups", #"{"admins": ["nobody"]}"#, "groups", "groups.admins[0]"),
            ("--allowed-groups", "Bad Group", "allowed_groups", "Bad Group"),
        ] {
            let values = try await LayeredValues(commandArguments: ["--db", database, flag, value])
            #expect(throws: ConfigurationError.self) { try ServePlan(values: values, creatingLocalKey: false) }
            let serve = try #require(await DoctorCommand.checks(values, online: false).first { $0.name == "serve" })
            #expect(!serve.passed)
            #expect(serve.message.contains(field) && serve.message.contains(names), "\(serve.message)")
        }
    }

    @Test("a change of the config file on disk is put in force without a signal; a file that no longer reads keeps what is in force")
    func configFileWatched() async throws {
        let directory = try Self.directory(["c.json": #"{"allowed_emails": ["a@example.org"]}"#])
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("c.json")
        let arguments = ["--config", file.path]
        let values = try await LayeredValues(commandArguments: arguments)
        let front = try ServePlan(values: values, creatingLocalKey: false).settings.front
        let reloader = PolicyReloader(arguments: arguments, front: front, logger: Logger(label: "siwa.test"), watched: values.configPath)
        let running = Task { try await reloader.run() }
        defer { running.cancel() }
        try await Task.sleep(for: .milliseconds(200))
        try #"{"allowed_emails": ["b@example.org"], "groups": {"ops": ["b@example.org"]}, "access_rules": [{"paths": ["^/x"], "policy": "deny"}]}"#
            .write(to: file, atomically: true, encoding: .utf8)
        var seen = false
        for _ in 0..<100 where !seen {
            try await Task.sleep(for: .milliseconds(100))
            seen = front.policy.emails == ["b@example.org"]
        }
        #expect(seen)
        #expect(front.access.rules.count == 1 && front.access.groups(subject: "s", email: "b@example.org") == ["ops"])
        try "{ not json".write(to: file, atomically: true, encoding: .utf8)
        try await Task.sleep(for: .milliseconds(1500))
        #expect(front.policy.emails == ["b@example.org"] && front.access.rules.count == 1)
    }
}
