import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle

/// Keeps a PostgreSQL instance's session cache true to what the other instances change: every write that ends or
/// alters a session (`PostgresStore`) also sends `NOTIFY siwa_sessions` inside its transaction, which PostgreSQL
/// delivers to every listening connection when, and only if, the transaction commits. This service holds one
/// connection listening on that channel and forgets what each notification names: `sub:<subject>` (every
/// session of a person: sign-in, sign-out everywhere, account deletion, Apple's `consent-revoked`) or
/// `session:<id hash>` (one sign-out). While it is not listening (the database restarting) it may miss some, so
/// whenever it starts listening again it forgets everything; until then `check_cache_seconds` bounds what is stale.
struct SessionInvalidationListener: Service {
    static let channel = "siwa_sessions"

    let client: PostgresClient
    let cache: SessionCache
    let logger: Logger

    func run() async throws {
        await cancelWhenGracefulShutdown {
            var failures = 0
            while !Task.isCancelled {
                do {
                    try await client.withConnection { connection in
                        try await connection.listen(on: Self.channel) { notifications in
                            // Whatever changed while no connection listened is unknown: start afresh.
                            cache.invalidateAll()
                            if failures > 0 { logger.info("listening for other instances' session changes again") }
                            failures = 0
                            for try await notification in notifications {
                                Self.apply(notification.payload, to: cache)
                            }
                        }
                    }
                } catch {
                    if Task.isCancelled { break }
                    cache.invalidateAll()
                    failures += 1
                    logger.warning("not hearing other instances' session changes; cached sessions expire on their own meanwhile", metadata: ["error": "\(String(reflecting: error))"])
                }
                if Task.isCancelled { break }
                // The stream ended (the connection closed) or failed: listen again after a pause that grows to 5 s.
                try? await Task.sleep(for: .milliseconds(min(5_000, 250 * (1 << min(failures, 5)))))
            }
        }
    }

    /// Forgets what `payload` names.
    static func apply(_ payload: String, to cache: SessionCache) {
        if payload.hasPrefix("sub:") {
            cache.invalidate(subject: String(payload.dropFirst(4)))
        } else if payload.hasPrefix("session:") {
            cache.invalidate(idHash: String(payload.dropFirst(8)))
        } else {
            cache.invalidateAll()
        }
    }

    /// Tells every instance, when the transaction on `connection` commits, to forget `subject`'s sessions.
    static func announce(subject: String, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("SELECT pg_notify(\(channel), \("sub:" + subject))", logger: logger)
    }

    /// Tells every instance, when the transaction on `connection` commits, to forget one session.
    static func announce(session idHash: String, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("SELECT pg_notify(\(channel), \("session:" + idHash))", logger: logger)
    }
}
