import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension ChildProcess {
    /// Runs `executable` while `body` runs (a server: nginx, Traefik, Caddy). Its standard output and error go to
    /// `output`. Start-up waits until `ready` says yes; when the program exits first or `startupTimeLimit` passes,
    /// the error carries its output and `diagnostics()` (the program's own log files). At the end, also when `body`
    /// throws or the test is cancelled, the program is stopped by its pid: SIGTERM, then SIGKILL if it is still
    /// alive after `stopTimeLimit`, and its exit is awaited without blocking a concurrency thread. `body` is given
    /// the program's pid (to read its `/proc` entries, e.g. its memory, or to signal it).
    public static func withRunning<T>(
        _ executable: URL,
        arguments: [String],
        environment: [String: String] = [:],
        output: URL,
        startupTimeLimit: Duration = .seconds(30),
        stopTimeLimit: Duration = .seconds(10),
        diagnostics: () -> String = { "" },
        ready: () async -> Bool,
        _ body: (pid_t) async throws -> T
    ) async throws -> T {
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        let handle = try FileHandle(forWritingTo: output)
        defer { try? handle.close() }
        let process = SpawnedProcess()
        process.executableURL = executable
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        let exit = ExitSignal()
        process.terminationHandler = { _ in exit.fire() }
        try process.run()
        let pid = process.processIdentifier

        func stop() async {
            guard !exit.hasFired else { return }
            kill(pid, SIGTERM)
            // A dispatch timer rather than Task.sleep: this also runs in a cancelled task, where sleeping throws.
            let escalate = DispatchWorkItem {
                if !exit.hasFired { kill(pid, SIGKILL) }
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(stopTimeLimit / .milliseconds(1))), execute: escalate)
            await exit.wait()
            escalate.cancel()
        }

        func failure(_ reason: String) -> ExternalToolError {
            let printed = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
            return ExternalToolError(
                "\(executable.lastPathComponent) \(reason).\ncommand: \(executable.path) \(arguments.joined(separator: " "))\noutput:\n\(printed)\(diagnostics())"
            )
        }

        do {
            let deadline = ContinuousClock.now + startupTimeLimit
            while true {
                if exit.hasFired {
                    throw failure("exited with status \(process.terminationStatus) before it was ready")
                }
                if await ready() { break }
                if ContinuousClock.now > deadline {
                    throw failure("was not ready within \(startupTimeLimit)")
                }
                try await Task.sleep(for: .milliseconds(50))
            }
            let result = try await body(pid)
            await stop()
            return result
        } catch {
            await stop()
            throw error
        }
    }
}

/// Set once, when a child process has exited; awaited by whoever stops it. A continuation is used, not an
/// `AsyncStream`, because the wait must hold in a cancelled task too (an `AsyncStream` ends on cancellation).
private final class ExitSignal: Sendable {
    private let state = Mutex<(fired: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    var hasFired: Bool {
        state.withLock { $0.fired }
    }

    func fire() {
        let waiters = state.withLock { state in
            state.fired = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    func wait() async {
        await withCheckedContinuation { continuation in
            let fired = state.withLock { state in
                if !state.fired { state.waiters.append(continuation) }
                return state.fired
            }
            if fired { continuation.resume() }
        }
    }
}

extension ExternalToolError {
    /// Whether the program could not bind its port because something took it after it was found free, so that
    /// starting again on another port is worth it.
    public var isAddressInUse: Bool {
        description.localizedCaseInsensitiveContains("address already in use")
    }
}
