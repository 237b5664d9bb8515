import AppleSignIn
import Configuration
import Foundation
import SystemPackage

/// The configuration `siwa serve`, `siwa doctor` and `siwa migrate-users` read, through swift-configuration's
/// providers layered as: command line > environment (`SIWA_*`) > a `.env` file in the working directory > the
/// config file (JSON) > the defaults in `ServePlan`. Every key of `SettingKey.all` is settable in every layer.
struct LayeredValues: Sendable {
    /// A layer, named as `--print-config` shows it.
    private struct Layer: Sendable {
        var name: String
        var provider: any ConfigProvider
    }

    private static let fileLayer = "config file"
    private let layers: [Layer]
    private let reader: ConfigReader
    /// The config file's values of JSON keys (`oidc_clients`), as JSON text: swift-configuration's JSON file
    /// provider takes strings, numbers, booleans and arrays of them, not arrays of objects.
    private let fileJSON: [String: String]
    /// The config file read, if any (`--config`, `SIWA_CONFIG`): watched by `serve` for changes to its access rules.
    let configPath: String?

    /// Layers for `arguments` (the command's own, after the subcommand), the process environment, `./.env` and the
    /// config file named by `--config`, `SIWA_CONFIG` or `configFile`.
    init(arguments: [String], configFile: String? = nil, environment: [String: String] = ProcessInfo.processInfo.environment, dotEnvPath: String? = ".env") async throws {
        let secretFlags = Set(SettingKey.all.filter(\.isSecret).map(\.flag))
        let commandLine = CommandLineArgumentsProvider(arguments: ["siwa"] + arguments, secretsSpecifier: .specific(secretFlags))
            .mapKeys { key in AbsoluteConfigKey(key.components.flatMap { $0.split(separator: "_").map(String.init) }) }
        try await self.init(commandLine: Layer(name: "command line", provider: commandLine), configFile: configFile, environment: environment, dotEnvPath: dotEnvPath)
    }

    /// Layers with the command line given as values (what a caller has already parsed, and tests).
    init(cli: [String: String?], configFile: String?, environment: [String: String] = ProcessInfo.processInfo.environment, dotEnvPath: String? = nil) async throws {
        var values: [AbsoluteConfigKey: ConfigValue] = [:]
        for (name, value) in cli {
            guard let value else { continue }
            let key = SettingKey.named(name)
            values[AbsoluteConfigKey([name])] = ConfigValue(key?.isList == true ? .stringArray(Self.split(value)) : .string(value), isSecret: key?.isSecret ?? false)
        }
        try await self.init(commandLine: Layer(name: "command line", provider: InMemoryProvider(name: "command line", values: values)), configFile: configFile, environment: environment, dotEnvPath: dotEnvPath)
    }

