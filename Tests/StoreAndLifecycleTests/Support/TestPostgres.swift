import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Logging
import PostgresNIO
import TestSupport

/// The throwaway PostgreSQL server `scripts/test` starts, and fresh databases on it.
enum TestPostgres {
    /// `postgres://user@host:port/db` of the server, from SIWA_TEST_POSTGRES_URL.
    static func serverURL() throws -> URLComponents {
        guard let text = ProcessInfo.processInfo.environment["SIWA_TEST_POSTGRES_URL"], !text.isEmpty else {
            throw SetupError("SIWA_TEST_POSTGRES_URL is not set: run the tests with ./scripts/test, which starts a throwaway PostgreSQL and exports it")
        }
        guard let components = URLComponents(string: text), components.host != nil, components.user != nil else {
            throw SetupError("SIWA_TEST_POSTGRES_URL is not a postgres://user@host:port/db URL: \(text)")
        }
        return components
    }

    /// The `pg_ctl` command prefix from SIWA_TEST_PG_CTL (`… pg_ctl -D DIR`).
    static func pgCtl() throws -> String {
        guard let text = ProcessInfo.processInfo.environment["SIWA_TEST_PG_CTL"], !text.isEmpty else {
            throw SetupError("SIWA_TEST_PG_CTL is not set: run the tests with ./scripts/test, which starts a throwaway PostgreSQL and exports it")
        }
        return text
    }

    /// Runs `$SIWA_TEST_PG_CTL arguments` and waits for it; throws with its output when it fails.
    static func runPgCtl(_ arguments: String) async throws {
        let command = try pgCtl() + " " + arguments
        // The restarted server logs to pg_ctl's stdout when no log file is given: a file kept after the test,
        // where an operator can read it, rather than any pipe of ours.
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-pgctl.log")
        let status = try await ChildProcess.run(command + " >" + output.path + " 2>&1 </dev/null")
        guard status == 0 else {
            let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
            throw SetupError("`\(command)` failed with status \(status): \(text)")
        }
    }

    /// A client configuration for `database` on the test server.
    static func configuration(database: String) throws -> PostgresClient.Configuration {
        let url = try serverURL()
        var configuration = PostgresClient.Configuration(
            host: url.host!, port: url.port ?? 5432, username: url.user!, password: url.password, database: database, tls: .disable
        )
        configuration.options.connectTimeout = .seconds(3)
        return configuration
    }

    /// The URL of `database` on the test server.
    static func url(database: String) throws -> String {
        var url = try serverURL()
        url.path = "/" + database
        return url.string!
    }

    /// Creates a database with a random name, gives `body` its URL and a running client on it, drops it after.
    /// Holds the gate shared (or exclusive, for a test that restarts the server).
    static func withFreshDatabase<T: Sendable>(
        exclusive: Bool = false,
        _ body: (_ url: String, _ client: PostgresClient, _ runner: ClientRunner) async throws -> T
    ) async throws -> T {
        let server = try serverURL()
        let logger = Support.logger("test.postgres")
        let adminDatabase = server.path.hasPrefix("/") ? String(server.path.dropFirst()) : server.path
        let name = "siwa_t_" + Support.randomHex(6)
        return try await PostgresGate.shared.with(exclusive: exclusive) {
            try await withClientRunner { runner in
                let admin = PostgresClient(configuration: try configuration(database: adminDatabase.isEmpty ? server.user! : adminDatabase), backgroundLogger: logger)
                runner.run(admin)
                try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"), logger: logger)
                let result: Result<T, any Error>
                do {
                    let client = PostgresClient(configuration: try configuration(database: name), backgroundLogger: logger)
                    runner.run(client)
                    result = .success(try await body(try url(database: name), client, runner))
                } catch {
                    result = .failure(error)
                }
                // WITH (FORCE) ends the connections the test's stores still hold.
                _ = try? await admin.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(name) WITH (FORCE)"), logger: logger)
                return try result.get()
            }
        }
    }
}

/// Runs `PostgresClient`s (they must run to serve queries) for as long as a test needs them.
struct ClientRunner: Sendable {
    fileprivate let continuation: AsyncStream<PostgresClient>.Continuation

    /// Starts running `client` until the test ends.
    func run(_ client: PostgresClient) {
        continuation.yield(client)
    }
}

/// Gives `body` a runner; every client it was handed stops when `body` returns.
func withClientRunner<T: Sendable>(_ body: (ClientRunner) async throws -> T) async throws -> T {
    let (clients, continuation) = AsyncStream<PostgresClient>.makeStream()
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask {
            await withDiscardingTaskGroup { running in
                for await client in clients {
                    running.addTask { await client.run() }
                }
            }
        }
        defer {
            continuation.finish()
            group.cancelAll()
        }
        return try await body(ClientRunner(continuation: continuation))
    }
}

/// Runs a shell command as a child process and waits for it by polling `waitpid`.
///
/// Foundation's `Process` is not used: its exit notification was seen to go missing when the child starts a
/// daemon (pg_ctl), leaving the test waiting forever. The child also must not inherit the test's sockets (the
/// restarted PostgreSQL would keep them open), so every descriptor above stderr is closed in it.
enum ChildProcess {
    /// The exit status of `/bin/sh -c command`.
    static func run(_ command: String) async throws -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        let inherited = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).compactMap { Int32($0) }
        for descriptor in inherited where descriptor > 2 {
            // glibc skips descriptors closed meanwhile (the listing itself used one).
            posix_spawn_file_actions_addclose(&actions, descriptor)
        }
        let arguments = ["/bin/sh", "-c", command].map { $0.withCString { strdup($0) } }
        defer { arguments.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, "/bin/sh", &actions, nil, arguments + [nil], environ)
        guard spawned == 0 else { throw SetupError("could not start /bin/sh: error \(spawned)") }
        var status: Int32 = 0
        while true {
            let reaped = waitpid(pid, &status, WNOHANG)
            if reaped == pid { break }
            if reaped == -1 && errno != EINTR { throw SetupError("waitpid failed: errno \(errno)") }
            try await Task.sleep(for: .milliseconds(50))
        }
        // WIFEXITED / WEXITSTATUS are macros Swift does not import.
        return status & 0x7f == 0 ? (status >> 8) & 0xff : -1
    }
}
