import Foundation
import Logging
import PostgresNIO

/// An invitation (issue 47, part A): a link that makes whoever signs in with it a member of `groups`, by their Apple
/// `sub`, so that a person who hides their email is let in without an operator looking them up. Only the SHA-256 of
/// the link's token is kept; `id` is its public name (`siwa invite list`, `revoke`, the console).
public struct InvitationRecord: Sendable, Hashable {
    /// `inv_` and 12 characters: what the operator names it by; not the link.
    public var id: String
    /// SHA-256 (hex) of the link's token.
    public var tokenHash: String
    public var groups: [String]
    /// What the operator wrote for the invited person to read (who invites, to what).
    public var note: String?
    /// Uses it was made with, and uses left.
    public var uses: Int
    public var usesLeft: Int
    /// Who made it: an operator's email or sub, or `cli`.
    public var createdBy: String
    public var createdAt: Date
    public var expiresAt: Date
    public var revokedAt: Date?

    public init(id: String, tokenHash: String, groups: [String], note: String?, uses: Int, createdBy: String, createdAt: Date, expiresAt: Date) {
        self.id = id
        self.tokenHash = tokenHash
        self.groups = groups
        self.note = note
        self.uses = uses
        self.usesLeft = uses
        self.createdBy = createdBy
        self.createdAt = createdAt
        self.expiresAt = expiresAt
    }

    /// Why it can no longer be used at `now`, or nil while it can.
    public func closed(at now: Date) -> InvitationRefusal? {
        if revokedAt != nil { return .revoked }
        if usesLeft <= 0 { return .usedUp }
        if expiresAt <= now { return .expired }
        return nil
    }
}

/// Why an invitation was not used.
public enum InvitationRefusal: String, Sendable, Hashable {
    /// No invitation has this token (never made, mistyped, or its link cut short).
    case unknown
    /// Every use was taken.
    case usedUp = "used"
    case expired
    case revoked
}

/// What using an invitation did.
public enum InvitationRedemption: Sendable, Hashable {
    /// The person joined its groups; the invitation as it is now (one use fewer).
    case joined(InvitationRecord)
    /// The person had used it already: nothing changed, no use taken.
    case alreadyJoined(InvitationRecord)
    /// Nothing changed; the invitation when there is one.
    case refused(InvitationRefusal, InvitationRecord?)
}

/// The invitations siwa keeps, shared by every instance of a PostgreSQL store.
public protocol InvitationStore: Sendable {
    func saveInvitation(_ invitation: InvitationRecord) async throws
    /// Every invitation, newest first.
    func invitations() async throws -> [InvitationRecord]
    func invitation(tokenHash: String) async throws -> InvitationRecord?
    func invitation(id: String) async throws -> InvitationRecord?
    /// Whether `subject` used the invitation `id`.
    func invitationUsed(id: String, by subject: String) async throws -> Bool
    /// Closes the invitation `id`; false when there is none or it was revoked already.
    func revokeInvitation(id: String, at: Date) async throws -> Bool
    /// Uses the invitation whose token hashes to `tokenHash` for `subject`, once: in one transaction, one use fewer,
    /// the use noted and the person made a member of its groups (with PostgreSQL, every instance told at once). Two
    /// people taking the last use at once, on any instances, make one member and one `.refused(.usedUp, …)`.
    func redeemInvitation(tokenHash: String, subject: String, at: Date) async throws -> InvitationRedemption
}

/// The invitations' tables and statements, written once for both stores (`ProviderStatement`'s `$n` parameters).
enum InvitationSQL {
    /// Migration v11 (issue 47): invitations, their uses, and the invitation a sign-in was started with.
    static let v11 = [
        """
        CREATE TABLE invitations (id TEXT PRIMARY KEY NOT NULL, token_hash TEXT NOT NULL UNIQUE, groups_json TEXT NOT NULL, note TEXT,
            uses INTEGER NOT NULL, uses_left INTEGER NOT NULL, created_by TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL, revoked_at DOUBLE PRECISION)
        """,
        """
        CREATE TABLE invitation_uses (invitation_id TEXT NOT NULL REFERENCES invitations(id) ON DELETE CASCADE, sub TEXT NOT NULL,
            used_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (invitation_id, sub))
        """,
        "ALTER TABLE pending_authorizations ADD COLUMN invitation_hash TEXT",
    ]

