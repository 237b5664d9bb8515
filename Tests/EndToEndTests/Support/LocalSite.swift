import AppleIDEmulator
import Foundation
import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle
import SignInServer
@testable import siwa
import TestSupport

/// The site as `swift run siwa serve` runs it in local mode, in this process: the configuration comes from
/// `ServePlan` itself (free ports, a throwaway SQLite file), the emulator runs as a service of the server,
/// and the end is the graceful shutdown SIGTERM would start.
struct LocalSite: Sendable {
    /// The server's origin, e.g. `http://127.0.0.1:54321` (what the return URL names; `public_url` when set).
    let origin: String
    /// The emulator's origin, as the browser reaches it.
    let emulatorOrigin: String
    /// The emulator's test users, in the order the consent page lists them.
    let users: [EmulatorConfiguration.User]
    /// The SQLite file the server uses, and the emulator's port (for the other `siwa` commands).
    let databasePath: String
    let emulatorPort: Int
    /// The port siwa listens on (where a proxy in front sends requests; `origin` may be the proxy's).
    var port: Int = 0

    /// The absolute URL of `path` on the server.
    func url(_ path: String) -> String {
        origin + path
    }

    /// The test user whose first name is `firstName`.
    func user(_ firstName: String) -> EmulatorConfiguration.User {
        users.first { $0.firstName == firstName }!
    }

    /// Starts the emulator and the server, runs `body`, then shuts both down and deletes the database.
    /// The ports must be known before either starts (each names the other), so they are reserved and released
    /// first; when another test's server took one meanwhile, start-up is tried again on new ports (`startingAgain`).
    /// `settings`: configuration keys set on the command line besides (or, nil, instead of) the defaults of `planned`.
    static func run(settings: [String: String?] = [:], _ body: (LocalSite) async throws -> Void) async throws {
        try await startingAgain { started in
            try await runOnce(settings: settings) { site in
                started()
                try await body(site)
            }
        }
    }

    /// Runs `start` again on new ports (`tries` in all) when it fails with a taken port before it called `started`
    /// (the site was up): an error once the site is up is the test's own, passed on as it is.
    static func startingAgain(tries: Int = 8, _ start: (_ started: () -> Void) async throws -> Void) async throws {
        var attempt = 1
        while true {
            var started = false
            do {
                try await start { started = true }
                return
            } catch where Self.isAddressInUse(error) && !started && attempt < tries {
                FileHandle.standardError.write(Data("LocalSite: a port was taken at start-up (attempt \(attempt) of \(tries): \(error)); trying again on new ports\n".utf8))
                attempt += 1
            }
        }
    }

    /// The configuration of a site on `ports` (siwa's, the emulator's) with its database in `directory`: the tests'
    /// defaults and `extra`, then `settings` (nil removes a default; `{port}` and `{emulator_port}` in a value name
    /// the ports), with the plan `ServePlan` makes of it and the site that plan describes.
    static func planned(
        _ settings: [String: String?], ports: [Int], directory: URL, extra: [String: String] = [:]
    ) async throws -> (values: [String: String], plan: ServePlan, site: LocalSite, emulator: EmulatorConfiguration) {
        var defaults: [String: String?] = [
            "port": String(ports[0]), "emulator_port": String(ports[1]), "db": directory.appendingPathComponent("siwa.sqlite").path,
            // Sites behind nginx, Traefik and Caddy on this host may be returned to after sign-in, and those
            // proxies' X-Forwarded-* headers are believed (forward-auth tests).
            "allowed_redirect_domains": "127.0.0.1", "trusted_proxies": "127.0.0.1",
        ]
        defaults.merge(extra) { $1 }
        let chosen = settings.mapValues { value in
            value.map { $0.replacingOccurrences(of: "{port}", with: String(ports[0])).replacingOccurrences(of: "{emulator_port}", with: String(ports[1])) }
        }
        let values = defaults.merging(chosen) { $1 }.compactMapValues { $0 }
        let plan = try ServePlan(values: try await LayeredValues(cli: values, configFile: nil, environment: [:]))
        guard plan.settings.mode == .local, let emulator = plan.emulator else {
            throw EndToEndError("ServePlan did not choose local mode without Apple credentials")
        }
        let site = LocalSite(
            origin: plan.settings.origin, emulatorOrigin: ServerSettings.origin(of: plan.settings.apple.authorizeBaseURL), users: emulator.users,
            databasePath: plan.settings.database, emulatorPort: plan.emulatorPort, port: plan.settings.port
        )
        return (values, plan, site, emulator)
    }

