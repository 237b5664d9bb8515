import Foundation

/// The OpenID Provider's tables and statements, written once for both stores. `$1`, `$2`… are PostgreSQL's
/// positional parameters and, in SQLite, named parameters that `ProviderStatement` binds by name; the column types
/// are ones both databases take (SQLite reads DOUBLE PRECISION as REAL and keeps a BOOLEAN as 0 or 1).
///
/// Codes and tokens are stored by their SHA-256 only. `used_at` marks a redeemed code or refresh token; `revoked`
/// (NULL while live) says why one was revoked (`ProviderRevocation`).
enum ProviderSQL {
    /// Migration v3 (issue 18): the provider's clients, codes and tokens, and the algorithm of each signing key.
    static let schema = [
        "ALTER TABLE signing_keys ADD COLUMN algorithm TEXT NOT NULL DEFAULT 'ES256'",
        """
        CREATE TABLE provider_clients (client_id TEXT PRIMARY KEY NOT NULL, secret_hash TEXT, redirect_uris TEXT NOT NULL,
            post_logout_redirect_uris TEXT NOT NULL, scopes TEXT NOT NULL, is_public BOOLEAN NOT NULL, id_token_algorithm TEXT NOT NULL,
            pairwise_subject BOOLEAN NOT NULL, created_at DOUBLE PRECISION NOT NULL)
        """,
        """
        CREATE TABLE authorization_codes (code_hash TEXT PRIMARY KEY NOT NULL, client_id TEXT NOT NULL, redirect_uri TEXT NOT NULL,
            sub TEXT NOT NULL, scope TEXT NOT NULL, nonce TEXT, code_challenge TEXT, auth_time DOUBLE PRECISION NOT NULL,
            created_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION NOT NULL, used_at DOUBLE PRECISION, revoked TEXT)
        """,
        "CREATE INDEX authorization_codes_sub ON authorization_codes(sub)",
        "CREATE INDEX authorization_codes_client ON authorization_codes(client_id)",
        "CREATE INDEX authorization_codes_expires ON authorization_codes(expires_at)",
        """
        CREATE TABLE provider_tokens (token_hash TEXT PRIMARY KEY NOT NULL, kind TEXT NOT NULL, client_id TEXT NOT NULL,
            sub TEXT NOT NULL, scope TEXT NOT NULL, auth_time DOUBLE PRECISION NOT NULL, family_id TEXT NOT NULL, code_hash TEXT,
            created_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION NOT NULL, used_at DOUBLE PRECISION, revoked TEXT)
        """,
        "CREATE INDEX provider_tokens_family ON provider_tokens(family_id)",
        "CREATE INDEX provider_tokens_code ON provider_tokens(code_hash)",
        "CREATE INDEX provider_tokens_sub ON provider_tokens(sub)",
        "CREATE INDEX provider_tokens_client ON provider_tokens(client_id)",
        "CREATE INDEX provider_tokens_expires ON provider_tokens(expires_at)",
    ]

    private static let clientColumns = "client_id, secret_hash, redirect_uris, post_logout_redirect_uris, scopes, is_public, id_token_algorithm, pairwise_subject, created_at, allowed_groups, backchannel_logout_uri, iss_in_errors, device_flow, service, previous_secret_hash, previous_secret_until"
    /// A code's columns, then `used_at, revoked` (positions 10 and 11), then `sid` (12).
    private static let codeColumns = "code_hash, client_id, redirect_uri, sub, scope, nonce, code_challenge, auth_time, created_at, expires_at, used_at, revoked, sid"
    /// A token's columns, then `used_at, revoked` (positions 10 and 11), then `sid` (12).
    private static let tokenColumns = "token_hash, kind, client_id, sub, scope, auth_time, family_id, code_hash, created_at, expires_at, used_at, revoked, sid"

    /// Migration v7 (issue 35): a client's `iss_in_errors`.
    static let v7 = ["ALTER TABLE provider_clients ADD COLUMN iss_in_errors BOOLEAN NOT NULL DEFAULT TRUE"]

    /// Migration v9 (issue 35): services, and a rotated secret's overlap.
    static let v9 = [
        "ALTER TABLE provider_clients ADD COLUMN service BOOLEAN NOT NULL DEFAULT FALSE",
        "ALTER TABLE provider_clients ADD COLUMN previous_secret_hash TEXT",
        "ALTER TABLE provider_clients ADD COLUMN previous_secret_until DOUBLE PRECISION",
    ]

    /// A new secret for `clientID`; the one it replaces stays valid until `until`. A row when the client exists.
    static func rotateSecret(clientID: String, secretHash: String, until: Date) -> ProviderStatement {
        ProviderStatement(
            "UPDATE provider_clients SET previous_secret_hash = secret_hash, previous_secret_until = $3, secret_hash = $2 WHERE client_id = $1 AND secret_hash IS NOT NULL RETURNING client_id",
            .text(clientID), .text(secretHash), .real(until.timeIntervalSince1970)
        )
    }

