import Foundation

/// A device authorization (RFC 8628): what `/oauth2/device_authorization` issued to a command line, and what the
/// person decided at `/auth/device`. Only the device code's SHA-256 is stored; the user code is stored as typed
/// (normalized), being short-lived, single-use, and guessed at no faster than `DeviceGuesses` allows.
public struct DeviceGrantRecord: Sendable, Hashable {
    public enum Status: String, Sendable {
        /// Waiting for the person.
        case pending
        /// The person approved: tokens on the next poll, once.
        case approved
        /// The person refused.
        case denied
        /// Tokens were issued for it.
        case redeemed
        /// Its session ended before the tokens were taken, or the person's link or account went.
        case revoked
    }

    /// SHA-256 (hex) of the device code.
    public var deviceCodeHash: String
    /// Eight characters of `DeviceCodes.alphabet`, without the dash.
    public var userCode: String
    public var clientID: String
    /// The scopes asked for, granted as the client may have them; space-separated.
    public var scope: String
    public var createdAt: Date
    public var expiresAt: Date
    /// Seconds a client must wait between polls (grows by 5 at each `slow_down`).
    public var interval: Int
    public var status: Status = .pending
    /// Set by the person's decision.
    public var subject: String? = nil
    /// The public id of the session the person approved from (the grant ends with it).
    public var sessionID: String? = nil
    public var authTime: Date? = nil

    public init(deviceCodeHash: String, userCode: String, clientID: String, scope: String, createdAt: Date, expiresAt: Date, interval: Int) {
        self.deviceCodeHash = deviceCodeHash
        self.userCode = userCode
        self.clientID = clientID
        self.scope = scope
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.interval = interval
    }
}

/// What a poll of the token endpoint with a device code found (RFC 8628 §3.5).
public enum DevicePoll: Sendable, Equatable {
    /// `authorization_pending`.
    case pending
    /// `slow_down`: polled sooner than `interval` after the last poll; the interval is now this.
    case slowDown(interval: Int)
    /// Approved: the grant, now redeemed (no other poll gets it).
    case approved(DeviceGrantRecord)
    /// `access_denied`.
    case denied
    /// `expired_token`.
    case expired
    /// Not a device code of this client's, used already, or revoked: `invalid_grant`.
    case unknown
}

/// The statements of device grants, the same for SQLite and PostgreSQL (`ProviderStatement`).
enum DeviceSQL {
    /// Migration v8 (issue 35): device grants, and the clients that may start them.
    static let v8 = [
        """
        CREATE TABLE device_grants (device_code_hash TEXT PRIMARY KEY NOT NULL, user_code TEXT NOT NULL UNIQUE, client_id TEXT NOT NULL,
            scope TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION NOT NULL, interval_seconds INTEGER NOT NULL,
            last_polled_at DOUBLE PRECISION, status TEXT NOT NULL, sub TEXT, sid TEXT, auth_time DOUBLE PRECISION)
        """,
        "CREATE INDEX device_grants_expiry ON device_grants(expires_at)",
        "CREATE INDEX device_grants_sid ON device_grants(sid)",
        "ALTER TABLE provider_clients ADD COLUMN device_flow BOOLEAN NOT NULL DEFAULT FALSE",
    ]

    private static let columns = "device_code_hash, user_code, client_id, scope, created_at, expires_at, interval_seconds, status, sub, sid, auth_time, last_polled_at"

    /// An expired grant that holds `userCode` gives it up first (the code is unique among the stored).
    static func freeUserCode(_ userCode: String, now: Date) -> ProviderStatement {
        ProviderStatement("DELETE FROM device_grants WHERE user_code = $1 AND expires_at <= $2", .text(userCode), .real(now.timeIntervalSince1970))
    }

    /// Returns a row when saved, none when its user code is taken by a live grant (the caller draws another).
    static func save(_ grant: DeviceGrantRecord) -> ProviderStatement {
        ProviderStatement(
            """
            INSERT INTO device_grants (device_code_hash, user_code, client_id, scope, created_at, expires_at, interval_seconds, status)
            VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending') ON CONFLICT DO NOTHING RETURNING 1
            """,
            .text(grant.deviceCodeHash), .text(grant.userCode), .text(grant.clientID), .text(grant.scope), .real(grant.createdAt.timeIntervalSince1970),
            .real(grant.expiresAt.timeIntervalSince1970), .integer(grant.interval)
        )
    }

    /// The live pending grant of `userCode`.
    static func pending(userCode: String, now: Date) -> ProviderStatement {
        ProviderStatement(
            "SELECT \(columns) FROM device_grants WHERE user_code = $1 AND status = 'pending' AND expires_at > $2", .text(userCode), .real(now.timeIntervalSince1970)
        )
    }

