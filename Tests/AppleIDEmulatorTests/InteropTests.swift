import AppleIDEmulator
import Foundation
import Testing

/// A standard OAuth/OIDC client that is not ours (Python's Authlib) completes the code flow against the
/// emulator and verifies the id_token with the emulator's JWKS.
@Suite("Interoperability with Authlib")
struct InteropTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Interop/authlib_code_flow.py")

    @Test("Authlib exchanges a code, signing its own client secret, and verifies the id_token")
    func authlibCodeFlow() async throws {
        guard let python = ProcessInfo.processInfo.environment["SIWA_TEST_PYTHON"], !python.isEmpty else {
            Issue.record("SIWA_TEST_PYTHON is not set: run ./scripts/test, which creates a Python venv with authlib and requests and exports SIWA_TEST_PYTHON (or create one yourself: python3 -m venv .build-venv && .build-venv/bin/pip install authlib requests, then SIWA_TEST_PYTHON=$PWD/.build-venv/bin/python swift test)")
            return
        }
        try await withEmulator { emulator async throws in
            let run = try await PythonRun.run(python: python, script: Self.script, environment: [
                "EMULATOR_BASE_URL": emulator.baseURL,
                "CLIENT_ID": EmulatorConfiguration.testServicesID,
                "TEAM_ID": EmulatorConfiguration.testTeamID,
                "KEY_ID": EmulatorConfiguration.testKeyID,
                "PRIVATE_KEY_PEM": EmulatorConfiguration.testPrivateKeyPEM,
                "REDIRECT_URI": Fixtures.redirectURI,
                "USER_SUB": Fixtures.grace,
            ])
            #expect(run.status == 0, "the Authlib script failed:\n\(run.stderr)\n\(run.stdout)")
            let lastLine = run.stdout.split(separator: "\n").last.map(String.init) ?? ""
            let result = Decode.json(lastLine)
            #expect(result["sub"] as? String == Fixtures.grace, "script output: \(run.stdout)\n\(run.stderr)")
            #expect(result["email"] as? String == "grace@example.org")
            // The code was really exchanged at the emulator.
            let counters = try await emulator.admin(.GET, "counters").json
            #expect(counters["codesExchanged"] as? Int == 1)
        }
    }
}

/// Runs a Python script as a child process without blocking a concurrency thread, with a time limit.
enum PythonRun {
    struct Outcome: Sendable {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    static func run(python: String, script: URL, environment: [String: String], timeLimit: Duration = .seconds(90)) async throws -> Outcome {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-interop-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let stdoutURL = directory.appendingPathComponent("stdout")
        let stderrURL = directory.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: stdoutURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: stderrURL.path, contents: nil)
        let stdoutHandle = try FileHandle(forWritingTo: stdoutURL)
        let stderrHandle = try FileHandle(forWritingTo: stderrURL)

        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [script.path]
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
                // Out of time: stop the script we started, then collect its exit.
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
}
