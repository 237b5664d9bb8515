import AppleSignIn
import Foundation
import JOSE
import Logging
import Synchronization

/// Invitations (issue 47, part A): what `siwa invite`, the console and the invitation's page share. An invitation is
/// drafted here (its groups, uses, lifetime and note checked, its token and id drawn), its link made from
/// `public_url`, and it is used here for a person once Apple says who they are: the use taken in the store, the
/// groups in force on this instance at once, and an audit event either way.
public struct Invitations: Sendable {
    /// How long an invitation lasts when its maker does not say: a week.
    public static let defaultLifetime = 7 * 86_400
    /// At most this many uses, and a note at most this long.
    public static let maximumUses = 10_000
    public static let maximumNote = 500
    /// The path of an invitation's link, before its token.
    public static let linkPath = "/auth/invite/"

    let store: any SignInStore
    let access: AccessControl
    let audit: AuditTrail
    let logger: Logger
    /// What the link's page shows of invitations opened lately; forgotten here when a use is taken or one is revoked.
    let pages = InvitationPages()

    public init(store: any SignInStore, access: AccessControl, audit: AuditTrail, logger: Logger) {
        self.store = store
        self.access = access
        self.audit = audit
        self.logger = logger
    }

    /// An invitation to `groups` for `uses` people within `lifetime` seconds, with `note` for them to read, made by
    /// `createdBy`, and its token (only in the link; the record keeps its hash). Every value is checked: a group
    /// that is no group name, no group, uses out of 1…10,000, a note too long or with control characters.
    public static func draft(
        groups: [String], uses: Int, lifetime: Int, note: String?, createdBy: String, now: Date = Date()
    ) throws(AccessConfigurationError) -> (invitation: InvitationRecord, token: String) {
        var unique: [String] = []
        for group in groups where !unique.contains(group) {
            try GroupName.check(group)
            unique.append(group)
        }
        guard !unique.isEmpty else { throw AccessConfigurationError("an invitation names at least one group") }
        guard (1...maximumUses).contains(uses) else { throw AccessConfigurationError("\(uses) uses: an invitation has from 1 to \(maximumUses)") }
        guard (1...(366 * 86_400)).contains(lifetime) else { throw AccessConfigurationError("an invitation lasts from a second to a year") }
        let note = note?.trimmingCharacters(in: .whitespacesAndNewlines)
        if let note {
            guard note.count <= maximumNote else { throw AccessConfigurationError("the note is \(note.count) characters long; at most \(maximumNote)") }
            guard !note.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
                throw AccessConfigurationError("the note has a control character; write it on one line")
            }
        }
        let token = RandomToken.generate()
        let id = "inv_" + SecureRandom.bytes(6).map { String(format: "%02x", $0) }.joined()
        let invitation = InvitationRecord(
            id: id, tokenHash: SignInFlow.hash(token), groups: unique, note: note?.isEmpty == true ? nil : note, uses: uses, createdBy: createdBy,
            createdAt: now, expiresAt: now.addingTimeInterval(TimeInterval(lifetime))
        )
        return (invitation, token)
    }

    /// A lifetime as `--expires` and the console take it: seconds, or with its unit (`90s`, `15m`, `2h`, `7d`).
    public static func lifetime(_ text: String) throws(AccessConfigurationError) -> Int {
        try AccessRule.seconds(text)
    }

    /// The link of the invitation with `token` on the site at `origin` (`public_url`'s).
    public static func link(origin: String, token: String) -> String {
        origin + linkPath + token
    }

    /// Whether `text` could be an invitation's token (what `RandomToken` draws: 43 characters of base64url); anything
    /// else is answered as an unknown invitation without asking the store.
    static func isToken(_ text: some StringProtocol) -> Bool {
        text.utf8.count == 43 && Base64URL.decode(text) != nil
    }

    /// The audit event of a made invitation.
    public static func createdEvent(_ invitation: InvitationRecord) -> AuditEvent {
        AuditEvent(
            "invite.created", reason: "\(invitation.id) groups=\(invitation.groups.joined(separator: ",")) uses=\(invitation.uses) expires=\(Int(invitation.expiresAt.timeIntervalSince1970))",
            actor: invitation.createdBy
        )
    }

    /// The audit event of a revoked invitation.
    public static func revokedEvent(id: String, actor: String) -> AuditEvent {
        AuditEvent("invite.revoked", reason: id, actor: actor)
    }

    /// Saves a drafted invitation, audited; the link to hand to the person.
    public func create(_ invitation: InvitationRecord) async throws {
        try await store.saveInvitation(invitation)
        audit.record(Self.createdEvent(invitation))
    }

    /// Closes the invitation `id`, audited; false when there was none open.
    public func revoke(id: String, actor: String) async throws -> Bool {
        guard try await store.revokeInvitation(id: id, at: Date()) else { return false }
        pages.forgetAll()
        audit.record(Self.revokedEvent(id: id, actor: actor))
        return true
    }

    /// Uses the invitation whose token hashes to `tokenHash` for `user` (signed in, or just verified by Apple); `ip`
    /// for the audit line. A use taken puts the groups in force here at once (other instances: `NOTIFY` with
    /// PostgreSQL, `check_cache_seconds` with SQLite). Throws only when the store did not answer.
    public func redeem(tokenHash: String, for user: UserRecord, ip: String?) async throws -> InvitationRedemption {
        let redemption = try await store.redeemInvitation(tokenHash: tokenHash, subject: user.subject, at: Date())
        pages.forget(tokenHash)
        switch redemption {
        case .joined(let invitation):
            await GroupsRefresher(store: store, access: access, interval: .seconds(1), logger: logger).refresh()
            audit.record(AuditEvent(
                "invite.redeemed", sub: user.subject, email: user.email, ip: ip, reason: "\(invitation.id) groups=\(invitation.groups.joined(separator: ","))"
            ))
        case .alreadyJoined:
            break
        case .refused(let why, let invitation):
            audit.record(AuditEvent("invite.refused", sub: user.subject, email: user.email, ip: ip, reason: (invitation.map { $0.id + " " } ?? "") + why.rawValue))
        }
        return redemption
    }
}

/// The invitations of links opened in the last `ttl` (found or not), at most `capacity` of them: what the link's page
/// shows, never what decides a use. A use taken here is forgotten at once; one taken elsewhere (another instance, the
/// sign-in's return, a revocation) shows within `ttl`.
final class InvitationPages: Sendable {
    static let ttl: TimeInterval = 2
    static let capacity = 10_000
    private let entries = Mutex<[String: (invitation: InvitationRecord?, readAt: Date)]>([:])

    /// `.some(record or nil)` when read within `ttl`; nil when it must be read.
    func lookup(_ hash: String, now: Date) -> InvitationRecord?? {
        entries.withLock { entries in
            guard let entry = entries[hash], now.timeIntervalSince(entry.readAt) < Self.ttl else { return nil }
            return .some(entry.invitation)
        }
    }

    func remember(_ invitation: InvitationRecord?, for hash: String, now: Date) {
        entries.withLock { entries in
            if entries.count >= Self.capacity { entries.removeAll(keepingCapacity: true) }
            entries[hash] = (invitation, now)
        }
    }

    func forget(_ hash: String) {
        _ = entries.withLock { $0.removeValue(forKey: hash) }
    }

    func forgetAll() {
        entries.withLock { $0.removeAll() }
    }
}
