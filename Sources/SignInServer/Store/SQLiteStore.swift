import AppleSignIn
import Foundation
import GRDB
import ServiceLifecycle

/// The embedded store: SQLite through GRDB, in WAL mode (a `DatabasePool`).
public final class SQLiteStore: SignInStore {
    /// Which apps want which account events (`event_webhooks`): the outbox rows a change writes.
    public let events = EventRouting()
    let pool: DatabasePool
    let cipher: TokenCipher

    /// Opens (creating if needed) the database at `path`; refresh tokens are sealed with `cipher`.
    public init(path: String, cipher: TokenCipher) throws {
        try Self.restrictToOwner(path: path)
        var configuration = Configuration()
        configuration.busyMode = .timeout(5)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
        }
        pool = try DatabasePool(path: path, configuration: configuration)
        self.cipher = cipher
    }

    /// Makes the database and its `-wal`/`-shm` files readable by their owner only (0600), whatever the umask: they
    /// hold names, emails and CSRF tokens. The database is created here first, since SQLite gives the `-wal` and
    /// `-shm` files it creates the database file's mode; files that already exist are narrowed too.
    static func restrictToOwner(path: String) throws {
        guard path != ":memory:", !path.isEmpty else { return }
        let files = FileManager.default
        if !files.fileExists(atPath: path) {
            guard files.createFile(atPath: path, contents: nil, attributes: [.posixPermissions: 0o600]) else {
                throw CocoaError(.fileWriteNoPermission, userInfo: [NSFilePathErrorKey: path])
            }
        }
        for file in [path, path + "-wal", path + "-shm"] where files.fileExists(atPath: file) {
            try files.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file)
        }
    }

    public var services: [any Service] { [] }

    /// The pool's readers.
    public var queriesAtOnce: Int { pool.configuration.maximumReaderCount }

    // MARK: signing keys

    public func signingKeys() async throws -> [SigningKeyRecord] {
        let cipher = cipher
        return try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT kid, private_key, created_at, activates_at, retires_at, algorithm FROM signing_keys ORDER BY created_at, kid").map { row in
                SigningKeyRecord(
                    kid: row["kid"], privateKeyPEM: try cipher.open(row["private_key"]), createdAt: Date(timeIntervalSince1970: row["created_at"]),
                    activatesAt: Date(timeIntervalSince1970: row["activates_at"]), retiresAt: (row["retires_at"] as Double?).map { Date(timeIntervalSince1970: $0) },
                    algorithm: row["algorithm"]
                )
            }
        }
    }

    public func addSigningKey(_ key: SigningKeyRecord) async throws {
        let sealed = try cipher.seal(key.privateKeyPEM)
        try await pool.write { db in
            try db.execute(
                sql: "INSERT INTO signing_keys (kid, private_key, created_at, activates_at, retires_at, algorithm) VALUES (?, ?, ?, ?, ?, ?)",
                arguments: [key.kid, sealed, key.createdAt.timeIntervalSince1970, key.activatesAt.timeIntervalSince1970, key.retiresAt?.timeIntervalSince1970, key.algorithm]
            )
        }
    }

    public func retireSigningKeys(activeAt: Date, retiresAt: Date, except kid: String) async throws {
        try await pool.write { db in
            try db.execute(
                sql: "UPDATE signing_keys SET retires_at = ? WHERE activates_at <= ? AND retires_at IS NULL AND kid <> ? AND algorithm = (SELECT algorithm FROM signing_keys WHERE kid = ?)",
                arguments: [retiresAt.timeIntervalSince1970, activeAt.timeIntervalSince1970, kid, kid]
            )
        }
    }

    public func migrate() async throws {
        var migrator = DatabaseMigrator()
        for (version, sql) in SQLiteSchema.migrations {
            migrator.registerMigration(version) { db in try db.execute(sql: sql) }
        }
        // Not `migrator.migrate(pool)`: that blocks the calling thread until every reader is done, and on Swift's
        // cooperative pool (two threads on two cores) two such waits at once left no thread for the readers'
        // own work: the test process hung. GRDB schedules the migration and calls back instead.
        let scheduled = migrator
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            scheduled.asyncMigrate(pool) { result in
                switch result {
                case .success: continuation.resume()
                case .failure(let error): continuation.resume(throwing: error)
                }
            }
        }
    }

    public func savePending(_ pending: PendingAuthorization) async throws {
        try await pool.write { db in
            try db.cachedExecute(
                sql: "INSERT INTO pending_authorizations (state, nonce, return_to, binding_hash, created_at, expires_at, invitation_hash) VALUES (?, ?, ?, ?, ?, ?, ?)",
                arguments: [pending.state, pending.nonce, pending.returnTo, pending.bindingHash, pending.createdAt.timeIntervalSince1970, pending.expiresAt.timeIntervalSince1970, pending.invitationHash]
            )
        }
    }

    public func consumePending(state: String, now: Date) async throws -> PendingAuthorization? {
        try await pool.write { db in
            let row = try db.cachedRow(
                sql: "DELETE FROM pending_authorizations WHERE state = ? RETURNING nonce, return_to, binding_hash, created_at, expires_at, invitation_hash",
                arguments: [state]
            )
            guard let row else { return nil }
            let pending = PendingAuthorization(
                state: state, nonce: row["nonce"], returnTo: row["return_to"], bindingHash: row["binding_hash"],
                createdAt: Date(timeIntervalSince1970: row["created_at"]), expiresAt: Date(timeIntervalSince1970: row["expires_at"]),
                invitationHash: row["invitation_hash"]
            )
            return pending.expiresAt > now ? pending : nil
        }
    }

    public func completeSignIn(_ completed: CompletedSignIn) async throws -> UserRecord {
        let sealed = try completed.refreshToken.map { try cipher.seal($0) }
        // The person's first sign-in is an account event only for an app that wants it: asked of the table only then.
        let joined = EventSQL.joined(completed, routing: events)
        return try await pool.write { db in
            let at = completed.at.timeIntervalSince1970
            let known = completed.transferSubject == nil && joined.isEmpty
                ? true : try db.cachedInt(sql: "SELECT 1 FROM users WHERE sub = ?", arguments: [completed.subject]) != nil
            if let transfer = completed.transferSubject, !known {
                // Team transfer: the user known under the old team's sub (mapped by `siwa migrate-users`) becomes this sub.
                try db.cachedExecute(sql: "UPDATE users SET sub = ? WHERE transfer_sub = ?", arguments: [completed.subject, transfer])
            }
            try db.cachedExecute(
                sql: """
                    INSERT INTO users (sub, email, is_private_email, first_name, last_name, created_at, last_sign_in_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT(sub) DO UPDATE SET
                        email = COALESCE(excluded.email, users.email),
                        is_private_email = CASE WHEN excluded.email IS NULL THEN users.is_private_email ELSE excluded.is_private_email END,
                        first_name = CASE WHEN users.link_revoked_at IS NULL THEN COALESCE(users.first_name, excluded.first_name) ELSE COALESCE(excluded.first_name, users.first_name) END,
                        last_name = CASE WHEN users.link_revoked_at IS NULL THEN COALESCE(users.last_name, excluded.last_name) ELSE COALESCE(excluded.last_name, users.last_name) END,
                        last_sign_in_at = excluded.last_sign_in_at,
                        link_revoked_at = NULL
                    """,
                arguments: [completed.subject, completed.email, completed.isPrivateEmail, completed.firstName, completed.lastName, at, at]
            )
            if let sealed {
                try db.cachedExecute(
                    sql: """
                        INSERT INTO refresh_tokens (sub, client_id, token, updated_at, next_check_at) VALUES (?, ?, ?, ?, ?)
                        ON CONFLICT(sub) DO UPDATE SET client_id = excluded.client_id, token = excluded.token,
                            updated_at = excluded.updated_at, next_check_at = excluded.next_check_at
                        """,
                    arguments: [completed.subject, completed.clientID, sealed, at, at + 86_400]
                )
            }
            let session = completed.session
            try db.cachedExecute(
                sql: "INSERT INTO sessions (id_hash, sub, csrf_token, created_at, expires_at, auth_time) VALUES (?, ?, ?, ?, ?, ?)",
                arguments: [
                    session.idHash, session.subject, session.csrfToken, session.createdAt.timeIntervalSince1970, session.expiresAt.timeIntervalSince1970,
                    session.authTime?.timeIntervalSince1970,
                ]
            )
            if let describe = SessionSQL.describe(session) { _ = try db.rows(describe) }
            if !known { _ = try db.run(joined) }
            guard let row = try db.cachedRow(sql: Self.userQuery, arguments: [completed.subject]) else {
                throw DatabaseError(message: "user vanished inside its own transaction")
            }
            return Self.user(row, from: 0)
        }
    }

    public func session(idHash: String, now: Date) async throws -> (SessionRecord, UserRecord)? {
        try await pool.read { db -> (SessionRecord, UserRecord)? in
            guard let row = try db.cachedRow(sql: Self.sessionQuery, arguments: [idHash, now.timeIntervalSince1970]) else { return nil }
            let user = Self.user(row, from: 6)
            var session = SessionRecord(
                idHash: row[0], subject: user.subject, csrfToken: row[1],
                createdAt: Date(timeIntervalSince1970: row[2]), expiresAt: Date(timeIntervalSince1970: row[3]), via: row[4]
            )
            session.authTime = (row[5] as Double?).map { Date(timeIntervalSince1970: $0) }
            return (session, user)
        }
    }

    public func renewAuthentication(idHash: String, subject: String, at: Date) async throws -> Bool {
        try await pool.write { db in try !db.rows(SessionSQL.renew(idHash: idHash, subject: subject, at: at)).isEmpty }
    }

    public func deleteSession(idHash: String) async throws -> Bool {
        try await pool.write { db in
            try db.cachedExecute(sql: "DELETE FROM sessions WHERE id_hash = ?", arguments: [idHash])
            let ended = db.changesCount > 0
            if ended {
                let sid = SessionRecord.publicID(idHash: idHash)
                _ = try db.rows(LogoutSQL.enqueue(session: sid, at: Date()))
                _ = try db.run(ProviderSQL.revoke(session: sid))
            }
            return ended
        }
    }

    public func ping() async throws {
        _ = try await pool.read { db in try db.cachedInt(sql: "SELECT 1") }
    }

    public func user(subject: String) async throws -> UserRecord? {
        try await pool.read { db in
            try db.cachedRow(sql: Self.userQuery, arguments: [subject]).map { Self.user($0, from: 0) }
        }
    }

    public func countActiveSessions(now: Date) async throws -> Int {
        try await pool.read { db in
            try db.cachedInt(sql: "SELECT COUNT(*) FROM sessions WHERE expires_at > ?", arguments: [now.timeIntervalSince1970]) ?? 0
        }
    }

    public func sweepExpired(now: Date, limit: Int) async throws -> Int {
        try await pool.write { db in
            let at = now.timeIntervalSince1970
            try db.cachedExecute(sql: "DELETE FROM pending_authorizations WHERE state IN (SELECT state FROM pending_authorizations WHERE expires_at <= ? LIMIT ?)", arguments: [at, limit])
            var removed = db.changesCount
            try db.cachedExecute(sql: "DELETE FROM sessions WHERE id_hash IN (SELECT id_hash FROM sessions WHERE expires_at <= ? LIMIT ?)", arguments: [at, limit])
            removed += db.changesCount
            return try removed + db.run(ProviderSQL.sweep(now: now, limit: limit)).reduce(0, +)
        }
    }

    public func apply(_ notification: AppleNotification, receivedAt: Date) async throws -> NotificationOutcome {
        try await pool.write { db in
            let at = receivedAt.timeIntervalSince1970
            try db.cachedExecute(
                sql: "INSERT INTO notifications (jti, type, sub, event_time, received_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT(jti) DO NOTHING",
                arguments: [notification.id, notification.event.type.rawValue, notification.event.subject, notification.event.eventTime.timeIntervalSince1970, at]
            )
            guard db.changesCount > 0 else { return .duplicate }
            let sub = notification.event.subject
            switch notification.event.type {
            case .emailDisabled:
                try db.cachedExecute(sql: "UPDATE users SET email_forwarding_disabled = 1 WHERE sub = ?", arguments: [sub])
            case .emailEnabled:
                try db.cachedExecute(sql: "UPDATE users SET email_forwarding_disabled = 0 WHERE sub = ?", arguments: [sub])
            case .consentRevoked:
                try Self.revokeLink(db, subject: sub, at: at)
            case .accountDelete:
                _ = try Self.deleteUser(db, subject: sub, tombstone: true, at: at)
            case .unknown:
                return .recorded
            }
            _ = try db.run(EventSQL.told(notification, receivedAt: receivedAt, routing: events))
            return .applied
        }
    }

    public func deleteUser(subject: String, tombstone: Bool, at: Date) async throws -> RefreshCheck? {
        let events = events
        let row = try await pool.write { db in
            let row = try Self.deleteUser(db, subject: subject, tombstone: tombstone, at: at.timeIntervalSince1970)
            _ = try db.run(EventSQL.enqueue(.deleted, subject: subject, data: ["reason": "deleted-at-siwa"], at: at, routing: events))
            return row
        }
        // The user is gone either way; a token no configured key opens cannot be revoked.
        guard let row, let token = cipher.openIfReadable(row.token) else { return nil }
        return RefreshCheck(subject: subject, clientID: row.clientID, token: token)
    }

    public func revokeLink(subject: String, at: Date) async throws {
        try await pool.write { db -> Void in
            try Self.revokeLink(db, subject: subject, at: at.timeIntervalSince1970)
        }
    }

    public func claimRefreshChecks(now: Date, limit: Int, nextCheck: @Sendable () -> Date) async throws -> [RefreshCheck] {
        let rows: [(String, String, String)] = try await pool.write { db in
            let due = try db.cachedRows(
                sql: "SELECT sub, client_id, token FROM refresh_tokens WHERE next_check_at <= ? ORDER BY next_check_at LIMIT ?",
                arguments: [now.timeIntervalSince1970, limit]
            )
            for row in due {
                try db.cachedExecute(
                    sql: "UPDATE refresh_tokens SET next_check_at = ?, last_check_at = ? WHERE sub = ?",
                    arguments: [max(nextCheck().timeIntervalSince1970, now.timeIntervalSince1970 + 86_400), now.timeIntervalSince1970, row["sub"] as String]
                )
            }
            return due.map { ($0["sub"], $0["client_id"], $0["token"]) }
        }
        // Unreadable tokens (sealed with a removed key) are skipped, not allowed to fail everyone's check.
        return rows.compactMap { row in cipher.openIfReadable(row.2).map { RefreshCheck(subject: row.0, clientID: row.1, token: $0) } }
    }

    public func enqueueRevocation(clientID: String, token: String, at: Date) async throws {
        let sealed = try cipher.seal(token)
        try await pool.write { db in
            try db.cachedExecute(
                sql: "INSERT INTO revocations (client_id, token, attempts, next_attempt_at, created_at) VALUES (?, ?, 0, ?, ?)",
                arguments: [clientID, sealed, at.timeIntervalSince1970, at.timeIntervalSince1970]
            )
        }
    }

    public func claimRevocations(now: Date, limit: Int, retryAt: Date) async throws -> [PendingRevocation] {
        let rows: [(Int64, String, String, Int)] = try await pool.write { db in
            let due = try db.cachedRows(
                sql: "SELECT id, client_id, token, attempts FROM revocations WHERE next_attempt_at <= ? ORDER BY id LIMIT ?",
                arguments: [now.timeIntervalSince1970, limit]
            )
            for row in due {
                try db.cachedExecute(
                    sql: "UPDATE revocations SET attempts = attempts + 1, next_attempt_at = ? WHERE id = ?",
                    arguments: [retryAt.timeIntervalSince1970, row["id"] as Int64]
                )
            }
            return due.map { ($0["id"], $0["client_id"], $0["token"], ($0["attempts"] as Int) + 1) }
        }
        var pending: [PendingRevocation] = []
        for row in rows {
            if let token = cipher.openIfReadable(row.2) {
                pending.append(PendingRevocation(id: row.0, clientID: row.1, token: token, attempts: row.3))
            } else {
                // Never sendable: dropped rather than retried forever.
                try await finishRevocation(id: row.0)
            }
        }
        return pending
    }

    public func finishRevocation(id: Int64) async throws {
        try await pool.write { db -> Void in
            try db.cachedExecute(sql: "DELETE FROM revocations WHERE id = ?", arguments: [id])
        }
    }

    public func subjectsWithoutTransferSubject(limit: Int) async throws -> [String] {
        try await pool.read { db in
            try db.cachedStrings(sql: "SELECT sub FROM users WHERE transfer_sub IS NULL ORDER BY sub LIMIT ?", arguments: [limit])
        }
    }

    public func setTransferSubject(_ transferSubject: String, for subject: String) async throws {
        try await pool.write { db in
            try db.cachedExecute(sql: "UPDATE users SET transfer_sub = ? WHERE sub = ?", arguments: [transferSubject, subject])
        }
    }

    // MARK: shared statements

    private static func revokeLink(_ db: Database, subject: String, at: Double) throws {
        _ = try db.rows(LogoutSQL.enqueue(subject: subject, at: Date(timeIntervalSince1970: at)))
        try db.cachedExecute(sql: "DELETE FROM sessions WHERE sub = ?", arguments: [subject])
        try db.cachedExecute(sql: "DELETE FROM refresh_tokens WHERE sub = ?", arguments: [subject])
        try db.cachedExecute(sql: "UPDATE users SET link_revoked_at = ? WHERE sub = ?", arguments: [at, subject])
        _ = try db.run(ProviderSQL.revoke(subject: subject))
    }

    private static func deleteUser(_ db: Database, subject: String, tombstone: Bool, at: Double) throws -> (clientID: String, token: String)? {
        let token = try db.cachedRow(sql: "SELECT client_id, token FROM refresh_tokens WHERE sub = ?", arguments: [subject])
        // The person's sessions end with the account: their apps are told (before the tokens that name them go).
        _ = try db.rows(LogoutSQL.enqueue(subject: subject, at: Date(timeIntervalSince1970: at)))
        try db.cachedExecute(sql: "DELETE FROM users WHERE sub = ?", arguments: [subject])
        _ = try db.run(ProviderSQL.delete(subject: subject))
        if tombstone {
            try db.cachedExecute(sql: "INSERT INTO tombstones (sub, deleted_at) VALUES (?, ?) ON CONFLICT(sub) DO UPDATE SET deleted_at = excluded.deleted_at", arguments: [subject, at])
        }
        return token.map { ($0["client_id"], $0["token"]) }
    }

    private static let sessionQuery = """
        SELECT s.id_hash, s.csrf_token, s.created_at, s.expires_at, s.via, s.auth_time, \(UserRecord.joinedColumns)
        FROM sessions s JOIN users u ON u.sub = s.sub WHERE s.id_hash = ? AND s.expires_at > ?
        """
    private static let userQuery = "SELECT \(UserRecord.columns) FROM users WHERE sub = ?"

    /// The user whose `UserRecord.columns` start at column `offset` of `row` (by position: GRDB's lookup by
    /// name lower-cases and scans, once per column per page view).
    private static func user(_ row: Row, from offset: Int) -> UserRecord {
        UserRecord(
            subject: row[offset], email: row[offset + 1], isPrivateEmail: row[offset + 2], firstName: row[offset + 3], lastName: row[offset + 4],
            createdAt: Date(timeIntervalSince1970: row[offset + 5]), lastSignInAt: Date(timeIntervalSince1970: row[offset + 6]),
            emailForwardingDisabled: row[offset + 7], linkRevokedAt: (row[offset + 8] as Double?).map { Date(timeIntervalSince1970: $0) }
        )
    }
}

