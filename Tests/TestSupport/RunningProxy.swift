import Foundation
import NIOCore
import NIOPosix

/// A reverse proxy a test started (nginx, Traefik, Caddy): where it listens, and what it logged.
public struct RunningProxy: Sendable {
    /// The loopback port it listens on (the one its configuration was written for).
    public let port: Int
    /// Its private directory: configuration, logs, temporary files; removed when the test's body ends.
    public let directory: URL
    /// The files in `directory` worth reading when something goes wrong.
    let logFiles: [String]

    /// `http://127.0.0.1:PORT`.
    public var origin: String { "http://127.0.0.1:\(port)" }

    /// The absolute URL of `path` (with its query) on the proxy.
    public func url(_ path: String) -> String {
        origin + path
    }

    /// Everything it logged so far, file by file, to attach to a failed expectation.
    public func logs() -> String {
        ProxyHarness.read(logFiles, in: directory)
    }
}

/// One TCP connection attempt, for readiness and for checking that a server is gone. Unlike `HTTPProbe`, it sends
/// no request (a proxy would pass it on to its upstream) and does not retry a refused connection until a deadline.
public enum TCPProbe {
    /// Whether something accepts connections on `127.0.0.1:port` (the connection is closed at once).
    public static func acceptsConnections(on port: Int) async -> Bool {
        do {
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                // A connection to loopback is accepted at once, or refused at once; the 5 s is the test process's own
                // event loop, busy under the full suite's load (1 s once read a running nginx as stopped).
                .connectTimeout(.seconds(5))
                .connect(host: "127.0.0.1", port: port).get()
            try? await channel.close()
            return true
        } catch {
            return false
        }
    }
}

/// How to start one proxy in its private directory on its port: what withNginx, withTraefik and withCaddy decide.
struct ProxyLaunch {
    /// Files to write first, by path relative to the directory (configuration).
    var files: [String: String]
    /// The command line.
    var arguments: [String]
    /// Variables added to the test's environment.
    var environment: [String: String] = [:]
    /// Files of the directory worth reading when something goes wrong, besides the program's output.
    var logFiles: [String]
}

/// What starting nginx, Traefik and Caddy has in common.
enum ProxyHarness {
    /// Starts `tool` as `launch` says, in a private directory and on a loopback port free a moment ago; waits
    /// until `ready`; runs `body`; stops the program by its pid and deletes the directory. When the program could
    /// not bind the port because something took it meanwhile, start-up is tried again with a new directory and
    /// port (five tries); an error thrown by `body` is passed on as it is. `port`: the one to listen on, when the
    /// caller had to name it before (no new one is tried then).
    static func run<T>(
        _ tool: ExternalTool,
        port chosenPort: Int? = nil,
        startupTimeLimit: Duration = .seconds(30),
        _ launch: (_ directory: URL, _ port: Int) -> ProxyLaunch,
        ready: (RunningProxy) async -> Bool,
        _ body: (RunningProxy) async throws -> T
    ) async throws -> T {
        let executable = try tool.executable()
        var attempt = 1
        while true {
            var port = chosenPort ?? 0
            if chosenPort == nil { port = try await FreePorts.reserve(1)[0] }
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-\(tool.name)-\(UUID().uuidString)", isDirectory: true)
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let plan = launch(directory, port)
            for (path, contents) in plan.files {
                let file = directory.appendingPathComponent(path)
                try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
                try contents.write(to: file, atomically: true, encoding: .utf8)
            }
            let proxy = RunningProxy(port: port, directory: directory, logFiles: plan.logFiles + [outputFile])
            var started = false
            do {
                return try await ChildProcess.withRunning(
                    executable,
                    arguments: plan.arguments,
                    environment: plan.environment,
                    output: directory.appendingPathComponent(outputFile),
                    startupTimeLimit: startupTimeLimit,
                    diagnostics: { read(plan.logFiles, in: directory) },
                    ready: { await ready(proxy) }
                ) { _ in
                    started = true
                    return try await body(proxy)
                }
            } catch let error as ExternalToolError where error.isAddressInUse && !started && attempt < 8 && chosenPort == nil {
                FileHandle.standardError.write(
                    Data("ProxyHarness: a port was taken at start-up (attempt \(attempt) of 8; \(Self.listeners(on: port))); trying again on a new port\n".utf8)
                )
                attempt += 1
            }
        }
    }

    /// Who listens on `port` now, as `ss` tells it (to find what takes the tests' ports).
    static func listeners(on port: Int) -> String {
        let ss = Process()
        ss.executableURL = URL(fileURLWithPath: "/usr/bin/ss")
        ss.arguments = ["-Hltnp", "sport = :\(port)"]
        let pipe = Pipe()
        ss.standardOutput = pipe
        ss.standardError = FileHandle.nullDevice
        guard (try? ss.run()) != nil else { return "port \(port)" }
        ss.waitUntilExit()
        let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return "port \(port): " + (text.isEmpty ? "nobody listens on it now" : text.replacingOccurrences(of: "\n", with: " | "))
    }

    /// Where the program's standard output and error go, in its directory.
    static let outputFile = "output.log"

    /// The named files of `directory`, each under a heading; missing ones are skipped.
    static func read(_ files: [String], in directory: URL) -> String {
        files.compactMap { name in
            (try? String(contentsOf: directory.appendingPathComponent(name), encoding: .utf8)).map { "\n--- \(name) ---\n\($0)" }
        }.joined()
    }
}
