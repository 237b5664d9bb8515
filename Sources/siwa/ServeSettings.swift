import AppleIDEmulator
import AppleSignIn
import ArgumentParser
import Foundation
import SignInServer

/// Configuration values layered as: command line > environment (`SIWA_*`) > config file (JSON) > defaults.
struct LayeredValues {
    private let cli: [String: String]
    private let environment: [String: String]
    private let file: [String: String]

    /// Every key `siwa serve` understands; the README's configuration reference lists the same.
    static let keys = [
        "host", "port", "db", "emulator_port", "team_id", "key_id", "key_file", "services_id", "return_url",
        "extra_audiences", "apple_base_url", "accepted_issuers", "client_secret_lifetime", "session_lifetime",
        "button_style", "button_title", "button_height", "button_corner_radius", "apple_timeout_ms", "log_level",
        "data_key", "notifications_url", "public_url", "rate_limit_per_minute", "trusted_proxies",
    ]

    init(cli: [String: String?], configFile: String?, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        self.cli = cli.compactMapValues { $0 }
        self.environment = environment
        let path = configFile ?? environment["SIWA_CONFIG"]
        guard let path else {
            file = [:]
            return
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError(field: "config", "cannot read \(path)")
        }
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw ConfigurationError(field: "config", "\(path) is not a JSON object of configuration keys")
        }
        var values: [String: String] = [:]
        for (key, value) in object {
            guard Self.keys.contains(key) else {
                throw ConfigurationError(field: key, "is not a configuration key; known keys: \(Self.keys.joined(separator: ", "))")
            }
            if let list = value as? [Any] {
                values[key] = list.map { "\($0)" }.joined(separator: ",")
            } else {
                values[key] = "\(value)"
            }
        }
        file = values
    }

    /// The value of `key` from the highest layer that has it.
    func string(_ key: String) -> String? {
        cli[key] ?? environment["SIWA_" + key.uppercased()] ?? file[key]
    }

    /// Every known key with the value of its highest layer.
    var all: [String: String] {
        var result: [String: String] = [:]
        for key in Self.keys { if let value = string(key) { result[key] = value } }
        return result
    }

    /// A comma-separated list.
    func list(_ key: String) -> [String] {
        (string(key) ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// An integer, refusing what is not one.
    func int(_ key: String, default fallback: Int) throws -> Int {
        guard let text = string(key) else { return fallback }
        guard let value = Int(text) else { throw ConfigurationError(field: key, "must be a whole number, got \"\(text)\"") }
        return value
    }
}

/// What `siwa serve` will run: settings for the server and, in local mode, the emulator's.
struct ServePlan {
    var settings: ServerSettings
    var emulator: EmulatorConfiguration?
    var emulatorPort: Int
    var logLevel: String
}

extension ServePlan {
    /// Reads settings from the layers; Apple mode when any Apple credential is given (then all are required).
    init(values: LayeredValues) throws {
        let host = values.string("host") ?? "127.0.0.1"
        let port = try values.int("port", default: 8080)
        guard (0...65535).contains(port) else { throw ConfigurationError(field: "port", "must be between 0 and 65535") }
        let emulatorPort = try values.int("emulator_port", default: 9090)
        let appleFields = ["team_id", "key_id", "key_file", "services_id", "return_url"]
        let given = appleFields.filter { values.string($0) != nil }
        let sessionLifetime = TimeInterval(try values.int("session_lifetime", default: 7 * 86_400))
        let button = try ButtonSettings(
            style: values.string("button_style").map { text in
                guard let style = ButtonSettings.Style(rawValue: text) else {
                    throw ConfigurationError(field: "button_style", "must be black, white or white-outline")
                }
                return style
            } ?? .black,
            title: values.string("button_title").map { text in
                guard let title = ButtonSettings.Title(rawValue: text) else {
                    throw ConfigurationError(field: "button_title", "must be sign-in, continue or sign-up")
                }
                return title
            } ?? .signIn,
            height: values.int("button_height", default: 44),
            cornerRadius: values.int("button_corner_radius", default: 8)
        )
        let timeout = try values.int("apple_timeout_ms", default: 10_000)
        let database = values.string("db") ?? "./siwa.sqlite"
        logLevel = values.string("log_level") ?? "info"
        let rateLimit = try values.int("rate_limit_per_minute", default: 60)
        let trustedProxies = values.list("trusted_proxies")

        if given.isEmpty {
            let publicHost = (host == "0.0.0.0" || host == "::") ? "127.0.0.1" : host
            let origin = "http://\(publicHost):\(port)"
            let returnURL = origin + "/auth/apple/callback"
            let apple = try AppleSignInConfiguration(
                teamID: EmulatorConfiguration.testTeamID, keyID: EmulatorConfiguration.testKeyID,
                servicesID: EmulatorConfiguration.testServicesID, extraAudiences: [EmulatorConfiguration.testBundleID],
                returnURLs: [returnURL], privateKeyPEM: EmulatorConfiguration.testPrivateKeyPEM,
                appleBaseURL: "http://127.0.0.1:\(emulatorPort)"
            )
            let dataKeys = values.list("data_key").isEmpty ? [try LocalDataKey.loadOrCreate(path: database.contains("://") ? "./siwa.sqlite.key" : database + ".key")] : values.list("data_key")
            settings = ServerSettings(mode: .local, host: host, port: port, database: database, apple: apple, sessionLifetime: sessionLifetime, button: button, appleTimeoutMS: timeout, dataKeys: dataKeys)
            settings.rateLimitPerMinute = rateLimit
            settings.trustedProxies = trustedProxies
            emulator = .defaults(redirectURIs: [returnURL], notificationURL: origin + "/auth/apple/notifications")
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
            clientSecretLifetime: TimeInterval(try values.int("client_secret_lifetime", default: 86_400))
        )
        if apple.isApple, apple.returnURLs[0].scheme != "https" {
            throw ConfigurationError(field: "return_url", "must be https in Apple mode")
        }
        let dataKeys = values.list("data_key")
        guard !dataKeys.isEmpty else {
            throw ConfigurationError(field: "data_key", "is required in Apple mode: refresh tokens are encrypted at rest with it. Create one with `openssl rand -base64 32`; to rotate, list the new key first, comma-separated, then the old ones")
        }
        settings = ServerSettings(mode: .apple, host: host, port: port, database: database, apple: apple, sessionLifetime: sessionLifetime, button: button, appleTimeoutMS: timeout, dataKeys: dataKeys)
        settings.rateLimitPerMinute = rateLimit
        settings.trustedProxies = trustedProxies
        emulator = nil
        self.emulatorPort = emulatorPort
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
