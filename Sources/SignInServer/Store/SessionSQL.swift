import Foundation
import GRDB
import Logging
import PostgresNIO
import ServiceLifecycle

/// A person's sessions as the sessions page and the console list them.
public protocol SessionList: Sendable {
    /// The live sessions of `subject`, newest first, with their details and last use.
    func sessions(subject: String, now: Date) async throws -> [SessionRecord]
    /// Writes when sessions were last used (`SessionTouchWriter`): each only when it moves by more than a minute.
    func touchSessions(_ touches: [(idHash: String, at: Date)]) async throws
    /// The sessions this instance saw used since the last call (`SessionCache.drainTouches`).
    func drainSessionTouches() -> [(idHash: String, at: Date)]
}

extension SessionList {
    /// A store without a session cache notes no use.
    public func drainSessionTouches() -> [(idHash: String, at: Date)] { [] }
}

/// Writes the sessions' last use every `interval` (30 s): one transaction for all the sessions used meanwhile, so a
/// session in use costs at most one write a minute, never one per request.
public struct SessionTouchWriter: Service, CustomStringConvertible {
    public var description: String { "SessionTouchWriter" }
    let store: any SessionList
    var interval: Duration = .seconds(30)
    let logger: Logger

    public init(store: any SessionList, interval: Duration = .seconds(30), logger: Logger) {
        self.store = store
        self.interval = interval
        self.logger = logger
    }

    public func run() async throws {
        // The ticker is stopped by a graceful shutdown, and what it noted last is then written here, in this task,
        // which the shutdown does not cancel (a cancelled task's store write would fail and lose them).
        let interval = interval
        let ticker = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                if Task.isCancelled { break }
                await flush()
            }
        }
        await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                await ticker.value
            } onGracefulShutdown: {
                ticker.cancel()
            }
        } onCancel: {
            ticker.cancel()
        }
        await flush()
    }

    /// Writes what was noted; on failure, it is noted again at the next use.
    public func flush() async {
        let touches = store.drainSessionTouches()
        // In slices, so that one transaction stays short.
        for start in stride(from: 0, to: touches.count, by: 500) {
            do {
                try await store.touchSessions(Array(touches[start..<min(start + 500, touches.count)]))
            } catch {
                logger.warning("sessions' last use not written", metadata: ["sessions": "\(touches.count - start)", "error": "\(String(describing: type(of: error)))"])
                return
            }
        }
    }
}

/// The sessions' details and last use, written once for both stores (`ProviderStatement`).
enum SessionSQL {
    /// Migration v6 (issue 28).
    static let schema = [
        "ALTER TABLE sessions ADD COLUMN device TEXT",
        "ALTER TABLE sessions ADD COLUMN network TEXT",
        "ALTER TABLE sessions ADD COLUMN via TEXT",
        "ALTER TABLE sessions ADD COLUMN last_used_at DOUBLE PRECISION",
    ]

    /// The details of a session just stored (in the sign-in's transaction).
    static func describe(_ session: SessionRecord) -> ProviderStatement? {
        guard let details = session.details else { return nil }
        return ProviderStatement(
            "UPDATE sessions SET device = $2, network = $3, via = $4, last_used_at = $5 WHERE id_hash = $1",
            .text(session.idHash), .text(details.device), .text(details.network), .text(details.via), .real(session.createdAt.timeIntervalSince1970)
        )
    }

    /// Migration v13 (issue 47): when the person last authenticated with Apple for the session, as Apple's token says.
    static let v13 = ["ALTER TABLE sessions ADD COLUMN auth_time DOUBLE PRECISION"]

    /// A live session of `subject` authenticated again with Apple at `at` (a native app's renewal); a row when it was.
    static func renew(idHash: String, subject: String, at: Date) -> ProviderStatement {
        ProviderStatement(
            "UPDATE sessions SET auth_time = $3 WHERE id_hash = $1 AND sub = $2 AND expires_at > $3 RETURNING 1",
            .text(idHash), .text(subject), .real(at.timeIntervalSince1970)
        )
    }

    static func list(subject: String, now: Date) -> ProviderStatement {
        ProviderStatement(
            "SELECT id_hash, csrf_token, created_at, expires_at, device, network, via, last_used_at FROM sessions WHERE sub = $1 AND expires_at > $2 ORDER BY created_at DESC",
            .text(subject), .real(now.timeIntervalSince1970)
        )
    }

    static func touch(idHash: String, at: Date) -> ProviderStatement {
        ProviderStatement(
            "UPDATE sessions SET last_used_at = $2 WHERE id_hash = $1 AND (last_used_at IS NULL OR last_used_at < $3)",
            .text(idHash), .real(at.timeIntervalSince1970), .real(at.timeIntervalSince1970 - 60)
        )
    }

    static func session(_ row: some ProviderRow, subject: String) throws -> SessionRecord {
        var session = SessionRecord(
            idHash: try row.text(0), subject: subject, csrfToken: try row.text(1), createdAt: Date(timeIntervalSince1970: try row.real(2)),
            expiresAt: Date(timeIntervalSince1970: try row.real(3))
        )
        if let device = try row.optionalText(4) {
            session.details = SessionDetails(device: device, network: try row.optionalText(5) ?? "", via: try row.optionalText(6) ?? "page")
        }
        session.lastUsedAt = try row.optionalReal(7).map { Date(timeIntervalSince1970: $0) }
        return session
    }
}

extension SQLiteStore {
    public func sessions(subject: String, now: Date) async throws -> [SessionRecord] {
        try await pool.read { db in try db.rows(SessionSQL.list(subject: subject, now: now)).map { try SessionSQL.session($0, subject: subject) } }
    }

    public func touchSessions(_ touches: [(idHash: String, at: Date)]) async throws {
        guard !touches.isEmpty else { return }
        try await pool.write { db in _ = try db.run(touches.map { SessionSQL.touch(idHash: $0.idHash, at: $0.at) }) }
    }
}

extension PostgresStore {
    public func sessions(subject: String, now: Date) async throws -> [SessionRecord] {
        try await single(SessionSQL.list(subject: subject, now: now)).map { try SessionSQL.session($0, subject: subject) }
    }

    public func touchSessions(_ touches: [(idHash: String, at: Date)]) async throws {
        guard !touches.isEmpty else { return }
        try await transaction { connection, logger in _ = try await connection.run(touches.map { SessionSQL.touch(idHash: $0.idHash, at: $0.at) }, logger: logger) }
    }
}