    // MARK: clients

    static let clients = ProviderStatement("SELECT \(clientColumns) FROM provider_clients ORDER BY client_id")

    /// Returns a row when the client was added, none when its id was taken.
    static func add(_ client: ProviderClientRecord) throws -> ProviderStatement {
        ProviderStatement(
            "INSERT INTO provider_clients (\(clientColumns)) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) ON CONFLICT (client_id) DO NOTHING RETURNING client_id",
            .text(client.clientID), .text(client.secretHash), .text(try list(client.redirectURIs)), .text(try list(client.postLogoutRedirectURIs)),
            .text(try list(client.scopes)), .flag(client.isPublic), .text(client.idTokenAlgorithm), .flag(client.pairwiseSubject), .real(client.createdAt.timeIntervalSince1970),
            .text(try list(client.allowedGroups)), .text(client.backchannelLogoutURI), .flag(client.issInErrors), .flag(client.deviceFlow), .flag(client.isService),
            .text(client.previousSecretHash), .optionalReal(client.previousSecretUntil?.timeIntervalSince1970)
        )
    }

    /// The client's row (returned when it existed), then its tokens and codes.
    static func remove(clientID: String) -> [ProviderStatement] {
        ["DELETE FROM provider_clients WHERE client_id = $1 RETURNING client_id", "DELETE FROM provider_tokens WHERE client_id = $1", "DELETE FROM authorization_codes WHERE client_id = $1"]
            .map { ProviderStatement($0, .text(clientID)) }
    }

    // MARK: codes

    static func save(_ code: AuthorizationCodeRecord) -> ProviderStatement {
        ProviderStatement(
            "INSERT INTO authorization_codes (code_hash, client_id, redirect_uri, sub, scope, nonce, code_challenge, auth_time, created_at, expires_at, sid) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            .text(code.codeHash), .text(code.clientID), .text(code.redirectURI), .text(code.subject), .text(code.scope), .text(code.nonce), .text(code.codeChallenge),
            .real(code.authTime.timeIntervalSince1970), .real(code.createdAt.timeIntervalSince1970), .real(code.expiresAt.timeIntervalSince1970), .text(code.sessionID)
        )
    }

    /// Marks a live unused code used, returning it: the one atomic step that makes a code single use.
    static func claimCode(hash: String, now: Date) -> ProviderStatement {
        ProviderStatement(
            "UPDATE authorization_codes SET used_at = $2 WHERE code_hash = $1 AND used_at IS NULL AND revoked IS NULL AND expires_at > $2 RETURNING \(codeColumns)",
            .text(hash), .real(now.timeIntervalSince1970)
        )
    }

    /// The code whatever its state.
    static func code(hash: String) -> ProviderStatement {
        ProviderStatement("SELECT \(codeColumns) FROM authorization_codes WHERE code_hash = $1", .text(hash))
    }

    /// A used code presented again: the code is marked, and every family it began (all their tokens) revoked.
    static func replay(hash: String) -> [ProviderStatement] {
        let reason = ProviderValue.text(ProviderRevocation.replay.rawValue)
        return [
            ProviderStatement("UPDATE authorization_codes SET revoked = COALESCE(revoked, $2) WHERE code_hash = $1", .text(hash), reason),
            ProviderStatement(
                "UPDATE provider_tokens SET revoked = $2 WHERE revoked IS NULL AND family_id IN (SELECT family_id FROM provider_tokens WHERE code_hash = $1)",
                .text(hash), reason
            ),
        ]
    }

    // MARK: tokens

    /// Inserts a token, revoked already (for the same reason) when its family has a revoked token or its code was
    /// revoked: a refresh or code exchange that raced a revocation does not outlive it.
    static func save(_ token: ProviderTokenRecord) -> ProviderStatement {
        ProviderStatement(
            """
            INSERT INTO provider_tokens (token_hash, kind, client_id, sub, scope, auth_time, family_id, code_hash, created_at, expires_at, sid, revoked)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, COALESCE(
                (SELECT revoked FROM provider_tokens WHERE family_id = $7 AND revoked IS NOT NULL LIMIT 1),
                (SELECT revoked FROM authorization_codes WHERE code_hash = $8 AND revoked IS NOT NULL)))
            """,
            .text(token.tokenHash), .text(token.kind.rawValue), .text(token.clientID), .text(token.subject), .text(token.scope), .real(token.authTime.timeIntervalSince1970),
            .text(token.familyID), .text(token.codeHash), .real(token.createdAt.timeIntervalSince1970), .real(token.expiresAt.timeIntervalSince1970),
            .text(token.sessionID)
        )
    }

