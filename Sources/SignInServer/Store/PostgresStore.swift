import AppleSignIn
import Foundation
import Synchronization
import Logging
import PostgresNIO
import ServiceLifecycle

/// The shared store for several instances: PostgreSQL through postgres-nio. The `PostgresClient` is a
/// service and must run (it is added to the application's services by `buildApplication`).
public final class PostgresStore: SignInStore {
    /// Which apps want which account events (`event_webhooks`): the outbox rows a change writes.
    public let events = EventRouting()
    /// The connection pool; run it as a service.
    public let client: PostgresClient

    /// The connection pool runs as a service of the application.
    public var services: [any Service] { [client] }
    /// The pool's connections.
    public let queriesAtOnce: Int
    let cipher: TokenCipher
    let logger: Logger
    /// How long one operation may take, waiting for a connection included. The pool queues requests while
    /// the database is down; without a bound a request during an outage would hang until it is back.
    public let operationTimeout: Duration

    /// Creates a store for `postgres://user[:password]@host[:port]/database`.
    public init(url: String, cipher: TokenCipher, logger: Logger, operationTimeout: Duration = .seconds(5)) throws {
        guard let components = URLComponents(string: url), ["postgres", "postgresql"].contains(components.scheme ?? ""),
            let host = components.host, let user = components.user
        else {
            throw ConfigurationError(field: "db", "must be a SQLite path or postgres://user[:password]@host[:port]/database, got \(url.hasPrefix("postgres") ? "an invalid postgres URL" : url)")
        }
        let database = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        var configuration = PostgresClient.Configuration(
            host: host, port: components.port ?? 5432, username: user, password: components.password,
            database: database.isEmpty ? user : database, tls: .disable
        )
        configuration.options.connectTimeout = .seconds(3)
        client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        queriesAtOnce = configuration.options.maximumConnections
        self.cipher = cipher
        self.logger = logger
        self.operationTimeout = operationTimeout
    }