    private init(commandLine: Layer, configFile: String?, environment: [String: String], dotEnvPath: String?) async throws {
        let secretVariables = Set(SettingKey.all.filter(\.isSecret).map(\.environmentName))
        var layers = [commandLine]
        layers.append(Layer(name: "environment", provider: EnvironmentVariablesProvider(environmentVariables: environment, secretsSpecifier: .specific(secretVariables)).prefixKeys(with: "siwa")))
        if let dotEnvPath, FileManager.default.fileExists(atPath: dotEnvPath) {
            do {
                let file = try await EnvironmentVariablesProvider(environmentFilePath: FilePath(dotEnvPath), secretsSpecifier: .specific(secretVariables))
                layers.append(Layer(name: ".env", provider: file.prefixKeys(with: "siwa")))
            } catch {
                throw ConfigurationError(field: "config", "cannot read \(dotEnvPath): lines must be KEY=value")
            }
        }
        let configPath = configFile ?? ConfigReader(provider: commandLine.provider).string(forKey: "config") ?? environment["SIWA_CONFIG"]
        var fileJSON: [String: String] = [:]
        if let configPath {
            let object = try Self.checkFileKeys(configPath)
            // JSON keys holding JSON are taken out here; the provider reads a copy without them (owner-only, deleted
            // once read: it may hold the other secrets of the file).
            var rest = object
            for key in SettingKey.all where key.isJSON {
                guard let value = object[key.name], !(value is String) else { continue }
                let data = try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .withoutEscapingSlashes, .fragmentsAllowed])
                fileJSON[key.name] = String(decoding: data, as: UTF8.self)
                rest.removeValue(forKey: key.name)
            }
            var readPath = configPath
            var copy: String?
            if rest.count != object.count {
                let path = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-config-\(UUID().uuidString).json").path
                guard FileManager.default.createFile(atPath: path, contents: try JSONSerialization.data(withJSONObject: rest), attributes: [.posixPermissions: 0o600]) else {
                    throw ConfigurationError(field: "config", "cannot read \(configPath): no room for a temporary copy in \(FileManager.default.temporaryDirectory.path)")
                }
                readPath = path
                copy = path
            }
            defer { if let copy { try? FileManager.default.removeItem(atPath: copy) } }
            do {
                let file = try await FileProvider<JSONSnapshot>(filePath: FilePath(readPath))
                layers.append(Layer(name: Self.fileLayer, provider: file))
            } catch {
                throw ConfigurationError(field: "config", "\(configPath) is not a JSON object of configuration keys: \(error)")
            }
        }
        self.fileJSON = fileJSON
        self.configPath = configPath
        self.layers = layers
        reader = ConfigReader(providers: layers.map(\.provider))
    }

    /// Refuses a config file that is not a JSON object of known keys, naming the unknown key; returns the object.
    private static func checkFileKeys(_ path: String) throws -> [String: Any] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError(field: "config", "cannot read \(path)")
        }
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw ConfigurationError(field: "config", "\(path) is not a JSON object of configuration keys")
        }
        for key in object.keys.sorted() where SettingKey.named(key) == nil {
            throw ConfigurationError(field: key, "is not a configuration key; known keys: \(SettingKey.all.map(\.name).joined(separator: ", "))")
        }
        return object
    }

    private static func split(_ text: String) -> [String] {
        text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// The value of `key` from the highest layer that has it (a list joined with commas).
    func string(_ key: String) -> String? {
        if SettingKey.named(key)?.isList == true {
            let values = list(key)
            return values.isEmpty ? nil : values.joined(separator: ",")
        }
        // The command line splits every value at its commas (and keeps every piece): JSON is put back together.
        if SettingKey.named(key)?.isJSON == true, source(of: key) == "command line", let pieces = reader.stringArray(forKey: ConfigKey(key)) {
            return pieces.joined(separator: ",")
        }
        if let text = reader.string(forKey: ConfigKey(key)) { return text }
        if let json = fileJSON[key] { return json }
        // A JSON number or boolean in the file.
        if let number = reader.int(forKey: ConfigKey(key)) { return String(number) }
        return reader.bool(forKey: ConfigKey(key)).map { String($0) }
    }

    /// A list: comma-separated on the command line and in the environment, a JSON array (or one string) in the file.
    /// The entries of a file's array are taken whole: that is how an entry containing a comma (a regex) is written.
    func list(_ key: String) -> [String] {
        if let values = reader.stringArray(forKey: ConfigKey(key)) {
            if source(of: key) == Self.fileLayer {
                return values.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            }
            return values.flatMap(Self.split)
        }
        return reader.string(forKey: ConfigKey(key)).map(Self.split) ?? []
    }

    /// An integer, refusing what is not one.
    func int(_ key: String, default fallback: Int) throws -> Int {
        if let value = reader.int(forKey: ConfigKey(key)) { return value }
        guard let text = reader.string(forKey: ConfigKey(key)) else { return fallback }
        guard let value = Int(text) else { throw ConfigurationError(field: key, "must be a whole number, got \"\(text)\"") }
        return value
    }

    /// Every known key with the value of its highest layer.
    var all: [String: String] {
        var result: [String: String] = [:]
        for key in SettingKey.all { if let value = string(key.name) { result[key.name] = value } }
        return result
    }

    /// The name of the layer `key`'s value comes from, or nil when no layer sets it (the default applies).
    func source(of key: String) -> String? {
        let absolute = AbsoluteConfigKey([key])
        for layer in layers {
            for type in [ConfigType.string, .stringArray, .int, .bool] {
                if let found = try? layer.provider.value(forKey: absolute, type: type), found.value != nil { return layer.name }
            }
        }
        return fileJSON[key] == nil ? nil : Self.fileLayer
    }
}

extension LayeredValues {
    /// Layers for a command's own arguments, refusing a flag that names no key (so a typo is not silently ignored).
    init(commandArguments arguments: [String]) async throws {
        let known = Set(SettingKey.all.map(\.flag) + ["--config"])
        for argument in arguments where argument.hasPrefix("--") {
            let flag = String(argument.prefix { $0 != "=" })
            guard known.contains(flag) else {
                throw ConfigurationError(field: flag, "is not a configuration flag; every key is one: \(SettingKey.all.map(\.flag).joined(separator: ", ")), --config")
            }
        }
        try await self.init(arguments: arguments)
    }

    /// The effective configuration, one key a line with where its value came from; secrets redacted.
    func printed() -> String {
        SettingKey.all.map { key in
            guard let value = string(key.name), let source = source(of: key.name) else {
                return "\(key.name) = (default)"
            }
            return "\(key.name) = \(key.isSecret ? "<redacted>" : value)  (\(source))"
        }.joined(separator: "\n")
    }

    /// The help text listing every key in its three spellings.
    static var help: String {
        "Every key is a flag, an environment variable and a key of the JSON file given by --config or SIWA_CONFIG; "
            + "the command line wins over the environment, which wins over ./.env, which wins over the file. Lists are "
            + "comma-separated on the command line and in the environment, JSON arrays in the file.\n\n"
            + SettingKey.all.map { "  \($0.flag)  \($0.environmentName)  \($0.name)\($0.isSecret ? "  (secret)" : "")" }.joined(separator: "\n")
    }
}