    static func liveToken(hash: String, kind: ProviderTokenRecord.Kind, now: Date) -> ProviderStatement {
        ProviderStatement(
            "SELECT \(tokenColumns) FROM provider_tokens WHERE token_hash = $1 AND kind = $2 AND used_at IS NULL AND revoked IS NULL AND expires_at > $3",
            .text(hash), .text(kind.rawValue), .real(now.timeIntervalSince1970)
        )
    }

    /// Marks a live unused refresh token used, returning it: the one atomic step that makes rotation single use.
    static func claimRefresh(hash: String, now: Date) -> ProviderStatement {
        ProviderStatement(
            "UPDATE provider_tokens SET used_at = $2 WHERE token_hash = $1 AND kind = 'refresh' AND used_at IS NULL AND revoked IS NULL AND expires_at > $2 RETURNING \(tokenColumns)",
            .text(hash), .real(now.timeIntervalSince1970)
        )
    }

    /// An unexpired refresh token whatever its state.
    static func refresh(hash: String, now: Date) -> ProviderStatement {
        ProviderStatement("SELECT \(tokenColumns) FROM provider_tokens WHERE token_hash = $1 AND kind = 'refresh' AND expires_at > $2", .text(hash), .real(now.timeIntervalSince1970))
    }

    /// The family and person of a token `clientID` holds.
    static func token(hash: String, clientID: String) -> ProviderStatement {
        ProviderStatement("SELECT family_id, sub FROM provider_tokens WHERE token_hash = $1 AND client_id = $2", .text(hash), .text(clientID))
    }

    static func revoke(family: String, _ reason: ProviderRevocation) -> ProviderStatement {
        ProviderStatement("UPDATE provider_tokens SET revoked = $2 WHERE family_id = $1 AND revoked IS NULL", .text(family), .text(reason.rawValue))
    }

    // MARK: a person's

    /// Revokes every token and code of `subject`.
    static func revoke(subject: String) -> [ProviderStatement] {
        ["UPDATE provider_tokens SET revoked = $2 WHERE sub = $1 AND revoked IS NULL", "UPDATE authorization_codes SET revoked = $2 WHERE sub = $1 AND revoked IS NULL"]
            .map { ProviderStatement($0, .text(subject), .text(ProviderRevocation.subject.rawValue)) } + [DeviceSQL.revoke(subject: subject)]
    }

    /// Revokes every token and code issued in the session `sid` (the session ended: sign-out, by the person or an
    /// operator): its codes no longer redeem, its access tokens no longer open the door or userinfo, its refresh
    /// tokens no longer refresh.
    static func revoke(session sid: String) -> [ProviderStatement] {
        ["UPDATE provider_tokens SET revoked = $2 WHERE sid = $1 AND revoked IS NULL", "UPDATE authorization_codes SET revoked = $2 WHERE sid = $1 AND revoked IS NULL"]
            .map { ProviderStatement($0, .text(sid), .text(ProviderRevocation.session.rawValue)) } + [DeviceSQL.revoke(session: sid)]
    }

    /// Deletes every token and code of `subject` (the person's account is deleted).
    static func delete(subject: String) -> [ProviderStatement] {
        ["DELETE FROM provider_tokens WHERE sub = $1", "DELETE FROM authorization_codes WHERE sub = $1", "DELETE FROM device_grants WHERE sub = $1"]
            .map { ProviderStatement($0, .text(subject)) }
    }

    /// Deletes up to `limit` expired codes and up to `limit` expired tokens, a row returned for each.
    static func sweep(now: Date, limit: Int) -> [ProviderStatement] {
        [("authorization_codes", "code_hash"), ("provider_tokens", "token_hash"), ("device_grants", "device_code_hash")].map { table, key in
            ProviderStatement(
                "DELETE FROM \(table) WHERE \(key) IN (SELECT \(key) FROM \(table) WHERE expires_at <= $1 LIMIT $2) RETURNING 1",
                .real(now.timeIntervalSince1970), .integer(limit)
            )
        }
    }

    /// A list column: JSON text, the same in both databases.
    static func list(_ values: [String]) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .withoutEscapingSlashes
        return String(decoding: try encoder.encode(values), as: UTF8.self)
    }

    static func list(from text: String) throws -> [String] {
        try JSONDecoder().decode([String].self, from: Data(text.utf8))
    }
}

/// Why a code or token was revoked (its `revoked` column).
enum ProviderRevocation: String, Sendable {
    /// A used refresh token was presented again: its family.
    case reuse
    /// A used code was presented again: the families it began.
    case replay
    /// The client that holds it revoked it (RFC 7009): its family.
    case client
    /// The person's tokens (consent revoked, a failed refresh check).
    case subject
    /// The session they were issued in ended.
    case session
}

