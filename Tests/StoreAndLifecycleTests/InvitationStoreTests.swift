import AppleSignIn
import Foundation
@testable import SignInServer
import Testing

/// Invitations in both stores (issue 47, part A): a use is taken once, by one person once, never from a closed
/// invitation, and the last use once among instances sharing the database.
@Suite("Invitations in the store")
struct InvitationStoreTests {
    static func drafted(groups: [String] = ["finance", "ops"], uses: Int, lifetime: Int = 3_600, at now: Date) throws -> (invitation: InvitationRecord, token: String) {
        try Invitations.draft(groups: groups, uses: uses, lifetime: lifetime, note: "Grace invites you to the books", createdBy: "cli", now: now)
    }

    @Test("two uses: two people join its groups by sub, the first again takes no use, a third is refused as used; nothing changes for a refusal", arguments: StoreKind.allCases)
    func usesAreTakenOnce(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            let (invitation, token) = try Self.drafted(uses: 2, at: now)
            try await store.saveInvitation(invitation)
            #expect(try await store.invitation(tokenHash: SignInFlow.hash(token)) == invitation)
            #expect(try await fixture.sql.texts("SELECT token_hash FROM invitations") == [SignInFlow.hash(token)], "the store keeps the token's hash, not the token")

            let (grace, ada, lilei) = (Records.subject(), Records.subject(), Records.subject())
            guard case .joined(let afterGrace) = try await store.redeemInvitation(tokenHash: invitation.tokenHash, subject: grace, at: now) else {
                Issue.record("Grace did not join")
                return
            }
            #expect(afterGrace.usesLeft == 1)
            guard case .alreadyJoined = try await store.redeemInvitation(tokenHash: invitation.tokenHash, subject: grace, at: now) else {
                Issue.record("Grace's second use was not recognised")
                return
            }
            guard case .joined(let afterAda) = try await store.redeemInvitation(tokenHash: invitation.tokenHash, subject: ada, at: now) else {
                Issue.record("Ada did not join")
                return
            }
            #expect(afterAda.usesLeft == 0)
            #expect(try await store.redeemInvitation(tokenHash: invitation.tokenHash, subject: lilei, at: now) == .refused(.usedUp, afterAda))

            let members = try await store.groupMemberships().map { "\($0.group) \($0.member)" }.sorted()
            #expect(members == ["finance sub:\(ada)", "finance sub:\(grace)", "ops sub:\(ada)", "ops sub:\(grace)"].sorted())
            #expect(try await store.invitationUsed(id: invitation.id, by: grace))
            #expect(try await !store.invitationUsed(id: invitation.id, by: lilei))
            #expect(try await store.redeemInvitation(tokenHash: SignInFlow.hash("no such token"), subject: lilei, at: now) == .refused(.unknown, nil))
            #expect(try await fixture.sql.count("invitation_uses") == 2)
        }
    }

    @Test("an expired or revoked invitation gives no use and makes no member; revoking twice says so", arguments: StoreKind.allCases)
    func closedInvitations(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            let (short, _) = try Self.drafted(uses: 5, lifetime: 60, at: now)
            let (revoked, _) = try Self.drafted(uses: 5, at: now)
            try await store.saveInvitation(short)
            try await store.saveInvitation(revoked)
            #expect(try await store.revokeInvitation(id: revoked.id, at: now))
            #expect(try await !store.revokeInvitation(id: revoked.id, at: now))
            #expect(try await !store.revokeInvitation(id: "inv_000000000000", at: now))

            let person = Records.subject()
            guard case .refused(.expired, _) = try await store.redeemInvitation(tokenHash: short.tokenHash, subject: person, at: now.addingTimeInterval(61)) else {
                Issue.record("an expired invitation was used")
                return
            }
            guard case .refused(.revoked, let after) = try await store.redeemInvitation(tokenHash: revoked.tokenHash, subject: person, at: now) else {
                Issue.record("a revoked invitation was used")
                return
            }
            #expect(after?.usesLeft == 5)
            #expect(try await store.groupMemberships().isEmpty)
            #expect(try await store.invitations().map(\.id).sorted() == [short.id, revoked.id].sorted())
        }
    }

    @Test("the last use, pressed at once by 12 people on two instances sharing the database: one member, eleven refused as used", arguments: StoreKind.allCases)
    func lastUseAmongInstances(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let other = try await fixture.open(keys: [fixture.key])
            let now = Support.now()
            let (invitation, _) = try Self.drafted(groups: ["finance"], uses: 1, at: now)
            try await fixture.store.saveInvitation(invitation)
            let people = (0..<12).map { _ in Records.subject() }
            let outcomes = try await withThrowingTaskGroup(of: InvitationRedemption.self) { group in
                for (index, person) in people.enumerated() {
                    let store: any SignInStore = index.isMultiple(of: 2) ? fixture.store : other
                    group.addTask { try await store.redeemInvitation(tokenHash: invitation.tokenHash, subject: person, at: now) }
                }
                var all: [InvitationRedemption] = []
                for try await outcome in group { all.append(outcome) }
                return all
            }
            let joined = outcomes.filter { if case .joined = $0 { true } else { false } }
            let refused = outcomes.filter { if case .refused(.usedUp, _) = $0 { true } else { false } }
            #expect(joined.count == 1, "\(outcomes)")
            #expect(refused.count == 11, "\(outcomes)")
            #expect(try await fixture.store.groupMemberships().count == 1)
            #expect(try await fixture.sql.integer("SELECT uses_left FROM invitations") == 0)
        }
    }

    @Test("a pending sign-in keeps the invitation it was started from", arguments: StoreKind.allCases)
    func pendingKeepsInvitation(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            var pending = Records.pending(at: Support.now())
            pending.invitationHash = SignInFlow.hash("an invitation's token")
            try await fixture.store.savePending(pending)
            #expect(try await fixture.store.consumePending(state: pending.state, now: pending.createdAt) == pending)
        }
    }

    @Test("what an invitation may be: groups named, 1…10,000 uses, a second to a year, a one-line note of 500 characters at most")
    func drafts() throws {
        let now = Support.now()
        for (groups, uses, lifetime, note) in [
            ([String](), 1, 60, nil as String?), (["Finance"], 1, 60, nil), (["finance"], 0, 60, nil), (["finance"], 10_001, 60, nil),
            (["finance"], 1, 0, nil), (["finance"], 1, 367 * 86_400, nil), (["finance"], 1, 60, String(repeating: "x", count: 501)), (["finance"], 1, 60, "two\nlines"),
        ] {
            #expect(throws: AccessConfigurationError.self, "\(groups) \(uses) \(lifetime) \(note ?? "")") {
                try Invitations.draft(groups: groups, uses: uses, lifetime: lifetime, note: note, createdBy: "cli", now: now)
            }
        }
        let (invitation, token) = try Invitations.draft(groups: ["ops", "finance", "ops"], uses: 3, lifetime: try Invitations.lifetime("7d"), note: "  ", createdBy: "cli", now: now)
        #expect(invitation.groups == ["ops", "finance"])
        #expect(invitation.note == nil)
        #expect(invitation.expiresAt == now.addingTimeInterval(7 * 86_400))
        #expect(Invitations.isToken(token))
        #expect(invitation.id.hasPrefix("inv_") && invitation.id.count == 16)
        #expect(!token.contains(invitation.id) && invitation.tokenHash == SignInFlow.hash(token))
    }
}