    public func migrate() async throws {
        try await client.withConnection { connection in
            // Several instances may start at once: one migrates while the others wait on the advisory lock.
            try await connection.query("SELECT pg_advisory_lock(727472)", logger: self.logger)
            do {
                try await connection.query("CREATE TABLE IF NOT EXISTS schema_migrations (version TEXT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)", logger: self.logger)
                for (version, statements) in PostgresSchema.migrations {
                    guard try await connection.query("SELECT 1 FROM schema_migrations WHERE version = \(version)", logger: self.logger).collect().isEmpty else { continue }
                    for statement in statements {
                        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: self.logger)
                    }
                    try await connection.query("INSERT INTO schema_migrations (version, applied_at) VALUES (\(version), \(Date().timeIntervalSince1970))", logger: self.logger)
                }
            } catch {
                _ = try? await connection.query("SELECT pg_advisory_unlock(727472)", logger: self.logger)
                throw error
            }
            try await connection.query("SELECT pg_advisory_unlock(727472)", logger: self.logger)
        }
    }

    public func savePending(_ pending: PendingAuthorization) async throws {
        try await bounded { [self] () async throws -> Void in
            try await client.query(
                "INSERT INTO pending_authorizations (state, nonce, return_to, binding_hash, created_at, expires_at, invitation_hash) VALUES (\(pending.state), \(pending.nonce), \(pending.returnTo), \(pending.bindingHash), \(pending.createdAt.timeIntervalSince1970), \(pending.expiresAt.timeIntervalSince1970), \(pending.invitationHash))",
                logger: logger
            )
        }
    }

    public func consumePending(state: String, now: Date) async throws -> PendingAuthorization? {
        try await bounded { [self] in
            let rows = try await client.query(
                "DELETE FROM pending_authorizations WHERE state = \(state) RETURNING nonce, return_to, binding_hash, created_at, expires_at, invitation_hash",
                logger: logger
            )
            for try await (nonce, returnTo, binding, created, expires, invitation) in rows.decode((String, String, String, Double, Double, String?).self) {
                guard expires > now.timeIntervalSince1970 else { return nil }
                return PendingAuthorization(
                    state: state, nonce: nonce, returnTo: returnTo, bindingHash: binding, createdAt: Date(timeIntervalSince1970: created),
                    expiresAt: Date(timeIntervalSince1970: expires), invitationHash: invitation
                )
            }
            return nil
        }
    }

    public func completeSignIn(_ completed: CompletedSignIn) async throws -> UserRecord {
        try await bounded { [self] in
            let sealed = try completed.refreshToken.map { try cipher.seal($0) }
            let logger = self.logger
            // The person's first sign-in is an account event only for an app that wants it: asked of the table only then.
            let joined = EventSQL.joined(completed, routing: events)
            return try await client.withTransaction(logger: logger) { connection in
                let at = completed.at.timeIntervalSince1970
                let known = completed.transferSubject == nil && joined.isEmpty
                    ? true : try await !connection.query("SELECT 1 FROM users WHERE sub = \(completed.subject)", logger: logger).collect().isEmpty
                if let transfer = completed.transferSubject {
                    if !known {
                        try await connection.query("UPDATE users SET sub = \(completed.subject) WHERE transfer_sub = \(transfer)", logger: logger)
                    }
                }
                try await connection.query("""
                    INSERT INTO users (sub, email, is_private_email, first_name, last_name, created_at, last_sign_in_at)
                    VALUES (\(completed.subject), \(completed.email), \(completed.isPrivateEmail), \(completed.firstName), \(completed.lastName), \(at), \(at))
                    ON CONFLICT (sub) DO UPDATE SET
                        email = COALESCE(EXCLUDED.email, users.email),
                        is_private_email = CASE WHEN EXCLUDED.email IS NULL THEN users.is_private_email ELSE EXCLUDED.is_private_email END,
                        first_name = CASE WHEN users.link_revoked_at IS NULL THEN COALESCE(users.first_name, EXCLUDED.first_name) ELSE COALESCE(EXCLUDED.first_name, users.first_name) END,
                        last_name = CASE WHEN users.link_revoked_at IS NULL THEN COALESCE(users.last_name, EXCLUDED.last_name) ELSE COALESCE(EXCLUDED.last_name, users.last_name) END,
                        last_sign_in_at = EXCLUDED.last_sign_in_at,
                        link_revoked_at = NULL
                    """, logger: logger)
                if let sealed {
                    try await connection.query("""
                        INSERT INTO refresh_tokens (sub, client_id, token, updated_at, next_check_at) VALUES (\(completed.subject), \(completed.clientID), \(sealed), \(at), \(at + 86_400))
                        ON CONFLICT (sub) DO UPDATE SET client_id = EXCLUDED.client_id, token = EXCLUDED.token, updated_at = EXCLUDED.updated_at, next_check_at = EXCLUDED.next_check_at
                        """, logger: logger)
                }
                let session = completed.session
                try await connection.query(
                    "INSERT INTO sessions (id_hash, sub, csrf_token, created_at, expires_at, auth_time) VALUES (\(session.idHash), \(session.subject), \(session.csrfToken), \(session.createdAt.timeIntervalSince1970), \(session.expiresAt.timeIntervalSince1970), \(session.authTime?.timeIntervalSince1970))",
                    logger: logger
                )
                if let describe = SessionSQL.describe(session) { _ = try await connection.rows(describe, logger: logger) }
                if !known { _ = try await connection.run(joined, logger: logger) }
                let rows = try await connection.query("SELECT \(unescaped: UserRecord.columns) FROM users WHERE sub = \(completed.subject)", logger: logger)
                for try await row in rows { return try UserRow(row: row, offset: 0).user }
                throw PostgresStoreError(description: "user vanished inside its own transaction")
            }
        }
    }

    public func session(idHash: String, now: Date) async throws -> (SessionRecord, UserRecord)? {
        try await bounded { [self] () async throws -> (SessionRecord, UserRecord)? in
            let rows = try await client.query(
                "SELECT s.csrf_token, s.created_at, s.expires_at, s.via, s.auth_time, \(unescaped: UserRecord.joinedColumns) FROM sessions s JOIN users u ON u.sub = s.sub WHERE s.id_hash = \(idHash) AND s.expires_at > \(now.timeIntervalSince1970)",
                logger: logger
            )
            for try await row in rows {
                let (csrf, created, expires, via, authTime) = try row.decode((String, Double, Double, String?, Double?).self)
                let user = try UserRow(row: row, offset: 5).user
                var session = SessionRecord(
                    idHash: idHash, subject: user.subject, csrfToken: csrf, createdAt: Date(timeIntervalSince1970: created),
                    expiresAt: Date(timeIntervalSince1970: expires), via: via
                )
                session.authTime = authTime.map { Date(timeIntervalSince1970: $0) }
                return (session, user)
            }
            return nil
        }
    }

    public func renewAuthentication(idHash: String, subject: String, at: Date) async throws -> Bool {
        try await !single(SessionSQL.renew(idHash: idHash, subject: subject, at: at)).isEmpty
    }

    public func deleteSession(idHash: String) async throws -> Bool {
        try await bounded { [self] in
            let logger = self.logger
            return try await client.withTransaction(logger: logger) { connection in
                let rows = try await connection.query("DELETE FROM sessions WHERE id_hash = \(idHash) RETURNING 1", logger: logger).collect()
                if !rows.isEmpty {
                    let sid = SessionRecord.publicID(idHash: idHash)
                    _ = try await connection.rows(LogoutSQL.enqueue(session: sid, at: Date()), logger: logger)
                    _ = try await connection.run(ProviderSQL.revoke(session: sid), logger: logger)
                }
                return !rows.isEmpty
            }
        }
    }

    // MARK: signing keys

    public func signingKeys() async throws -> [SigningKeyRecord] {
        try await bounded { [self] in
            var keys: [SigningKeyRecord] = []
            let rows = try await client.query("SELECT kid, private_key, created_at, activates_at, retires_at, algorithm FROM signing_keys ORDER BY created_at, kid", logger: logger)
            for try await (kid, sealed, created, activates, retires, algorithm) in rows.decode((String, String, Double, Double, Double?, String).self) {
                keys.append(SigningKeyRecord(
                    kid: kid, privateKeyPEM: try cipher.open(sealed), createdAt: Date(timeIntervalSince1970: created),
                    activatesAt: Date(timeIntervalSince1970: activates), retiresAt: retires.map { Date(timeIntervalSince1970: $0) }, algorithm: algorithm
                ))
            }
            return keys
        }
    }

    public func addSigningKey(_ key: SigningKeyRecord) async throws {
        let sealed = try cipher.seal(key.privateKeyPEM)
        try await bounded { [self] () async throws -> Void in
            try await client.query(
                "INSERT INTO signing_keys (kid, private_key, created_at, activates_at, retires_at, algorithm) VALUES (\(key.kid), \(sealed), \(key.createdAt.timeIntervalSince1970), \(key.activatesAt.timeIntervalSince1970), \(key.retiresAt?.timeIntervalSince1970), \(key.algorithm))",
                logger: logger
            )
        }
    }

    public func retireSigningKeys(activeAt: Date, retiresAt: Date, except kid: String) async throws {
        try await bounded { [self] () async throws -> Void in
            try await client.query(
                "UPDATE signing_keys SET retires_at = \(retiresAt.timeIntervalSince1970) WHERE activates_at <= \(activeAt.timeIntervalSince1970) AND retires_at IS NULL AND kid <> \(kid) AND algorithm = (SELECT algorithm FROM signing_keys WHERE kid = \(kid))",
                logger: logger
            )
        }
    }

    public func ping() async throws {
        try await bounded { [self] () async throws -> Void in
            try await client.query("SELECT 1", logger: logger)
        }
    }

    public func user(subject: String) async throws -> UserRecord? {
        try await bounded { [self] () async throws -> UserRecord? in
            let rows = try await client.query("SELECT \(unescaped: UserRecord.columns) FROM users WHERE sub = \(subject)", logger: logger)
            for try await row in rows { return try UserRow(row: row, offset: 0).user }
            return nil
        }
    }

    public func countActiveSessions(now: Date) async throws -> Int {
        try await bounded { [self] in
            for try await count in try await client.query("SELECT COUNT(*)::BIGINT FROM sessions WHERE expires_at > \(now.timeIntervalSince1970)", logger: logger).decode(Int64.self) {
                return Int(count)
            }
            return 0
        }
    }

    public func sweepExpired(now: Date, limit: Int) async throws -> Int {
        try await bounded { [self] in
            let at = now.timeIntervalSince1970
            let pending = try await client.query("DELETE FROM pending_authorizations WHERE state IN (SELECT state FROM pending_authorizations WHERE expires_at <= \(at) LIMIT \(limit)) RETURNING 1", logger: logger).collect()
            let sessions = try await client.query("DELETE FROM sessions WHERE id_hash IN (SELECT id_hash FROM sessions WHERE expires_at <= \(at) LIMIT \(limit)) RETURNING 1", logger: logger).collect()
            let provider = try await client.withConnection { [logger] connection in try await connection.run(ProviderSQL.sweep(now: now, limit: limit), logger: logger) }
            return pending.count + sessions.count + provider.reduce(0, +)
        }
    }

    public func apply(_ notification: AppleNotification, receivedAt: Date) async throws -> NotificationOutcome {
        try await bounded { [self] in
            let logger = self.logger
            return try await client.withTransaction(logger: logger) { connection in
                let at = receivedAt.timeIntervalSince1970
                let event = notification.event
                let inserted = try await connection.query(
                    "INSERT INTO notifications (jti, type, sub, event_time, received_at) VALUES (\(notification.id), \(event.type.rawValue), \(event.subject), \(event.eventTime.timeIntervalSince1970), \(at)) ON CONFLICT (jti) DO NOTHING RETURNING 1",
                    logger: logger
                ).collect()
                guard !inserted.isEmpty else { return NotificationOutcome.duplicate }
                switch event.type {
                case .emailDisabled:
                    try await connection.query("UPDATE users SET email_forwarding_disabled = TRUE WHERE sub = \(event.subject)", logger: logger)
                case .emailEnabled:
                    try await connection.query("UPDATE users SET email_forwarding_disabled = FALSE WHERE sub = \(event.subject)", logger: logger)
                case .consentRevoked:
                    try await Self.revokeLink(connection, subject: event.subject, at: at, logger: logger)
                case .accountDelete:
                    _ = try await Self.deleteUser(connection, subject: event.subject, tombstone: true, at: at, logger: logger)
                case .unknown:
                    return NotificationOutcome.recorded
                }
                _ = try await connection.run(EventSQL.told(notification, receivedAt: receivedAt, routing: self.events), logger: logger)
                return NotificationOutcome.applied
            }
        }
    }

    public func deleteUser(subject: String, tombstone: Bool, at: Date) async throws -> RefreshCheck? {
        try await bounded { [self] in
            let logger = self.logger
            let events = self.events
            let row = try await client.withTransaction(logger: logger) { connection in
                let row = try await Self.deleteUser(connection, subject: subject, tombstone: tombstone, at: at.timeIntervalSince1970, logger: logger)
                _ = try await connection.run(EventSQL.enqueue(.deleted, subject: subject, data: ["reason": "deleted-at-siwa"], at: at, routing: events), logger: logger)
                return row
            }
            // The user is gone either way; a token no configured key opens cannot be revoked.
            guard let row, let token = cipher.openIfReadable(row.1) else { return nil }
            return RefreshCheck(subject: subject, clientID: row.0, token: token)
        }
    }

    public func revokeLink(subject: String, at: Date) async throws {
        try await bounded { [self] () async throws -> Void in
            let logger = self.logger
            try await client.withTransaction(logger: logger) { connection in
                try await Self.revokeLink(connection, subject: subject, at: at.timeIntervalSince1970, logger: logger)
            }
        }
    }

    public func claimRefreshChecks(now: Date, limit: Int, nextCheck: @Sendable () -> Date) async throws -> [RefreshCheck] {
        let current = now.timeIntervalSince1970
        let next = max(nextCheck().timeIntervalSince1970, current + 86_400)
        return try await bounded { [self] in
            let rows = try await client.query("""
                UPDATE refresh_tokens SET next_check_at = \(next) + random() * 60, last_check_at = \(current)
                WHERE sub IN (SELECT sub FROM refresh_tokens WHERE next_check_at <= \(current) ORDER BY next_check_at LIMIT \(limit) FOR UPDATE SKIP LOCKED)
                RETURNING sub, client_id, token
                """, logger: logger)
            var result: [RefreshCheck] = []
            for try await (sub, clientID, token) in rows.decode((String, String, String).self) {
                // Unreadable tokens (sealed with a removed key) are skipped, not allowed to fail everyone's check.
                if let token = cipher.openIfReadable(token) { result.append(RefreshCheck(subject: sub, clientID: clientID, token: token)) }
            }
            return result
        }
    }

    public func enqueueRevocation(clientID: String, token: String, at: Date) async throws {
        try await bounded { [self] () async throws -> Void in
            let sealed = try cipher.seal(token)
            try await client.query(
                "INSERT INTO revocations (client_id, token, attempts, next_attempt_at, created_at) VALUES (\(clientID), \(sealed), 0, \(at.timeIntervalSince1970), \(at.timeIntervalSince1970))",
                logger: logger
            )
        }
    }

    public func claimRevocations(now: Date, limit: Int, retryAt: Date) async throws -> [PendingRevocation] {
        try await bounded { [self] in
            let rows = try await client.query("""
                UPDATE revocations SET attempts = attempts + 1, next_attempt_at = \(retryAt.timeIntervalSince1970)
                WHERE id IN (SELECT id FROM revocations WHERE next_attempt_at <= \(now.timeIntervalSince1970) ORDER BY id LIMIT \(limit) FOR UPDATE SKIP LOCKED)
                RETURNING id, client_id, token, attempts
                """, logger: logger)
            var result: [PendingRevocation] = []
            var unreadable: [Int64] = []
            for try await (id, clientID, token, attempts) in rows.decode((Int64, String, String, Int).self) {
                if let token = cipher.openIfReadable(token) {
                    result.append(PendingRevocation(id: id, clientID: clientID, token: token, attempts: attempts))
                } else {
                    unreadable.append(id)
                }
            }
            // Never sendable: dropped rather than retried forever.
            for id in unreadable {
                try await client.query("DELETE FROM revocations WHERE id = \(id)", logger: logger)
            }
            return result
        }
    }

    public func finishRevocation(id: Int64) async throws {
        try await bounded { [self] () async throws -> Void in
            try await client.query("DELETE FROM revocations WHERE id = \(id)", logger: logger)
        }
    }

    public func subjectsWithoutTransferSubject(limit: Int) async throws -> [String] {
        try await bounded { [self] in
            let rows = try await client.query("SELECT sub FROM users WHERE transfer_sub IS NULL ORDER BY sub LIMIT \(limit)", logger: logger)
            var result: [String] = []
            for try await sub in rows.decode(String.self) { result.append(sub) }
            return result
        }
    }

    public func setTransferSubject(_ transferSubject: String, for subject: String) async throws {
        try await bounded { [self] () async throws -> Void in
            try await client.query("UPDATE users SET transfer_sub = \(transferSubject) WHERE sub = \(subject)", logger: logger)
        }
    }

    /// Runs `operation`, failing with a `PostgresStoreError` (so the request gets a 503) when it takes longer
    /// than `operationTimeout`; the operation is cancelled, which also withdraws a pending connection request.
    func bounded<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) async throws -> T {
        let timeout = operationTimeout
        return try await withDeadline(timeout, onTimeout: PostgresStoreError(description: "PostgreSQL did not answer within \(timeout)"), operation)
    }

    // MARK: shared statements


    private struct UserRow {
        var user: UserRecord

        init(row: PostgresRow, offset: Int) throws {
            let cells = Array(row)
            func cell<T: PostgresDecodable>(_ index: Int, _ type: T.Type) throws -> T { try cells[offset + index].decode(T.self) }
            user = UserRecord(
                subject: try cell(0, String.self), email: try cell(1, String?.self), isPrivateEmail: try cell(2, Bool.self),
                firstName: try cell(3, String?.self), lastName: try cell(4, String?.self),
                createdAt: Date(timeIntervalSince1970: try cell(5, Double.self)), lastSignInAt: Date(timeIntervalSince1970: try cell(6, Double.self)),
                emailForwardingDisabled: try cell(7, Bool.self), linkRevokedAt: try cell(8, Double?.self).map { Date(timeIntervalSince1970: $0) }
            )
        }
    }

    private static func revokeLink(_ connection: PostgresConnection, subject: String, at: Double, logger: Logger) async throws {
        _ = try await connection.rows(LogoutSQL.enqueue(subject: subject, at: Date(timeIntervalSince1970: at)), logger: logger)
        try await connection.query("DELETE FROM sessions WHERE sub = \(subject)", logger: logger)
        try await connection.query("DELETE FROM refresh_tokens WHERE sub = \(subject)", logger: logger)
        try await connection.query("UPDATE users SET link_revoked_at = \(at) WHERE sub = \(subject)", logger: logger)
        try await revokeProvider(connection, subject: subject, logger: logger)
    }

    private static func deleteUser(_ connection: PostgresConnection, subject: String, tombstone: Bool, at: Double, logger: Logger) async throws -> (String, String)? {
        var token: (String, String)?
        for try await row in try await connection.query("SELECT client_id, token FROM refresh_tokens WHERE sub = \(subject)", logger: logger).decode((String, String).self) {
            token = row
        }
        // The person's sessions end with the account: their apps are told (before the tokens that name them go).
        _ = try await connection.rows(LogoutSQL.enqueue(subject: subject, at: Date(timeIntervalSince1970: at)), logger: logger)
        try await connection.query("DELETE FROM users WHERE sub = \(subject)", logger: logger)
        try await deleteProvider(connection, subject: subject, logger: logger)
        if tombstone {
            try await connection.query("INSERT INTO tombstones (sub, deleted_at) VALUES (\(subject), \(at)) ON CONFLICT (sub) DO UPDATE SET deleted_at = EXCLUDED.deleted_at", logger: logger)
        }
        return token
    }
}

