import AsyncHTTPClient
import Foundation
import TestSupport

/// A chromedriver process on a free loopback port. Whoever starts one stops it (`stop()`), after quitting
/// the sessions they opened.
final class ChromeDriver {
    /// Opens browsers through this chromedriver.
    let sessions: ChromiumSessions
    private let process: SpawnedProcess

    private init(sessions: ChromiumSessions, process: SpawnedProcess) {
        self.sessions = sessions
        self.process = process
    }

    /// Starts chromedriver (`SIWA_TEST_CHROMEDRIVER`, else `chromedriver` on PATH) and waits until it is ready. The
    /// port is free when chosen but may be taken before chromedriver binds it (by another test's connection): then
    /// it is tried again on a new port, three times at most.
    static func start(log: URL) async throws -> ChromeDriver {
        var attempt = 1
        while true {
            do {
                return try await startOnce(log: log)
            } catch let error as EndToEndError where attempt < 3 && error.description.contains("Address already in use") {
                attempt += 1
            }
        }
    }

    private static func startOnce(log: URL) async throws -> ChromeDriver {
        let environment = ProcessInfo.processInfo.environment
        guard let driverPath = locate(environment["SIWA_TEST_CHROMEDRIVER"], orOnPath: ["chromedriver"]) else {
            throw EndToEndError.notInstalled("chromedriver not found (\(searched("SIWA_TEST_CHROMEDRIVER", environment)))")
        }
        guard let chromium = locate(environment["SIWA_TEST_CHROMIUM"], orOnPath: ["chromium", "chromium-browser", "google-chrome"]) else {
            throw EndToEndError.notInstalled("Chromium not found (\(searched("SIWA_TEST_CHROMIUM", environment)))")
        }
        let port = try await FreePorts.reserve(1)[0]
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let logHandle = try FileHandle(forWritingTo: log)
        let process = SpawnedProcess()
        process.executableURL = URL(fileURLWithPath: driverPath)
        process.arguments = ["--port=\(port)"]
        process.standardOutput = logHandle
        process.standardError = logHandle
        do {
            try process.run()
        } catch {
            throw EndToEndError.notInstalled("chromedriver at \(driverPath) could not be started: \(error)")
        }
        let connection = WebDriverConnection(endpoint: "http://127.0.0.1:\(port)", httpClient: .shared)
        let driver = ChromeDriver(sessions: ChromiumSessions(connection: connection, chromium: chromium), process: process)
        let deadline = ContinuousClock.now + .seconds(20)
        while !(await connection.isReady()) {
            guard process.isRunning, ContinuousClock.now < deadline else {
                await driver.stop()
                let output = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
                throw EndToEndError("chromedriver at \(driverPath) did not become ready on port \(port): \(output.suffix(500))")
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        return driver
    }

    /// Ends chromedriver: asks it to shut down, and kills it if it has not within two seconds
    /// (started from the test process it does not always honour SIGTERM).
    func stop() async {
        guard process.isRunning else { return }
        _ = try? await sessions.connection.command(.GET, "/shutdown", timeout: .seconds(2))
        let deadline = ContinuousClock.now + .seconds(2)
        while process.isRunning, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(50))
        }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
        }
        process.waitUntilExit()
    }

    /// The executable named by `explicit`, else the first of `names` found on PATH.
    private static func searched(_ variable: String, _ environment: [String: String]) -> String {
        environment[variable].map { "\(variable)=\($0) is not an executable" } ?? "\(variable) unset, not on PATH"
    }

    private static func locate(_ explicit: String?, orOnPath names: [String]) -> String? {
        let files = FileManager.default
        if let explicit, !explicit.isEmpty {
            return files.isExecutableFile(atPath: explicit) ? explicit : nil
        }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for name in names {
            for directory in path.split(separator: ":") where files.isExecutableFile(atPath: "\(directory)/\(name)") {
                return "\(directory)/\(name)"
            }
        }
        return nil
    }
}

/// Opens headless Chromium sessions through a running chromedriver.
struct ChromiumSessions: Sendable {
    let connection: WebDriverConnection
    /// The Chromium executable.
    let chromium: String

    /// Opens a headless Chromium session; `language` (e.g. `zh-CN`) sets the UI language and `Accept-Language`;
    /// `extra`: more of Chromium's switches (a test's CA to trust, say).
    func newSession(language: String? = nil, extra: [String] = []) async throws -> Browser {
        var arguments: [TestJSON] = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,900"]
        arguments += extra.map { .string($0) }
        var options: [String: TestJSON] = ["binary": .string(chromium)]
        if let language {
            arguments.append(.string("--lang=\(language)"))
            options["prefs"] = ["intl.accept_languages": .string(language)]
        }
        options["args"] = .array(arguments)
        let capabilities: TestJSON = [
            "capabilities": [
                "alwaysMatch": [
                    "browserName": "chrome",
                    "goog:loggingPrefs": ["browser": "ALL"],
                    "goog:chromeOptions": .object(options),
                ]
            ]
        ]
        let value: TestJSON
        do {
            value = try await connection.command(.POST, "/session", capabilities, timeout: .seconds(120))
        } catch {
            throw EndToEndError.notInstalled("Chromium at \(chromium) could not be started by chromedriver: \(error)")
        }
        guard let id = value["sessionId"]?.string else {
            throw EndToEndError("chromedriver answered a new session without a sessionId: \(value)")
        }
        return Browser(connection: connection, id: id)
    }

    /// Runs `body` with a new session, quitting it afterwards whatever happens.
    func with<T>(language: String? = nil, extra: [String] = [], _ body: (Browser) async throws -> T) async throws -> T {
        let browser = try await newSession(language: language, extra: extra)
        do {
            let result = try await body(browser)
            try await browser.quit()
            return result
        } catch {
            try? await browser.quit()
            throw error
        }
    }
}
