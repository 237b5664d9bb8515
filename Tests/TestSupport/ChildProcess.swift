import AsyncHTTPClient
import Foundation

/// Programs the tests start themselves (`siwa emulator`, Python clients), each stopped by the test
/// that started it.
public enum ChildProcess {
    /// How a program ended and what it printed.
    public struct Outcome: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
    }

    /// The `siwa` executable SwiftPM built beside the test bundle (this target depends on it).
    public static var siwaExecutable: URL {
        let directory = Bundle.main.bundleURL.deletingLastPathComponent()
        let beside = directory.appendingPathComponent("siwa")
        if FileManager.default.isExecutableFile(atPath: beside.path) { return beside }
        return URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("siwa")
    }

    /// Runs `executable` to its end (stopping it after `timeLimit`) without blocking a concurrency thread.
    public static func run(_ executable: URL, arguments: [String], environment: [String: String], timeLimit: Duration = .seconds(90)) async throws -> Outcome {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-child-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let stdoutURL = directory.appendingPathComponent("stdout")
        let stderrURL = directory.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: stdoutURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: stderrURL.path, contents: nil)
        let stdoutHandle = try FileHandle(forWritingTo: stdoutURL)
        let stderrHandle = try FileHandle(forWritingTo: stderrURL)

        let process = SpawnedProcess()
        process.executableURL = executable
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardOutput = stdoutHandle
        process.standardError = stderrHandle
        process.standardInput = FileHandle.nullDevice

        let status: Int32 = try await withThrowingTaskGroup(of: Int32?.self) { group in
            let (exits, exitContinuation) = AsyncStream<Int32>.makeStream()
            process.terminationHandler = { finished in
                exitContinuation.yield(finished.terminationStatus)
                exitContinuation.finish()
            }
            try process.run()
            group.addTask {
                var iterator = exits.makeAsyncIterator()
                return await iterator.next()
            }
            group.addTask {
                try await Task.sleep(for: timeLimit)
                return nil
            }
            var status = try await group.next() ?? nil
            if status == nil {
                // Out of time: stop what we started, then collect its exit.
                process.terminate()
                status = try await group.next() ?? nil
            }
            group.cancelAll()
            return status ?? -1
        }
        try stdoutHandle.close()
        try stderrHandle.close()
        return Outcome(
            status: status,
            stdout: (try? String(contentsOf: stdoutURL, encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOf: stderrURL, encoding: .utf8)) ?? ""
        )
    }

    /// Starts `siwa emulator --port 0` (the kernel picks a free port, so parallel suites cannot collide), reads the
    /// port it announces, waits until `/healthz` answers, runs `body` with its base URL, then stops it by its pid
    /// (SIGTERM) and waits for it to exit, without blocking a concurrency thread.
    public static func withSiwaEmulator<T>(_ body: (String) async throws -> T) async throws -> T {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-emulator-\(UUID().uuidString).log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: log) }
        let handle = try FileHandle(forWritingTo: log)
        defer { try? handle.close() }
        let process = SpawnedProcess()
        process.executableURL = siwaExecutable
        process.arguments = ["emulator", "--port", "0"]
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        let (exits, exited) = AsyncStream<Void>.makeStream()
        process.terminationHandler = { _ in
            exited.yield()
            exited.finish()
        }
        try process.run()
        func stop() async {
            if process.isRunning { process.terminate() }
            for await _ in exits { break }
        }
        do {
            var base: String?
            for _ in 0..<400 where base == nil {
                guard process.isRunning else { break }
                let output = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
                if let port = output.firstMatch(of: #/listening on http://127\.0\.0\.1:(\d+)\s/#)?.1,
                    (try? await HTTPProbe.status("http://127.0.0.1:\(port)/healthz")) == 200
                {
                    base = "http://127.0.0.1:\(port)"
                } else {
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
            guard let base else {
                let output = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
                throw LiveServerError.didNotStart("siwa emulator did not become ready:\n\(output)")
            }
            let result = try await body(base)
            await stop()
            return result
        } catch {
            await stop()
            throw error
        }
    }
}

/// One plain GET, for readiness checks.
public enum HTTPProbe {
    /// The status of a GET of `url` (two-second timeout).
    public static func status(_ url: String) async throws -> Int {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: url), timeout: .seconds(2))
        _ = try? await response.body.collect(upTo: 64 * 1024)
        return Int(response.status.code)
    }
}