    /// Whether `error` says a port was taken (NIO's `IOError`, or that error as a service group passed it on).
    static func isAddressInUse(_ error: any Error) -> Bool {
        if let error = error as? IOError, error.errnoCode == EADDRINUSE { return true }
        let text = String(describing: error) + " " + String(reflecting: error)
        return text.localizedCaseInsensitiveContains("address already in use") || text.contains("errno: 98")
    }

    private static func runOnce(settings: [String: String?], _ body: (LocalSite) async throws -> Void) async throws {
        let ports = try await FreePorts.reserve(2)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-e2e-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }

        let (_, plan, site, emulatorConfiguration) = try await planned(settings, ports: ports, directory: directory)
        let logger = Logger(label: "siwa.e2e") { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .warning
            return handler
        }
        let (running, announce) = AsyncStream.makeStream(of: Int.self)
        let emulator = try AppleIDEmulator(configuration: emulatorConfiguration, logger: logger)
        let emulatorApp = emulator.buildApplication(host: "127.0.0.1", port: plan.emulatorPort) { port in announce.yield(port) }
        let app = try await buildApplication(settings: plan.settings, httpClient: .shared, services: [emulatorApp], logger: logger) { port in
            announce.yield(port)
        }

        // What SIGTERM does to `siwa serve`: a graceful shutdown of the server and the emulator it runs.
        let services = ServiceGroup(configuration: .init(services: [app], gracefulShutdownSignals: [], logger: logger))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                defer { announce.finish() }
                try await services.run()
            }
            var listening = 0
            for await _ in running {
                listening += 1
                if listening == 2 { break }
            }
            guard listening == 2 else {
                try await group.next()
                throw EndToEndError("the site stopped before listening on ports \(ports)")
            }
            do {
                try await body(site)
            } catch {
                await services.triggerGracefulShutdown()
                throw error
            }
            await services.triggerGracefulShutdown()
            try await group.waitForAll()
        }
    }
}

extension LocalSite {
    /// The same site run by the built `siwa serve` binary in a process of its own, with the same settings as `run`
    /// passed as flags: for figures of siwa alone, such as its resident memory, which this test process (running
    /// many suites at once, and the clients and upstreams of this one) cannot give, or a signal sent to it. `body`
    /// gets the site and the process; the process is stopped by SIGTERM at the end.
    static func runProcess(settings: [String: String?] = [:], _ body: (LocalSite, SiwaProcess) async throws -> Void) async throws {
        try await startingAgain(tries: 5) { started in
            try await runProcessOnce(settings: settings) { site, process in
                started()
                try await body(site, process)
            }
        }
    }

    private static func runProcessOnce(settings: [String: String?], _ body: (LocalSite, SiwaProcess) async throws -> Void) async throws {
        let ports = try await FreePorts.reserve(2)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-e2e-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // The plan the binary makes from the same flags: the origins and the emulator's users, as `run` reads them.
        let (values, _, site, _) = try await planned(settings, ports: ports, directory: directory, extra: ["log_level": "warning"])
        let log = directory.appendingPathComponent("siwa.log")
        let arguments = ["serve"] + values.sorted { $0.key < $1.key }.map { "--\($0.key.replacingOccurrences(of: "_", with: "-"))=\($0.value)" }
        try await ChildProcess.withRunning(
            ChildProcess.siwaExecutable, arguments: arguments, environment: [:], output: log,
            ready: {
                guard (try? await HTTPProbe.status(site.url("/healthz"))) == 200 else { return false }
                return (try? await HTTPProbe.status(site.emulatorOrigin + "/healthz")) == 200
            }
        ) { pid in
            try await body(site, SiwaProcess(pid: pid, log: log))
        }
    }
}

/// A `siwa serve` process of `LocalSite.runProcess`.
struct SiwaProcess: Sendable {
    let pid: pid_t
    /// Where its standard output and error go.
    let log: URL

    /// What it has logged so far.
    var logText: String {
        (try? String(contentsOf: log, encoding: .utf8)) ?? ""
    }
}
