import Foundation
import GRDB
import Logging
import PostgresNIO

/// One Logout Token to deliver (Back-Channel Logout 1.0): to `clientID`, for the person `subject` (Apple's sub; the
/// client's own, pairwise or not, is worked out when it is sent) and the session `sessionID` (`sid`).
public struct LogoutDelivery: Sendable, Equatable {
    public var id: Int64
    public var clientID: String
    public var subject: String
    public var sessionID: String
    /// Tries so far, this one included.
    public var attempts: Int
    public var createdAt: Date
}

/// The queue of Logout Tokens, in the store (both backends) so that a delivery outlives a restart and is claimed
/// by one instance at a time. Rows are added in the same transaction that ends a session (`LogoutSQL.enqueue`).
public protocol LogoutQueue: Sendable {
    /// Up to `limit` deliveries due at `now`, claimed until `leaseUntil` (another instance takes one back only then).
    func claimLogoutDeliveries(now: Date, limit: Int, leaseUntil: Date) async throws -> [LogoutDelivery]
    /// Delivered, or given up: removed.
    func finishLogoutDelivery(id: Int64) async throws
    /// Failed: tried again at `at`.
    func retryLogoutDelivery(id: Int64, at: Date) async throws
    /// Deliveries waiting (`/metrics`).
    func pendingLogoutDeliveries() async throws -> Int
}

/// The statements of the logout queue, written once for both stores (`ProviderStatement`).
enum LogoutSQL {
    /// Migration v5 (issue 28): the `sid` of codes and tokens, clients' `backchannel_logout_uri`, the queue. The
    /// queue's key is the one thing the two databases spell differently.
    static func schema(serialKey: String) -> [String] {
        [
            "ALTER TABLE authorization_codes ADD COLUMN sid TEXT",
            "ALTER TABLE provider_tokens ADD COLUMN sid TEXT",
            "CREATE INDEX provider_tokens_sid ON provider_tokens(sid)",
            "ALTER TABLE provider_clients ADD COLUMN backchannel_logout_uri TEXT",
            """
            CREATE TABLE logout_deliveries (id \(serialKey), client_id TEXT NOT NULL, sub TEXT NOT NULL, sid TEXT NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at DOUBLE PRECISION NOT NULL, created_at DOUBLE PRECISION NOT NULL,
                UNIQUE (client_id, sid))
            """,
            "CREATE INDEX logout_deliveries_due ON logout_deliveries(next_attempt_at)",
        ]
    }

    /// A delivery to each client that holds tokens issued in the session `sid` (the session ends).
    static func enqueue(session sid: String, at: Date) -> ProviderStatement {
        ProviderStatement(
            """
            INSERT INTO logout_deliveries (client_id, sub, sid, next_attempt_at, created_at)
            SELECT DISTINCT client_id, sub, sid, $2, $2 FROM provider_tokens WHERE sid = $1
            ON CONFLICT (client_id, sid) DO NOTHING
            """,
            .text(sid), .real(at.timeIntervalSince1970)
        )
    }

    /// A delivery for each session of `subject` any client holds unexpired tokens of (every session of the person ends).
    static func enqueue(subject: String, at: Date) -> ProviderStatement {
        ProviderStatement(
            """
            INSERT INTO logout_deliveries (client_id, sub, sid, next_attempt_at, created_at)
            SELECT DISTINCT client_id, sub, sid, $2, $2 FROM provider_tokens WHERE sub = $1 AND sid IS NOT NULL AND expires_at > $2
            ON CONFLICT (client_id, sid) DO NOTHING
            """,
            .text(subject), .real(at.timeIntervalSince1970)
        )
    }

    /// Claims due deliveries: their next attempt moves to the lease's end, their attempts count up; PostgreSQL skips
    /// rows another instance is claiming (`lockRows`).
    static func claim(now: Date, limit: Int, leaseUntil: Date, lockRows: Bool) -> ProviderStatement {
        ProviderStatement(
            """
            UPDATE logout_deliveries SET attempts = attempts + 1, next_attempt_at = $2
            WHERE id IN (SELECT id FROM logout_deliveries WHERE next_attempt_at <= $1 ORDER BY next_attempt_at LIMIT $3\(lockRows ? " FOR UPDATE SKIP LOCKED" : ""))
            RETURNING id, client_id, sub, sid, attempts, created_at
            """,
            .real(now.timeIntervalSince1970), .real(leaseUntil.timeIntervalSince1970), .integer(limit)
        )
    }

    static func finish(id: Int64) -> ProviderStatement {
        ProviderStatement("DELETE FROM logout_deliveries WHERE id = $1", .integer(Int(id)))
    }

    static func retry(id: Int64, at: Date) -> ProviderStatement {
        ProviderStatement("UPDATE logout_deliveries SET next_attempt_at = $2 WHERE id = $1", .integer(Int(id)), .real(at.timeIntervalSince1970))
    }

    static let pending = ProviderStatement("SELECT COUNT(*) FROM logout_deliveries")

    static func delivery(_ row: some ProviderRow) throws -> LogoutDelivery {
        LogoutDelivery(
            id: try row.integer(0), clientID: try row.text(1), subject: try row.text(2), sessionID: try row.text(3), attempts: Int(try row.integer(4)),
            createdAt: Date(timeIntervalSince1970: try row.real(5))
        )
    }
}

extension SQLiteStore {
    public func claimLogoutDeliveries(now: Date, limit: Int, leaseUntil: Date) async throws -> [LogoutDelivery] {
        try await pool.write { db in try db.rows(LogoutSQL.claim(now: now, limit: limit, leaseUntil: leaseUntil, lockRows: false)).map(LogoutSQL.delivery) }
    }

    public func finishLogoutDelivery(id: Int64) async throws {
        try await pool.write { db in _ = try db.rows(LogoutSQL.finish(id: id)) }
    }

    public func retryLogoutDelivery(id: Int64, at: Date) async throws {
        try await pool.write { db in _ = try db.rows(LogoutSQL.retry(id: id, at: at)) }
    }

    public func pendingLogoutDeliveries() async throws -> Int {
        try await pool.read { db in Int(try db.rows(LogoutSQL.pending).first?.integer(0) ?? 0) }
    }
}

extension PostgresStore {
    public func claimLogoutDeliveries(now: Date, limit: Int, leaseUntil: Date) async throws -> [LogoutDelivery] {
        try await single(LogoutSQL.claim(now: now, limit: limit, leaseUntil: leaseUntil, lockRows: true)).map(LogoutSQL.delivery)
    }

    public func finishLogoutDelivery(id: Int64) async throws {
        _ = try await single(LogoutSQL.finish(id: id))
    }

    public func retryLogoutDelivery(id: Int64, at: Date) async throws {
        _ = try await single(LogoutSQL.retry(id: id, at: at))
    }

    public func pendingLogoutDeliveries() async throws -> Int {
        Int(try await single(LogoutSQL.pending).first?.integer(0) ?? 0)
    }
}
