import ArgumentParser
import Foundation
import Logging
import AppleSignIn
import SignInServer

/// `siwa keys`: siwa's own signing keys (ES256: the `X-Siwa-Assertion` the front hands on, and id_tokens of clients
/// that ask for ES256; RS256: the OpenID Provider's id_tokens), kept in the store of `--db` / `SIWA_DB` and shared by
/// every instance.
struct KeysCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys",
        abstract: "List or rotate siwa's signing keys (the identity assertion's and the OpenID Provider's).",
        discussion: "Example: siwa keys rotate --db postgres://siwa@db/siwa --algorithm all",
        subcommands: [List.self, Rotate.self]
    )

    struct Options: ParsableArguments {
        @Option(help: "A JSON file of configuration keys, as for serve (SIWA_CONFIG).") var config: String?
        @Option(help: "The database: a SQLite path or a postgres:// URL (SIWA_DB).") var db: String?
        @Option(help: "The data key(s) that seal private keys at rest (SIWA_DATA_KEY), as for serve.") var dataKey: String?
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "One line per key: kid, algorithm, published, active from, retiring at.", discussion: "Example: siwa keys list --db ./siwa.sqlite")
        @OptionGroup var options: Options

        func run() async throws {
            try await KeysCommand.withStore(options) { store in
                let now = Date()
                for key in try await store.signingKeys() {
                    let state = !key.isPublished(at: now) ? "retired" : key.retiresAt != nil ? "retiring" : key.canSign(at: now) ? "active" : "published, not yet active"
                    CLIOutput.stdout("\(key.kid)  \(key.algorithm)  \(state)  active from \(key.activatesAt.formatted(.iso8601))" + (key.retiresAt.map { "  retires \($0.formatted(.iso8601))" } ?? ""))
                }
            }
        }
    }

    struct Rotate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Publish a new key now, sign with it after --activate-after seconds, and retire the current keys --retire-after seconds after that.",
            discussion: "Example: siwa keys rotate --activate-after 600 --retire-after 3600"
        )
        @OptionGroup var options: Options
        @Option(help: "Seconds before the new key signs (upstreams cache the key set for up to 300 s).") var activateAfter: Int = 600
        @Option(help: "Seconds the replaced keys stay published after the new one activates (id_tokens live 600 s).") var retireAfter: Int = 3600
        @Option(help: "Which keys: ES256 (assertions), RS256 (id_tokens) or all.") var algorithm: String = "all"

        func run() async throws {
            let minimum = Int(ProviderSettings(issuer: "").idTokenLifetime)
            guard activateAfter >= 0, retireAfter >= minimum else {
                throw ValidationError("--activate-after must be >= 0 and --retire-after at least \(minimum) (the longest a signed token lives)")
            }
            let algorithms = algorithm == "all" ? ["ES256", "RS256"] : [algorithm]
            guard algorithms.allSatisfy({ $0 == "ES256" || $0 == "RS256" }) else { throw ValidationError("--algorithm must be ES256, RS256 or all") }
            try await KeysCommand.withStore(options) { store in
                let now = Date()
                let activatesAt = now.addingTimeInterval(TimeInterval(activateAfter))
                for algorithm in algorithms {
                    let key = algorithm == "RS256" ? try ProviderKeys.newRSAKey(now: now, activatesAt: activatesAt) : IdentityAssertions.newKey(now: now, activatesAt: activatesAt)
                    try await store.addSigningKey(key)
                    try await store.retireSigningKeys(activeAt: key.activatesAt, retiresAt: key.activatesAt.addingTimeInterval(TimeInterval(retireAfter)), except: key.kid)
                    CLIOutput.stdout("published \(key.kid) (\(algorithm)); it signs from \(key.activatesAt.formatted(.iso8601)); the \(algorithm) keys it replaces are published until \(key.activatesAt.addingTimeInterval(TimeInterval(retireAfter)).formatted(.iso8601))")
                }
            }
        }
    }

    /// Opens the store the configuration names (running a PostgreSQL pool while `body` runs), migrated.
    static func withStore(_ options: Options, _ body: (any SignInStore) async throws -> Void) async throws {
        try await withStore(options) { store, _ in try await body(store) }
    }

    /// The same, with the configuration read as serve reads it (its access rules and groups).
    static func withStore(_ options: Options, _ body: (any SignInStore, ServePlan) async throws -> Void) async throws {
        let plan: ServePlan
        do {
            plan = try ServePlan(values: await LayeredValues(cli: ["db": options.db, "data_key": options.dataKey], configFile: options.config, dotEnvPath: ".env"))
        } catch let error as ConfigurationError {
            CLIOutput.stderr("siwa: invalid configuration: \(error)")
            throw ExitCode(78)
        }
        var logger = Logger(label: "siwa")
        logger.logLevel = .warning
        // A command has no request waiting on it: it waits for a busy database (its first connection, the migration)
        // rather than failing after the 5 s a request to serve is given.
        let store = try makeStore(settings: plan.settings, logger: logger, operationTimeout: .seconds(60))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for service in store.services { group.addTask { try await service.run() } }
            try await store.migrate()
            try await body(store, plan)
            group.cancelAll()
        }
    }
}