    private static let columns = "id, token_hash, groups_json, note, uses, uses_left, created_by, created_at, expires_at, revoked_at"

    static func save(_ invitation: InvitationRecord) throws -> ProviderStatement {
        ProviderStatement(
            "INSERT INTO invitations (\(columns)) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL)",
            .text(invitation.id), .text(invitation.tokenHash), .text(try ProviderSQL.list(invitation.groups)), .text(invitation.note),
            .integer(invitation.uses), .integer(invitation.usesLeft), .text(invitation.createdBy), .real(invitation.createdAt.timeIntervalSince1970),
            .real(invitation.expiresAt.timeIntervalSince1970)
        )
    }

    static let all = ProviderStatement("SELECT \(columns) FROM invitations ORDER BY created_at DESC, id")

    static func byToken(_ hash: String) -> ProviderStatement {
        ProviderStatement("SELECT \(columns) FROM invitations WHERE token_hash = $1", .text(hash))
    }

    static func byID(_ id: String) -> ProviderStatement {
        ProviderStatement("SELECT \(columns) FROM invitations WHERE id = $1", .text(id))
    }

    static func used(_ id: String, by subject: String) -> ProviderStatement {
        ProviderStatement("SELECT 1 FROM invitation_uses WHERE invitation_id = $1 AND sub = $2", .text(id), .text(subject))
    }

    static func revoke(_ id: String, at: Date) -> ProviderStatement {
        ProviderStatement("UPDATE invitations SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL RETURNING 1", .text(id), .real(at.timeIntervalSince1970))
    }

    /// Takes one use of an open invitation: a row (the uses left) when there was one to take. On PostgreSQL a second
    /// instance's take of the same row waits for the first's transaction and then reads the row again, so the last
    /// use is taken once.
    static func take(_ id: String, at: Date) -> ProviderStatement {
        ProviderStatement(
            "UPDATE invitations SET uses_left = uses_left - 1 WHERE id = $1 AND uses_left > 0 AND revoked_at IS NULL AND expires_at > $2 RETURNING uses_left",
            .text(id), .real(at.timeIntervalSince1970)
        )
    }

    static func noteUse(_ id: String, by subject: String, at: Date) -> ProviderStatement {
        ProviderStatement("INSERT INTO invitation_uses (invitation_id, sub, used_at) VALUES ($1, $2, $3)", .text(id), .text(subject), .real(at.timeIntervalSince1970))
    }

    static func record(_ row: some ProviderRow) throws -> InvitationRecord {
        var invitation = InvitationRecord(
            id: try row.text(0), tokenHash: try row.text(1), groups: try ProviderSQL.list(from: row.text(2)), note: try row.optionalText(3),
            uses: Int(try row.integer(4)), createdBy: try row.text(6), createdAt: Date(timeIntervalSince1970: try row.real(7)),
            expiresAt: Date(timeIntervalSince1970: try row.real(8))
        )
        invitation.usesLeft = Int(try row.integer(5))
        invitation.revokedAt = try row.optionalReal(9).map { Date(timeIntervalSince1970: $0) }
        return invitation
    }

    /// What a redemption does once it has taken a use (`take` returned `left`): the use noted, the person a member
    /// of each group (as `sub:<sub>`, how a member by subject is written). Both stores run these in the transaction of the take.
    /// The apps that want them are told that the person joined and what groups they are in now (the outbox).
    static func joins(_ invitation: InvitationRecord, subject: String, at: Date, routing: EventRouting) -> [ProviderStatement] {
        [noteUse(invitation.id, by: subject, at: at)] + invitation.groups.map { GroupSQL.add("sub:" + subject, to: $0, at: at) }
            + EventSQL.enqueue(.joined, subject: subject, data: ["via": "invitation", "invitation": invitation.id, "groups": invitation.groups], at: at, routing: routing)
            + EventSQL.groupsChanged(subject: subject, added: invitation.groups, removed: [], via: "invitation", at: at, routing: routing)
    }

    /// The invitation after its use was taken, `left` being the row `take` returned.
    static func joined(_ invitation: InvitationRecord, left: some ProviderRow) throws -> InvitationRedemption {
        var joined = invitation
        joined.usesLeft = Int(try left.integer(0))
        return .joined(joined)
    }

