import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle

/// The instances of one PostgreSQL database tell each other of session changes on the channel `siwa_sessions`:
/// `SessionCachedStore` sends `NOTIFY` once a write has committed, and each instance holds one connection listening
/// on the channel and forgets what each notification names (`SessionChange`). While the listener is not listening
/// (the database restarting) it may miss some, so whenever it starts listening again it forgets everything; until
/// then `check_cache_seconds` bounds what is stale. The same holds for a change whose announcement could not be sent
/// (the database went away between the commit and the `NOTIFY`).
struct PostgresSessionChanges: SessionChangeChannel {
    static let channel = "siwa_sessions"

    let client: PostgresClient
    let logger: Logger
    /// How long an announcement may take, waiting for a connection included.
    let timeout: Duration

    func announce(_ change: SessionChange) async throws {
        let (client, logger) = (client, logger)
        try await withDeadline(timeout, onTimeout: PostgresStoreError(description: "PostgreSQL did not take a session change within \(timeout)")) {
            try await client.query("SELECT pg_notify(\(Self.channel), \(change.payload))", logger: logger)
        }
    }

    func listener(feeding cache: SessionCache) -> any Service {
        Listener(client: client, cache: cache, logger: logger)
    }

    /// The connection listening on `siwa_sessions`, and again after each failure, until the graceful shutdown.
    struct Listener: Service {
        let client: PostgresClient
        let cache: SessionCache
        let logger: Logger

        func run() async throws {
            await cancelWhenGracefulShutdown {
                var failures = 0
                while !Task.isCancelled {
                    do {
                        try await client.withConnection { connection in
                            try await connection.listen(on: PostgresSessionChanges.channel) { notifications in
                                // Whatever changed while no connection listened is unknown: start afresh.
                                cache.forget(.everything)
                                if failures > 0 { logger.info("listening for other instances' session changes again") }
                                failures = 0
                                for try await notification in notifications {
                                    cache.forget(SessionChange(payload: notification.payload))
                                }
                            }
                        }
                    } catch {
                        if Task.isCancelled { break }
                        cache.forget(.everything)
                        failures += 1
                        logger.warning("not hearing other instances' session changes; cached sessions expire on their own meanwhile", metadata: ["error": "\(String(reflecting: error))"])
                    }
                    if Task.isCancelled { break }
                    // The stream ended (the connection closed) or failed: listen again after a pause that grows to 5 s.
                    try? await Task.sleep(for: .milliseconds(min(5_000, 250 * (1 << min(failures, 5)))))
                }
            }
        }
    }
}