/// A failure inside the PostgreSQL store that is not the database's own error.
struct PostgresStoreError: Error, CustomStringConvertible {
    var description: String
}

/// The PostgreSQL schema, statement by statement.
enum PostgresSchema {
    /// Every migration, in the order they apply.
    static let migrations = [("v1", v1), ("v2", v2), ("v3", v3), ("v4", v4), ("v5", v5), ("v6", v6), ("v7", v7), ("v8", v8), ("v9", v9), ("v10", v10), ("v11", v11), ("v12", v12), ("v13", v13)]
    static let v7 = ProviderSQL.v7
    static let v8 = DeviceSQL.v8
    static let v9 = ProviderSQL.v9
    static let v10 = EdgeSQL.v10
    /// Issue 47: invitations.
    static let v11 = InvitationSQL.v11
    /// Issue 47: Apple's authentication time of a session.
    static let v13 = SessionSQL.v13
    /// Issue 47: the outbox of account events.
    static let v12 = EventSQL.v12(serialKey: "BIGSERIAL PRIMARY KEY")
    /// Issue 27: the groups siwa keeps.
    static let v4 = GroupSQL.schema
    /// Issue 28: the sessions' details and last use.
    static let v6 = SessionSQL.schema
    /// Issue 28: back-channel logout.
    static let v5 = LogoutSQL.schema(serialKey: "BIGSERIAL PRIMARY KEY")