/// The SQLite schema, one string per migration.
enum SQLiteSchema {
    /// Every migration, in the order they apply.
    static let migrations = [("v1", v1), ("v2", v2), ("v3", v3), ("v4", v4), ("v5", v5), ("v6", v6), ("v7", v7), ("v8", v8), ("v9", v9), ("v10", v10), ("v11", v11), ("v12", v12), ("v13", v13)]
    static let v7 = ProviderSQL.v7.joined(separator: ";\n")
    static let v8 = DeviceSQL.v8.joined(separator: ";\n")
    static let v9 = ProviderSQL.v9.joined(separator: ";\n")
    static let v10 = EdgeSQL.v10.joined(separator: ";\n")
    /// Issue 47: invitations.
    static let v11 = InvitationSQL.v11.joined(separator: ";\n")
    /// Issue 47: Apple's authentication time of a session.
    static let v13 = SessionSQL.v13.joined(separator: ";\n")
    /// Issue 47: the outbox of account events.
    static let v12 = EventSQL.v12(serialKey: "INTEGER PRIMARY KEY AUTOINCREMENT").joined(separator: ";\n")
    /// Issue 27: the groups siwa keeps.
    static let v4 = GroupSQL.schema.joined(separator: ";\n")
    /// Issue 28: the sessions' details and last use.
    static let v6 = SessionSQL.schema.joined(separator: ";\n")
    /// Issue 28: back-channel logout.
    static let v5 = LogoutSQL.schema(serialKey: "INTEGER PRIMARY KEY AUTOINCREMENT").joined(separator: ";\n")