    /// Why no use was taken of `invitation` (as read again after the take found none: on PostgreSQL another instance
    /// may have taken the last use while this one waited for the row).
    static func refusal(_ invitation: InvitationRecord, at: Date) -> InvitationRedemption {
        .refused(invitation.closed(at: at) ?? .usedUp, invitation)
    }
}

extension SQLiteStore {
    public func saveInvitation(_ invitation: InvitationRecord) async throws {
        let statement = try InvitationSQL.save(invitation)
        try await pool.write { db in _ = try db.rows(statement) }
    }

    public func invitations() async throws -> [InvitationRecord] {
        try await pool.read { db in try db.rows(InvitationSQL.all).map(InvitationSQL.record) }
    }

    public func invitation(tokenHash: String) async throws -> InvitationRecord? {
        try await pool.read { db in try db.rows(InvitationSQL.byToken(tokenHash)).first.map(InvitationSQL.record) }
    }

    public func invitation(id: String) async throws -> InvitationRecord? {
        try await pool.read { db in try db.rows(InvitationSQL.byID(id)).first.map(InvitationSQL.record) }
    }

    public func invitationUsed(id: String, by subject: String) async throws -> Bool {
        try await pool.read { db in try !db.rows(InvitationSQL.used(id, by: subject)).isEmpty }
    }

    public func revokeInvitation(id: String, at: Date) async throws -> Bool {
        try await pool.write { db in try !db.rows(InvitationSQL.revoke(id, at: at)).isEmpty }
    }

    /// In one transaction of the single writer: no other write comes between the read and the take.
    public func redeemInvitation(tokenHash: String, subject: String, at: Date) async throws -> InvitationRedemption {
        try await pool.write { db in
            guard let found = try db.rows(InvitationSQL.byToken(tokenHash)).first.map(InvitationSQL.record) else { return .refused(.unknown, nil) }
            if try !db.rows(InvitationSQL.used(found.id, by: subject)).isEmpty { return .alreadyJoined(found) }
            guard let left = try db.rows(InvitationSQL.take(found.id, at: at)).first else { return InvitationSQL.refusal(found, at: at) }
            _ = try db.run(InvitationSQL.joins(found, subject: subject, at: at, routing: self.events))
            return try InvitationSQL.joined(found, left: left)
        }
    }
}

extension PostgresStore {
    public func saveInvitation(_ invitation: InvitationRecord) async throws {
        _ = try await single(try InvitationSQL.save(invitation))
    }

    public func invitations() async throws -> [InvitationRecord] {
        try await single(InvitationSQL.all).map(InvitationSQL.record)
    }

    public func invitation(tokenHash: String) async throws -> InvitationRecord? {
        try await single(InvitationSQL.byToken(tokenHash)).first.map(InvitationSQL.record)
    }

    public func invitation(id: String) async throws -> InvitationRecord? {
        try await single(InvitationSQL.byID(id)).first.map(InvitationSQL.record)
    }

    public func invitationUsed(id: String, by subject: String) async throws -> Bool {
        try await !single(InvitationSQL.used(id, by: subject)).isEmpty
    }

    public func revokeInvitation(id: String, at: Date) async throws -> Bool {
        try await !single(InvitationSQL.revoke(id, at: at)).isEmpty
    }

    /// In one transaction; a use taken makes every instance read the groups again (`NOTIFY siwa_groups`) when it commits.
    public func redeemInvitation(tokenHash: String, subject: String, at: Date) async throws -> InvitationRedemption {
        try await transaction { connection, logger in
            func rows(_ statement: ProviderStatement) async throws -> [PostgresCells] { try await connection.rows(statement, logger: logger) }
            guard let found = try await rows(InvitationSQL.byToken(tokenHash)).first.map(InvitationSQL.record) else { return .refused(.unknown, nil) }
            if try await !rows(InvitationSQL.used(found.id, by: subject)).isEmpty { return .alreadyJoined(found) }
            guard let left = try await rows(InvitationSQL.take(found.id, at: at)).first else {
                return InvitationSQL.refusal(try await rows(InvitationSQL.byID(found.id)).first.map(InvitationSQL.record) ?? found, at: at)
            }
            _ = try await connection.run(InvitationSQL.joins(found, subject: subject, at: at, routing: self.events), logger: logger)
            _ = try await rows(GroupSQL.notify)
            return try InvitationSQL.joined(found, left: left)
        }
    }
}