    /// Issue 18: the OpenID Provider's clients, codes and tokens, and each signing key's algorithm.
    static let v3 = ProviderSQL.schema

    /// Issue 17: siwa's own signing keys.
    static let v2 = [
        "CREATE TABLE signing_keys (kid TEXT PRIMARY KEY, private_key TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, activates_at DOUBLE PRECISION NOT NULL, retires_at DOUBLE PRECISION)",
    ]

    static let v1 = [
        "CREATE TABLE pending_authorizations (state TEXT PRIMARY KEY, nonce TEXT NOT NULL, return_to TEXT NOT NULL, binding_hash TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION NOT NULL)",
        "CREATE INDEX pending_expires ON pending_authorizations(expires_at)",
        "CREATE TABLE users (sub TEXT PRIMARY KEY, email TEXT, is_private_email BOOLEAN NOT NULL DEFAULT FALSE, first_name TEXT, last_name TEXT, email_forwarding_disabled BOOLEAN NOT NULL DEFAULT FALSE, link_revoked_at DOUBLE PRECISION, transfer_sub TEXT UNIQUE, created_at DOUBLE PRECISION NOT NULL, last_sign_in_at DOUBLE PRECISION NOT NULL)",
        "CREATE TABLE refresh_tokens (sub TEXT PRIMARY KEY REFERENCES users(sub) ON DELETE CASCADE ON UPDATE CASCADE, client_id TEXT NOT NULL, token TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL, last_check_at DOUBLE PRECISION, next_check_at DOUBLE PRECISION NOT NULL)",
        "CREATE INDEX refresh_due ON refresh_tokens(next_check_at)",
        "CREATE TABLE sessions (id_hash TEXT PRIMARY KEY, sub TEXT NOT NULL REFERENCES users(sub) ON DELETE CASCADE ON UPDATE CASCADE, csrf_token TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION NOT NULL)",
        "CREATE INDEX sessions_sub ON sessions(sub)",
        "CREATE INDEX sessions_expires ON sessions(expires_at)",
        "CREATE TABLE notifications (jti TEXT PRIMARY KEY, type TEXT NOT NULL, sub TEXT NOT NULL, event_time DOUBLE PRECISION NOT NULL, received_at DOUBLE PRECISION NOT NULL)",
        "CREATE TABLE tombstones (sub TEXT PRIMARY KEY, deleted_at DOUBLE PRECISION NOT NULL)",
        "CREATE TABLE revocations (id BIGSERIAL PRIMARY KEY, client_id TEXT NOT NULL, token TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at DOUBLE PRECISION NOT NULL, created_at DOUBLE PRECISION NOT NULL)",
    ]
}
