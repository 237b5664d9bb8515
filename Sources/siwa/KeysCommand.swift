import ArgumentParser
import Foundation
import Logging
import AppleSignIn
import SignInServer

/// `siwa keys`: siwa's own signing keys (the `X-Siwa-Assertion` the front hands on), kept in the store of
/// `--db` / `SIWA_DB` and shared by every instance.
struct KeysCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys",
        abstract: "List or rotate siwa's signing keys (the identity assertion's keys).",
        subcommands: [List.self, Rotate.self]
    )

    struct Options: ParsableArguments {
        @Option(help: "A JSON file of configuration keys, as for serve (SIWA_CONFIG).") var config: String?
        @Option(help: "The database: a SQLite path or a postgres:// URL (SIWA_DB).") var db: String?
        @Option(help: "The data key(s) that seal private keys at rest (SIWA_DATA_KEY), as for serve.") var dataKey: String?
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "One line per key: kid, published, active from, retiring at.")
        @OptionGroup var options: Options

        func run() async throws {
            try await KeysCommand.withStore(options) { store in
                let now = Date()
                for key in try await store.signingKeys() {
                    let state = !key.isPublished(at: now) ? "retired" : key.retiresAt != nil ? "retiring" : key.canSign(at: now) ? "active" : "published, not yet active"
                    print("\(key.kid)  \(state)  active from \(key.activatesAt.formatted(.iso8601))" + (key.retiresAt.map { "  retires \($0.formatted(.iso8601))" } ?? ""))
                }
            }
        }
    }

    struct Rotate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Publish a new key now, sign with it after --activate-after seconds, and retire the current keys --retire-after seconds after that."
        )
        @OptionGroup var options: Options
        @Option(help: "Seconds before the new key signs (upstreams cache the key set for up to 300 s).") var activateAfter: Int = 600
        @Option(help: "Seconds the replaced keys stay published after the new one activates (assertions live 60 s).") var retireAfter: Int = 3600

        func run() async throws {
            guard activateAfter >= 0, retireAfter >= Int(IdentityAssertions.lifetime) else {
                throw ValidationError("--activate-after must be >= 0 and --retire-after at least \(Int(IdentityAssertions.lifetime)) (an assertion's lifetime)")
            }
            try await KeysCommand.withStore(options) { store in
                let now = Date()
                let key = IdentityAssertions.newKey(now: now, activatesAt: now.addingTimeInterval(TimeInterval(activateAfter)))
                try await store.addSigningKey(key)
                try await store.retireSigningKeys(activeAt: key.activatesAt, retiresAt: key.activatesAt.addingTimeInterval(TimeInterval(retireAfter)), except: key.kid)
                print("published \(key.kid); it signs from \(key.activatesAt.formatted(.iso8601)); the keys it replaces are published until \(key.activatesAt.addingTimeInterval(TimeInterval(retireAfter)).formatted(.iso8601))")
            }
        }
    }

    /// Opens the store the configuration names (running a PostgreSQL pool while `body` runs), migrated.
    static func withStore(_ options: Options, _ body: (any SignInStore) async throws -> Void) async throws {
        let plan: ServePlan
        do {
            plan = try ServePlan(values: await LayeredValues(cli: ["db": options.db, "data_key": options.dataKey], configFile: options.config, dotEnvPath: ".env"))
        } catch let error as ConfigurationError {
            CLIOutput.stderr("siwa: invalid configuration: \(error)")
            throw ExitCode(78)
        }
        var logger = Logger(label: "siwa")
        logger.logLevel = .warning
        let store = try makeStore(settings: plan.settings, logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for service in store.services { group.addTask { try await service.run() } }
            try await store.migrate()
            try await body(store)
            group.cancelAll()
        }
    }
}