    /// Issue 18: the OpenID Provider's clients, codes and tokens, and each signing key's algorithm.
    static let v3 = ProviderSQL.schema.joined(separator: ";\n")

    /// Issue 17: siwa's own signing keys.
    static let v2 = """
        CREATE TABLE signing_keys (
            kid TEXT PRIMARY KEY NOT NULL,
            private_key TEXT NOT NULL,
            created_at DOUBLE NOT NULL,
            activates_at DOUBLE NOT NULL,
            retires_at DOUBLE
        );
        """

    static let v1 = """
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
            email_forwarding_disabled INTEGER NOT NULL DEFAULT 0,
            link_revoked_at REAL,
            transfer_sub TEXT UNIQUE,
            created_at REAL NOT NULL,
            last_sign_in_at REAL NOT NULL
        );
        CREATE TABLE refresh_tokens (
            sub TEXT PRIMARY KEY NOT NULL REFERENCES users(sub) ON DELETE CASCADE ON UPDATE CASCADE,
            client_id TEXT NOT NULL,
            token TEXT NOT NULL,
            updated_at REAL NOT NULL,
            last_check_at REAL,
            next_check_at REAL NOT NULL
        );
        CREATE INDEX refresh_due ON refresh_tokens(next_check_at);
        CREATE TABLE sessions (
            id_hash TEXT PRIMARY KEY NOT NULL,
            sub TEXT NOT NULL REFERENCES users(sub) ON DELETE CASCADE ON UPDATE CASCADE,
            csrf_token TEXT NOT NULL,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL
        );
        CREATE INDEX sessions_sub ON sessions(sub);
        CREATE INDEX sessions_expires ON sessions(expires_at);
        CREATE TABLE notifications (
            jti TEXT PRIMARY KEY NOT NULL,
            type TEXT NOT NULL,
            sub TEXT NOT NULL,
            event_time REAL NOT NULL,
            received_at REAL NOT NULL
        );
        CREATE TABLE tombstones (
            sub TEXT PRIMARY KEY NOT NULL,
            deleted_at REAL NOT NULL
        );
        CREATE TABLE revocations (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            client_id TEXT NOT NULL,
            token TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at REAL NOT NULL,
            created_at REAL NOT NULL
        );
        """
}

/// Hot statements are compiled once per connection and reused: compiling a statement runs SQLite's parser and
/// GRDB's authorizer callback for every column, which cost more than the query itself on the session page.
extension Database {
    func cachedExecute(sql: String, arguments: StatementArguments = StatementArguments()) throws {
        try cachedStatement(sql: sql).execute(arguments: arguments)
    }

    func cachedRow(sql: String, arguments: StatementArguments = StatementArguments()) throws -> Row? {
        try Row.fetchOne(cachedStatement(sql: sql), arguments: arguments)
    }

    func cachedRows(sql: String, arguments: StatementArguments = StatementArguments()) throws -> [Row] {
        try Row.fetchAll(cachedStatement(sql: sql), arguments: arguments)
    }

    func cachedInt(sql: String, arguments: StatementArguments = StatementArguments()) throws -> Int? {
        try Int.fetchOne(cachedStatement(sql: sql), arguments: arguments)
    }

    func cachedStrings(sql: String, arguments: StatementArguments = StatementArguments()) throws -> [String] {
        try String.fetchAll(cachedStatement(sql: sql), arguments: arguments)
    }
}
