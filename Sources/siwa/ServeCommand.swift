import AppleIDEmulator
import AppleSignIn
import ArgumentParser
import AsyncHTTPClient
import Hummingbird
import Logging
import ServiceLifecycle
import SignInServer

/// `siwa serve`: the web front, with the emulator in process when no Apple credentials are configured.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve the sign-in site. Without Apple credentials: local mode, Apple emulated in process."
    )

    @Option(help: "Address to listen on (SIWA_HOST).") var host: String?
    @Option(help: "Port to listen on (SIWA_PORT).") var port: Int?
    @Option(help: "SQLite database path (SIWA_DB), default ./siwa.sqlite.") var db: String?
    @Option(help: "Port of the in-process emulator in local mode (SIWA_EMULATOR_PORT).") var emulatorPort: Int?
    @Option(help: "A JSON file of configuration keys (SIWA_CONFIG).") var config: String?
    @Option(help: "Team ID (SIWA_TEAM_ID); Apple mode.") var teamId: String?
    @Option(help: "Key ID (SIWA_KEY_ID); Apple mode.") var keyId: String?
    @Option(help: "Path of AuthKey_<KEYID>.p8 (SIWA_KEY_FILE); Apple mode.") var keyFile: String?
    @Option(help: "Services ID (SIWA_SERVICES_ID); Apple mode.") var servicesId: String?
    @Option(help: "Return URL(s), comma-separated, as registered (SIWA_RETURN_URL); Apple mode.") var returnUrl: String?

    func run() async throws {
        let plan: ServePlan
        do {
            let values = try LayeredValues(cli: [
                "host": host, "port": port.map(String.init), "db": db, "emulator_port": emulatorPort.map(String.init),
                "team_id": teamId, "key_id": keyId, "key_file": keyFile, "services_id": servicesId, "return_url": returnUrl,
            ], configFile: config)
            plan = try ServePlan(values: values)
        } catch let error as ConfigurationError {
            CLIOutput.stderr("siwa: invalid configuration: \(error)")
            throw ExitCode(78)
        }
        let level = Logger.Level(rawValue: plan.logLevel) ?? .info
        EscapingLogHandler.bootstrap(level: level)
        let logger = Logger(label: "siwa")
        var services: [any Service] = []
        if let emulatorConfiguration = plan.emulator {
            let emulator = try AppleIDEmulator(configuration: emulatorConfiguration, logger: Logger(label: "siwa.emulator"))
            services.append(emulator.buildApplication(host: "127.0.0.1", port: plan.emulatorPort))
        }
        let settings = plan.settings
        // Our own client for Apple, not HTTPClient.shared: the shared one allows 8 connections per host, so a
        // few slow Apple answers (each held up to the Apple timeout) stalled every other sign-in (soak test).
        var clientConfiguration = HTTPClient.Configuration()
        clientConfiguration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 256)
        let httpClient = HTTPClient(eventLoopGroupProvider: .singleton, configuration: clientConfiguration)
        do {
            let app = try await buildApplication(settings: settings, httpClient: httpClient, services: services, logger: logger) { port in
                if settings.mode == .local {
                    CLIOutput.stderr("siwa: local mode — Apple is emulated at http://127.0.0.1:\(plan.emulatorPort) (no Apple account needed).")
                    CLIOutput.stderr("siwa: open \(settings.origin)/ in a browser and press “Sign in with Apple”.")
                } else {
                    CLIOutput.stderr("siwa: Apple mode — Services ID \(settings.apple.servicesID), return URL \(settings.returnURL.absoluteString); listening on \(settings.host):\(port).")
                }
            }
            try await app.runService()
        } catch {
            try? await httpClient.shutdown()
            throw error
        }
        try await httpClient.shutdown()
    }
}
