import AppleIDEmulator
import AppleSignIn
import ArgumentParser
import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle
import SignInServer

/// `siwa serve`: the web front, with the emulator in process when no Apple credentials are configured.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve the sign-in site. Without Apple credentials: local mode, Apple emulated in process.",
        discussion: "Example: siwa serve --upstream http://127.0.0.1:3000 --allowed-email-domains example.com\n\n" + LayeredValues.help
    )

    @Flag(help: "Print the effective configuration, where each value came from (secrets redacted), and exit.")
    var printConfig = false

    @Argument(parsing: .allUnrecognized, help: ArgumentHelp("Configuration: --KEY VALUE for any key below (and --config FILE).", valueName: "settings"))
    var settings: [String] = []

    func run() async throws {
        let plan: ServePlan
        let values: LayeredValues
        do {
            values = try await LayeredValues(commandArguments: settings)
            if printConfig {
                CLIOutput.stdout(values.printed())
                return
            }
            plan = try ServePlan(values: values)
            if let socket = plan.settings.socketPath {
                try ServePlan.checkSocketFree(socket)
                // What serve creates from here on is closed to others, so the socket is its owner's and group's only
                // from the moment it exists (and 0660 once bound).
                umask(0o007)
            }
        } catch let error as ConfigurationError {
            CLIOutput.stderr("siwa: invalid configuration: \(error)")
            throw ExitCode(78)
        }
        if let loops = plan.eventLoops {
            // Before anything uses NIO's group (Hummingbird, the emulator, the HTTP clients, the byte path's upstream
            // connections all share it): it is made with this many loops the first time it is asked for.
            NIOSingletons.groupLoopCountSuggestion = loops
        }
        let level = Logger.Level(rawValue: plan.logLevel) ?? .info
        EscapingLogHandler.bootstrap(level: level)
        let logger = Logger(label: "siwa")
        var services: [any Service] = [PolicyReloader(arguments: settings, front: plan.settings.front, logger: logger, watched: values.configPath)]
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
                if let socket = settings.socketPath {
                    CLIOutput.stderr("siwa: listening on the Unix socket \(socket), reached by browsers at \(settings.origin)/ through the proxy in front.")
                }
                if settings.mode == .local {
                    CLIOutput.stderr("siwa: local mode — Apple is emulated at http://127.0.0.1:\(plan.emulatorPort) (no Apple account needed).")
                    CLIOutput.stderr("siwa: open \(settings.origin)/ in a browser and press “Sign in with Apple”.")
                } else {
                    CLIOutput.stderr("siwa: Apple mode — Services ID \(settings.apple.servicesID), return URL \(settings.returnURL.absoluteString)" + (settings.socketPath == nil ? "; listening on \(settings.host):\(port)." : "."))
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
