import AppleSignIn
import ArgumentParser
import AsyncHTTPClient
import Foundation
import Logging
import SignInServer

/// `siwa migrate-users`: before an app moves to another team, asks Apple for every stored user's
/// `transfer_sub` and records it, so that sign-ins under the new team (whose id_tokens carry `transfer_sub`)
/// link to the existing users.
struct MigrateUsersCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate-users",
        abstract: "Record each user's transfer_sub for a team transfer (Apple's /auth/usermigrationinfo).",
        discussion: "Example: siwa migrate-users --config siwa.json --target-team NEWTEAM123"
    )

    @Option(help: "The Team ID the app is moving to.") var targetTeam: String
    @Option(help: "A JSON file of configuration keys, as for serve (SIWA_CONFIG).") var config: String?
    @Option(help: "SQLite database path (SIWA_DB).") var db: String?
    @Option(help: "Port of the emulator in local mode (SIWA_EMULATOR_PORT); it must be running.") var emulatorPort: Int?

    func run() async throws {
        let target: TeamID
        let plan: ServePlan
        do {
            target = try TeamID(targetTeam, field: "--target-team")
            plan = try ServePlan(values: await LayeredValues(cli: ["db": db, "emulator_port": emulatorPort.map(String.init)], configFile: config, dotEnvPath: ".env"))
        } catch let error as ConfigurationError {
            CLIOutput.stderr("siwa: invalid configuration: \(error)")
            throw ExitCode(78)
        }
        let logger = Logger(label: "siwa.migrate")
        let settings = plan.settings
        let store = try SQLiteStore(path: settings.database, cipher: TokenCipher(base64Keys: settings.dataKeys))
        try await store.migrate()
        let client = AppleIDClient(configuration: settings.apple, httpClient: .shared, secrets: ClientSecretSigner(configuration: settings.apple), timeout: .milliseconds(Int64(settings.appleTimeoutMS)), logger: logger)
        let token: String
        do {
            token = try await client.migrationAccessToken()
        } catch {
            CLIOutput.stderr("siwa: could not get a migration token: \(error.message)")
            throw ExitCode.failure
        }
        var done = 0
        var failed = 0
        for subject in try await store.subjectsWithoutTransferSubject(limit: 10_000_000) {
            do {
                let transfer = try await client.transferSubject(for: subject, targetTeam: target, accessToken: token)
                try await store.setTransferSubject(transfer, for: subject)
                done += 1
            } catch {
                CLIOutput.stderr("siwa: \(subject): \(error)")
                failed += 1
            }
        }
        print("recorded transfer_sub for \(done) user(s); \(failed) failed")
        if failed > 0 { throw ExitCode.failure }
    }
}