    /// The person's decision on the live pending grant of `userCode`; a row when it was still pending.
    static func decide(userCode: String, approve: Bool, subject: String, sessionID: String, authTime: Date, now: Date) -> ProviderStatement {
        ProviderStatement(
            """
            UPDATE device_grants SET status = $2, sub = $3, sid = $4, auth_time = $5
            WHERE user_code = $1 AND status = 'pending' AND expires_at > $6 RETURNING 1
            """,
            .text(userCode), .text(approve ? DeviceGrantRecord.Status.approved.rawValue : DeviceGrantRecord.Status.denied.rawValue), .text(subject), .text(sessionID),
            .real(authTime.timeIntervalSince1970), .real(now.timeIntervalSince1970)
        )
    }

    static func grant(hash: String) -> ProviderStatement {
        ProviderStatement("SELECT \(columns) FROM device_grants WHERE device_code_hash = $1", .text(hash))
    }

    /// Takes an approved grant once: a row for the one poll that gets the tokens.
    static func claim(hash: String, now: Date) -> ProviderStatement {
        ProviderStatement(
            "UPDATE device_grants SET status = 'redeemed', last_polled_at = $2 WHERE device_code_hash = $1 AND status = 'approved' AND expires_at > $2 RETURNING \(columns)",
            .text(hash), .real(now.timeIntervalSince1970)
        )
    }

    /// A poll sooner than the interval: the interval grows by 5 s (RFC 8628 §3.5); a row when it was too soon.
    static func slowDown(hash: String, now: Date) -> ProviderStatement {
        ProviderStatement(
            """
            UPDATE device_grants SET interval_seconds = interval_seconds + 5, last_polled_at = $2
            WHERE device_code_hash = $1 AND status = 'pending' AND last_polled_at IS NOT NULL AND $2 - last_polled_at < interval_seconds
            RETURNING interval_seconds
            """,
            .text(hash), .real(now.timeIntervalSince1970)
        )
    }

    /// A poll in time: noted.
    static func polled(hash: String, now: Date) -> ProviderStatement {
        ProviderStatement("UPDATE device_grants SET last_polled_at = $2 WHERE device_code_hash = $1 AND status = 'pending'", .text(hash), .real(now.timeIntervalSince1970))
    }

    /// The approved grants of the session `sid` end with it (not yet taken: their tokens are never issued).
    static func revoke(session sid: String) -> ProviderStatement {
        ProviderStatement("UPDATE device_grants SET status = 'revoked' WHERE sid = $1 AND status IN ('approved', 'pending')", .text(sid))
    }

    /// Every grant the person decided ends with their link or account.
    static func revoke(subject: String) -> ProviderStatement {
        ProviderStatement("UPDATE device_grants SET status = 'revoked' WHERE sub = $1 AND status = 'approved'", .text(subject))
    }
}

/// What a poll does, decided on the grant's row as read (`DeviceSQL.grant`): answer at once, or run one statement.
enum DevicePollStep: Equatable {
    case answer(DevicePoll)
    /// Approved: claim it (`DeviceSQL.claim`).
    case claim
    /// Pending: slow it down if too soon (`DeviceSQL.slowDown`), else note the poll (`DeviceSQL.polled`).
    case poll

    static func decide(_ grant: DeviceGrantRecord?, clientID: String, now: Date) -> DevicePollStep {
        guard let grant, grant.clientID == clientID else { return .answer(.unknown) }
        switch grant.status {
        case .denied: return .answer(.denied)
        case .redeemed, .revoked: return .answer(.unknown)
        case .pending, .approved:
            guard grant.expiresAt > now else { return .answer(.expired) }
            return grant.status == .approved ? .claim : .poll
        }
    }
}

extension DeviceGrantRecord {
    /// The grant in a row of `DeviceSQL`'s columns.
    init(_ row: some ProviderRow) throws {
        self.init(
            deviceCodeHash: try row.text(0), userCode: try row.text(1), clientID: try row.text(2), scope: try row.text(3),
            createdAt: Date(timeIntervalSince1970: try row.real(4)), expiresAt: Date(timeIntervalSince1970: try row.real(5)), interval: Int(try row.integer(6))
        )
        guard let status = Status(rawValue: try row.text(7)) else { throw ProviderRowError(description: "device grant status \(try row.text(7))") }
        self.status = status
        subject = try row.optionalText(8)
        sessionID = try row.optionalText(9)
        authTime = try row.optionalReal(10).map { Date(timeIntervalSince1970: $0) }
    }
}