/// A value bound to a provider statement.
enum ProviderValue: Sendable {
    case text(String?)
    case real(Double)
    /// A real that may be NULL (typed as one for PostgreSQL).
    case optionalReal(Double?)
    case flag(Bool)
    case integer(Int)
}

/// One provider statement and its values, `$1` first.
struct ProviderStatement: Sendable {
    var sql: String
    var values: [ProviderValue]

    init(_ sql: String, _ values: ProviderValue...) {
        self.sql = sql
        self.values = values
    }
}

/// A result row of a provider statement, read by position, in either database.
protocol ProviderRow {
    func text(_ index: Int) throws -> String
    func optionalText(_ index: Int) throws -> String?
    func real(_ index: Int) throws -> Double
    func optionalReal(_ index: Int) throws -> Double?
    func flag(_ index: Int) throws -> Bool
    func integer(_ index: Int) throws -> Int64
}

/// A stored value the provider cannot read (a token kind it does not know).
struct ProviderRowError: Error, CustomStringConvertible {
    var description: String
}

extension ProviderClientRecord {
    /// The client in a row of `ProviderSQL.clients`.
    init(_ row: some ProviderRow) throws {
        self.init(
            clientID: try row.text(0), secretHash: try row.optionalText(1), redirectURIs: try ProviderSQL.list(from: row.text(2)),
            postLogoutRedirectURIs: try ProviderSQL.list(from: row.text(3)), scopes: try ProviderSQL.list(from: row.text(4)), isPublic: try row.flag(5),
            idTokenAlgorithm: try row.text(6), pairwiseSubject: try row.flag(7), createdAt: Date(timeIntervalSince1970: try row.real(8)),
            allowedGroups: try ProviderSQL.list(from: row.text(9)), backchannelLogoutURI: try row.optionalText(10)
        )
        issInErrors = try row.flag(11)
        deviceFlow = try row.flag(12)
        isService = try row.flag(13)
        previousSecretHash = try row.optionalText(14)
        previousSecretUntil = try row.optionalReal(15).map { Date(timeIntervalSince1970: $0) }
    }
}

extension AuthorizationCodeRecord {
    /// The code in a row of `ProviderSQL.claimCode` or `code`.
    init(_ row: some ProviderRow) throws {
        self.init(
            codeHash: try row.text(0), clientID: try row.text(1), redirectURI: try row.text(2), subject: try row.text(3), scope: try row.text(4),
            nonce: try row.optionalText(5), codeChallenge: try row.optionalText(6), authTime: Date(timeIntervalSince1970: try row.real(7)),
            createdAt: Date(timeIntervalSince1970: try row.real(8)), expiresAt: Date(timeIntervalSince1970: try row.real(9)),
            sessionID: try row.optionalText(12)
        )
    }
}

extension ProviderTokenRecord {
    /// The token in a row of `ProviderSQL.liveToken`, `claimRefresh` or `refresh`.
    init(_ row: some ProviderRow) throws {
        guard let kind = Kind(rawValue: try row.text(1)) else { throw ProviderRowError(description: "unknown provider token kind") }
        self.init(
            tokenHash: try row.text(0), kind: kind, clientID: try row.text(2), subject: try row.text(3), scope: try row.text(4),
            authTime: Date(timeIntervalSince1970: try row.real(5)), familyID: try row.text(6), codeHash: try row.optionalText(7),
            createdAt: Date(timeIntervalSince1970: try row.real(8)), expiresAt: Date(timeIntervalSince1970: try row.real(9)),
            sessionID: try row.optionalText(12)
        )
    }
}

extension CodeRedemption {
    /// What a code the atomic claim did not take means, from its row (`ProviderSQL.code`); a replay must then be
    /// carried out (`ProviderSQL.replay`).
    static func unclaimed(_ row: some ProviderRow, now: Date) throws -> CodeRedemption {
        let code = try AuthorizationCodeRecord(row)
        if try row.optionalReal(10) != nil { return .replayed(code) }
        if try row.optionalText(11) != nil { return .unknown }
        return code.expiresAt <= now ? .expired : .unknown
    }
}

extension RefreshRedemption {
    /// What an unexpired refresh token the atomic claim did not take means, from its row (`ProviderSQL.refresh`):
    /// used before, or revoked as a family that was stolen, is reuse (its family must then be revoked); revoked by
    /// its client or with its person's tokens, it is simply no longer a token.
    static func unclaimed(_ row: some ProviderRow) throws -> RefreshRedemption {
        let token = try ProviderTokenRecord(row)
        let revoked = try row.optionalText(11).flatMap(ProviderRevocation.init(rawValue:))
        return try row.optionalReal(10) != nil || revoked == .reuse || revoked == .replay ? .reused(token) : .unknown
    }
}
