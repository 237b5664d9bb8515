import Foundation
import GRDB

/// The embedded store: SQLite through GRDB, in WAL mode (a `DatabasePool`).
public final class SQLiteStore: SignInStore {
    private let pool: DatabasePool

    /// Opens (creating if needed) the database at `path`.
    public init(path: String) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(5)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
        }
        pool = try DatabasePool(path: path, configuration: configuration)
    }

    public func migrate() async throws {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE pending_authorizations (
                    state TEXT PRIMARY KEY NOT NULL,
                    nonce TEXT NOT NULL,
                    return_to TEXT NOT NULL,
                    binding_hash TEXT NOT NULL,
                    created_at REAL NOT NULL,
                    expires_at REAL NOT NULL
                );
                CREATE INDEX pending_expires ON pending_authorizations(expires_at);
                CREATE TABLE users (
                    sub TEXT PRIMARY KEY NOT NULL,
                    email TEXT,
                    is_private_email INTEGER NOT NULL DEFAULT 0,
                    first_name TEXT,
                    last_name TEXT,
                    created_at REAL NOT NULL,
                    last_sign_in_at REAL NOT NULL
                );
                CREATE TABLE refresh_tokens (
                    sub TEXT PRIMARY KEY NOT NULL REFERENCES users(sub) ON DELETE CASCADE,
                    client_id TEXT NOT NULL,
                    token TEXT NOT NULL,
                    updated_at REAL NOT NULL
                );
                CREATE TABLE sessions (
                    id_hash TEXT PRIMARY KEY NOT NULL,
                    sub TEXT NOT NULL REFERENCES users(sub) ON DELETE CASCADE,
                    csrf_token TEXT NOT NULL,
                    created_at REAL NOT NULL,
                    expires_at REAL NOT NULL
                );
                CREATE INDEX sessions_sub ON sessions(sub);
                CREATE INDEX sessions_expires ON sessions(expires_at);
                """)
        }
        try migrator.migrate(pool)
    }

    public func savePending(_ pending: PendingAuthorization) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "INSERT INTO pending_authorizations (state, nonce, return_to, binding_hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
                arguments: [pending.state, pending.nonce, pending.returnTo, pending.bindingHash, pending.createdAt.timeIntervalSince1970, pending.expiresAt.timeIntervalSince1970]
            )
        }
    }

    public func consumePending(state: String, now: Date) async throws -> PendingAuthorization? {
        try await pool.write { db in
            let row = try Row.fetchOne(
                db,
                sql: "DELETE FROM pending_authorizations WHERE state = ? RETURNING nonce, return_to, binding_hash, created_at, expires_at",
                arguments: [state]
            )
            guard let row else { return nil }
            let pending = PendingAuthorization(
                state: state, nonce: row["nonce"], returnTo: row["return_to"], bindingHash: row["binding_hash"],
                createdAt: Date(timeIntervalSince1970: row["created_at"]), expiresAt: Date(timeIntervalSince1970: row["expires_at"])
            )
            return pending.expiresAt > now ? pending : nil
        }
    }

    public func completeSignIn(_ completed: CompletedSignIn) async throws -> UserRecord {
        try await pool.write { db in
            let at = completed.at.timeIntervalSince1970
            try db.execute(
                sql: """
                    INSERT INTO users (sub, email, is_private_email, first_name, last_name, created_at, last_sign_in_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT(sub) DO UPDATE SET
                        email = COALESCE(excluded.email, users.email),
                        is_private_email = CASE WHEN excluded.email IS NULL THEN users.is_private_email ELSE excluded.is_private_email END,
                        first_name = COALESCE(excluded.first_name, users.first_name),
                        last_name = COALESCE(excluded.last_name, users.last_name),
                        last_sign_in_at = excluded.last_sign_in_at
                    """,
                arguments: [completed.subject, completed.email, completed.isPrivateEmail, completed.firstName, completed.lastName, at, at]
            )
            if let token = completed.refreshToken {
                try db.execute(
                    sql: """
                        INSERT INTO refresh_tokens (sub, client_id, token, updated_at) VALUES (?, ?, ?, ?)
                        ON CONFLICT(sub) DO UPDATE SET client_id = excluded.client_id, token = excluded.token, updated_at = excluded.updated_at
                        """,
                    arguments: [completed.subject, completed.clientID, token, at]
                )
            }
            let session = completed.session
            try db.execute(
                sql: "INSERT INTO sessions (id_hash, sub, csrf_token, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
                arguments: [session.idHash, session.subject, session.csrfToken, session.createdAt.timeIntervalSince1970, session.expiresAt.timeIntervalSince1970]
            )
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM users WHERE sub = ?", arguments: [completed.subject]) else {
                throw DatabaseError(message: "user vanished inside its own transaction")
            }
            return Self.user(row)
        }
    }

    public func session(idHash: String, now: Date) async throws -> (SessionRecord, UserRecord)? {
        try await pool.read { db in
            guard let row = try Row.fetchOne(
                db,
                sql: """
                    SELECT s.id_hash, s.csrf_token, s.created_at AS s_created, s.expires_at, u.*
                    FROM sessions s JOIN users u ON u.sub = s.sub WHERE s.id_hash = ? AND s.expires_at > ?
                    """,
                arguments: [idHash, now.timeIntervalSince1970]
            ) else { return nil }
            let session = SessionRecord(
                idHash: row["id_hash"], subject: row["sub"], csrfToken: row["csrf_token"],
                createdAt: Date(timeIntervalSince1970: row["s_created"]), expiresAt: Date(timeIntervalSince1970: row["expires_at"])
            )
            return (session, Self.user(row))
        }
    }

    public func deleteSession(idHash: String) async throws -> Bool {
        try await pool.write { db in
            try db.execute(sql: "DELETE FROM sessions WHERE id_hash = ?", arguments: [idHash])
            return db.changesCount > 0
        }
    }

    public func ping() async throws {
        _ = try await pool.read { db in try Int.fetchOne(db, sql: "SELECT 1") }
    }

    private static func user(_ row: Row) -> UserRecord {
        UserRecord(
            subject: row["sub"], email: row["email"], isPrivateEmail: row["is_private_email"],
            firstName: row["first_name"], lastName: row["last_name"],
            createdAt: Date(timeIntervalSince1970: row["created_at"]), lastSignInAt: Date(timeIntervalSince1970: row["last_sign_in_at"])
        )
    }
}
