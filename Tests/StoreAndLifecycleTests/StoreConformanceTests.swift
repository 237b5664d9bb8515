import AppleSignIn
import Foundation
@testable import SignInServer
import Testing

/// One suite, run against both stores: what `SignInStore` promises, checked through its API and, where the
/// promise is about what is (not) kept, through the tables themselves.
@Suite("Store conformance")
struct StoreConformanceTests {
    // MARK: pending authorizations

    @Test("a pending sign-in is consumed once, and not at all once expired", arguments: StoreKind.allCases)
    func pendingIsSingleUseAndExpires(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            let pending = Records.pending(at: now)
            try await store.savePending(pending)
            #expect(try await store.consumePending(state: pending.state, now: now.addingTimeInterval(5)) == pending)
            #expect(try await store.consumePending(state: pending.state, now: now.addingTimeInterval(6)) == nil)

            let short = Records.pending(at: now, lifetime: 10)
            try await store.savePending(short)
            #expect(try await store.consumePending(state: short.state, now: now.addingTimeInterval(11)) == nil)
            // Trying an expired one uses it up too: it does not come back for an earlier clock.
            #expect(try await store.consumePending(state: short.state, now: now) == nil)
            #expect(try await store.consumePending(state: "never-saved", now: now) == nil)
            #expect(try await fixture.sql.count("pending_authorizations") == 0)
        }
    }

    // MARK: users and sessions

    @Test("a later sign-in without names keeps the first sign-in's names and email", arguments: StoreKind.allCases)
    func signInUpsertKeepsFirstNames(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let sub = Records.subject()
            let first = Support.now()
            let user = try await store.completeSignIn(Records.signIn(sub, at: first, email: "ada@example.com", firstName: "Ada", lastName: "Lovelace"))
            #expect(user.displayName == "Ada Lovelace")
            #expect(user.email == "ada@example.com")

            let later = first.addingTimeInterval(3_600)
            let second = try await store.completeSignIn(Records.signIn(sub, at: later))
            #expect(second.firstName == "Ada")
            #expect(second.lastName == "Lovelace")
            #expect(second.email == "ada@example.com")
            #expect(second.createdAt == first)
            #expect(second.lastSignInAt == later)
            #expect(try await fixture.sql.count("users") == 1)
            #expect(try await fixture.sql.count("sessions", sub: sub) == 2)

            // A later `user` field is unsigned and Apple sends none after the first sign-in: a name in it is forged or
            // stale, and the first one stays. The address comes signed in the identity token and is taken.
            let third = try await store.completeSignIn(Records.signIn(sub, at: later.addingTimeInterval(60), email: "x@privaterelay.appleid.com", firstName: "Mallory"))
            #expect(third.firstName == "Ada")
            #expect(third.lastName == "Lovelace")
            #expect(third.email == "x@privaterelay.appleid.com")
            #expect(third.isPrivateEmail)

            // The person removed the app (the link revoked): their next sign-in is a first one again, its name taken.
            try await store.revokeLink(subject: sub, at: later.addingTimeInterval(120))
            let fourth = try await store.completeSignIn(Records.signIn(sub, at: later.addingTimeInterval(180), firstName: "Augusta"))
            #expect(fourth.firstName == "Augusta")
            #expect(fourth.lastName == "Lovelace")
            #expect(fourth.linkRevokedAt == nil)
        }
    }

    @Test("sessions are found by id hash until they expire or are deleted", arguments: StoreKind.allCases)
    func sessionsByHashExpiryAndDeletion(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let sub = Records.subject()
            let now = Support.now()
            let signIn = Records.signIn(sub, at: now, sessionID: "cookie-one", sessionLifetime: 600, firstName: "Grace")
            _ = try await store.completeSignIn(signIn)
            _ = try await store.completeSignIn(Records.signIn(sub, at: now, sessionID: "cookie-two", sessionLifetime: 6_000))

            let found = try #require(try await store.session(idHash: SignInFlow.hash("cookie-one"), now: now.addingTimeInterval(599)))
            #expect(found.0 == signIn.session)
            #expect(found.1.subject == sub)
            #expect(found.1.firstName == "Grace")
            // The id itself is never a key: only its hash finds the session.
            #expect(try await store.session(idHash: "cookie-one", now: now) == nil)
            #expect(try await fixture.sql.count("sessions", where: "id_hash = 'cookie-one'") == 0)

            #expect(try await store.session(idHash: SignInFlow.hash("cookie-one"), now: now.addingTimeInterval(600)) == nil)
            #expect(try await store.countActiveSessions(now: now.addingTimeInterval(1)) == 2)
            #expect(try await store.countActiveSessions(now: now.addingTimeInterval(700)) == 1)

            #expect(try await store.deleteSession(idHash: SignInFlow.hash("cookie-two")))
            #expect(try await store.session(idHash: SignInFlow.hash("cookie-two"), now: now) == nil)
            #expect(try await store.deleteSession(idHash: SignInFlow.hash("cookie-two")) == false)
            #expect(try await store.session(idHash: SignInFlow.hash("cookie-one"), now: now) != nil)
        }
    }

    // MARK: notifications

    @Test("email-disabled sets the forwarding flag and email-enabled clears it, each applied once by jti", arguments: StoreKind.allCases)
    func emailNotificationsAreIdempotent(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let sub = Records.subject()
            let now = Support.now()
            _ = try await store.completeSignIn(Records.signIn(sub, at: now, sessionID: "s1"))
            func flag() async throws -> Bool { try #require(try await store.session(idHash: SignInFlow.hash("s1"), now: now)).1.emailForwardingDisabled }
            #expect(try await flag() == false)

            let disabled = try Records.notification("email-disabled", sub: sub)
            #expect(try await store.apply(disabled, receivedAt: now) == .applied)
            #expect(try await flag())
            let enabled = try Records.notification("email-enabled", sub: sub)
            #expect(try await store.apply(enabled, receivedAt: now) == .applied)
            #expect(try await flag() == false)
            // The first one again (Apple retried it): nothing happens, the flag stays off.
            #expect(try await store.apply(disabled, receivedAt: now.addingTimeInterval(60)) == .duplicate)
            #expect(try await flag() == false)
            #expect(try await fixture.sql.count("notifications") == 2)
        }
    }

    @Test("consent-revoked ends every session, forgets the refresh token and marks the link revoked, once", arguments: StoreKind.allCases)
    func consentRevokedEndsSessions(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let sub = Records.subject(), other = Records.subject()
            let now = Support.now()
            _ = try await store.completeSignIn(Records.signIn(sub, at: now, sessionID: "a1", firstName: "Ada", refreshToken: "rt-a"))
            _ = try await store.completeSignIn(Records.signIn(sub, at: now, sessionID: "a2"))
            _ = try await store.completeSignIn(Records.signIn(other, at: now, sessionID: "b1", refreshToken: "rt-b"))

            let revoked = try Records.notification("consent-revoked", sub: sub)
            #expect(try await store.apply(revoked, receivedAt: now.addingTimeInterval(10)) == .applied)
            #expect(try await store.session(idHash: SignInFlow.hash("a1"), now: now) == nil)
            #expect(try await store.session(idHash: SignInFlow.hash("a2"), now: now) == nil)
            #expect(try await fixture.sql.count("sessions", sub: sub) == 0)
            #expect(try await fixture.sql.count("refresh_tokens", sub: sub) == 0)
            #expect(try await fixture.sql.count("users", where: "sub = \(Support.literal(sub)) AND link_revoked_at IS NOT NULL") == 1)
            // The user stays (consent can be given again); the other user is untouched.
            #expect(try await fixture.sql.count("users", sub: sub) == 1)
            #expect(try await store.session(idHash: SignInFlow.hash("b1"), now: now) != nil)
            let due = try await store.claimRefreshChecks(now: now.addingTimeInterval(2 * 86_400), limit: 10) { now.addingTimeInterval(3 * 86_400) }
            #expect(due.map(\.subject) == [other])

            #expect(try await store.apply(revoked, receivedAt: now.addingTimeInterval(20)) == .duplicate)

            // Signing in again restores the link.
            let back = try await store.completeSignIn(Records.signIn(sub, at: now.addingTimeInterval(30)))
            #expect(back.linkRevokedAt == nil)
            #expect(back.firstName == "Ada")
        }
    }

    @Test("account-delete removes the user, sessions and tokens, leaving only a tombstone", arguments: StoreKind.allCases)
    func accountDeleteLeavesTombstone(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let sub = Records.subject(), other = Records.subject()
            let now = Support.now()
            _ = try await store.completeSignIn(Records.signIn(sub, at: now, sessionID: "d1", email: "gone@example.com", firstName: "Gone", refreshToken: "rt-gone"))
            _ = try await store.completeSignIn(Records.signIn(other, at: now, sessionID: "o1", refreshToken: "rt-other"))

            let deletion = try Records.notification("account-delete", sub: sub)
            #expect(try await store.apply(deletion, receivedAt: now) == .applied)
            #expect(try await store.session(idHash: SignInFlow.hash("d1"), now: now) == nil)
            for table in ["users", "sessions", "refresh_tokens"] {
                #expect(try await fixture.sql.count(table, sub: sub) == 0, "\(table) still holds the deleted user")
            }
            #expect(try await fixture.sql.count("tombstones", sub: sub) == 1)
            #expect(try await fixture.sql.count("tombstones") == 1)
            // Nothing that identifies the person but the sub is left anywhere.
            #expect(try await fixture.sql.count("users", where: "email = 'gone@example.com' OR first_name = 'Gone'") == 0)
            #expect(try await store.deleteUser(subject: sub, tombstone: true, at: now) == nil)

            #expect(try await store.apply(deletion, receivedAt: now) == .duplicate)
            #expect(try await store.session(idHash: SignInFlow.hash("o1"), now: now) != nil)
            #expect(try await fixture.sql.count("refresh_tokens", sub: other) == 1)
        }
    }

    @Test("an unknown notification type is recorded and changes nothing", arguments: StoreKind.allCases)
    func unknownNotificationIsRecorded(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let sub = Records.subject()
            let now = Support.now()
            _ = try await store.completeSignIn(Records.signIn(sub, at: now, sessionID: "u1"))
            let unknown = try Records.notification("future-event", sub: sub)
            #expect(try await store.apply(unknown, receivedAt: now) == .recorded)
            #expect(try await fixture.sql.texts("SELECT type FROM notifications WHERE jti = \(Support.literal(unknown.id))") == ["future-event"])
            #expect(try await store.apply(unknown, receivedAt: now) == .duplicate)
            #expect(try await store.session(idHash: SignInFlow.hash("u1"), now: now) != nil)
        }
    }

    // MARK: deletion, refresh checks, revocations

    @Test("deleteUser returns the decrypted refresh token and removes everything", arguments: StoreKind.allCases)
    func deleteUserReturnsToken(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let sub = Records.subject()
            let now = Support.now()
            _ = try await store.completeSignIn(Records.signIn(sub, at: now, sessionID: "x1", refreshToken: "r.plain-token.0.emu"))
            let token = try await store.deleteUser(subject: sub, tombstone: false, at: now)
            #expect(token == RefreshCheck(subject: sub, clientID: Records.webClient, token: "r.plain-token.0.emu"))
            #expect(try await fixture.sql.count("users", sub: sub) == 0)
            #expect(try await fixture.sql.count("sessions", sub: sub) == 0)
            #expect(try await fixture.sql.count("refresh_tokens", sub: sub) == 0)
            #expect(try await fixture.sql.count("tombstones", sub: sub) == 0)
            #expect(try await store.deleteUser(subject: sub, tombstone: false, at: now) == nil)

            // A user who never had a refresh token (Apple sent none) is deleted all the same.
            let bare = Records.subject()
            _ = try await store.completeSignIn(Records.signIn(bare, at: now))
            #expect(try await store.deleteUser(subject: bare, tombstone: true, at: now) == nil)
            #expect(try await fixture.sql.count("users", sub: bare) == 0)
            #expect(try await fixture.sql.count("tombstones", sub: bare) == 1)
        }
    }

    @Test("a refresh token is due a day after sign-in and claimed once that day", arguments: StoreKind.allCases)
    func refreshChecksClaimedOncePerDay(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let sub = Records.subject()
            let now = Support.now()
            _ = try await store.completeSignIn(Records.signIn(sub, at: now, refreshToken: "rt-daily"))
            let tomorrow: @Sendable () -> Date = { now.addingTimeInterval(2 * 86_400) }

            #expect(try await store.claimRefreshChecks(now: now.addingTimeInterval(3_600), limit: 10, nextCheck: tomorrow).isEmpty)
            let dayOne = now.addingTimeInterval(86_400 + 60)
            #expect(try await store.claimRefreshChecks(now: dayOne, limit: 10, nextCheck: tomorrow) == [RefreshCheck(subject: sub, clientID: Records.webClient, token: "rt-daily")])
            #expect(try await store.claimRefreshChecks(now: dayOne, limit: 10, nextCheck: tomorrow).isEmpty)
            #expect(try await store.claimRefreshChecks(now: dayOne.addingTimeInterval(12 * 3_600), limit: 10, nextCheck: tomorrow).isEmpty)
            // A next check asked for sooner than a day is pushed to a day anyway.
            #expect(try await fixture.sql.count("refresh_tokens", where: "next_check_at >= \(dayOne.timeIntervalSince1970 + 86_400)") == 1)
            let dayThree = now.addingTimeInterval(3 * 86_400 + 3_600)
            #expect(try await store.claimRefreshChecks(now: dayThree, limit: 10, nextCheck: tomorrow).map(\.subject) == [sub])
        }
    }

    @Test("queued revocations are claimed when due, retried later, and removed when finished", arguments: StoreKind.allCases)
    func revocationQueue(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            try await store.enqueueRevocation(clientID: Records.webClient, token: "rt-to-revoke", at: now)
            #expect(try await fixture.sql.count("revocations", where: "token LIKE '%rt-to-revoke%'") == 0)
            #expect(try await store.claimRevocations(now: now.addingTimeInterval(-1), limit: 10, retryAt: now).isEmpty)

            let first = try await store.claimRevocations(now: now, limit: 10, retryAt: now.addingTimeInterval(300))
            #expect(first.count == 1)
            #expect(first.first?.clientID == Records.webClient)
            #expect(first.first?.token == "rt-to-revoke")
            #expect(first.first?.attempts == 1)
            #expect(try await store.claimRevocations(now: now.addingTimeInterval(299), limit: 10, retryAt: now.addingTimeInterval(600)).isEmpty)

            let second = try await store.claimRevocations(now: now.addingTimeInterval(300), limit: 10, retryAt: now.addingTimeInterval(900))
            #expect(second.map(\.id) == first.map(\.id))
            #expect(second.first?.attempts == 2)
            try await store.finishRevocation(id: try #require(second.first?.id))
            #expect(try await store.claimRevocations(now: now.addingTimeInterval(10_000), limit: 10, retryAt: now.addingTimeInterval(20_000)).isEmpty)
            #expect(try await fixture.sql.count("revocations") == 0)
        }
    }

    // MARK: team transfer

    @Test("a sign-in under a new sub carrying the recorded transfer_sub takes over the old user", arguments: StoreKind.allCases)
    func transferSubjectLinks(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let old = Records.subject(), new = Records.subject(), bystander = Records.subject()
            let now = Support.now()
            _ = try await store.completeSignIn(Records.signIn(old, at: now, sessionID: "old-session", email: "ada@example.com", firstName: "Ada", lastName: "Lovelace", refreshToken: "rt-old-team"))
            _ = try await store.completeSignIn(Records.signIn(bystander, at: now))
            #expect(Set(try await store.subjectsWithoutTransferSubject(limit: 10)) == [old, bystander])
            try await store.setTransferSubject("t.transfer-ada", for: old)
            #expect(try await store.subjectsWithoutTransferSubject(limit: 10) == [bystander])

            let user = try await store.completeSignIn(Records.signIn(new, at: now.addingTimeInterval(60), sessionID: "new-session", transferSubject: "t.transfer-ada"))
            #expect(user.subject == new)
            #expect(user.displayName == "Ada Lovelace")
            #expect(user.email == "ada@example.com")
            #expect(user.createdAt == now)
            #expect(try await fixture.sql.count("users", sub: old) == 0)
            #expect(try await fixture.sql.count("users") == 2)
            // The session and the refresh token moved with the user.
            let moved = try #require(try await store.session(idHash: SignInFlow.hash("old-session"), now: now))
            #expect(moved.0.subject == new)
            #expect(moved.1.subject == new)
            #expect(try await fixture.sql.count("sessions", sub: new) == 2)
            #expect(try await fixture.sql.count("refresh_tokens", sub: old) == 0)
            let due = try await store.claimRefreshChecks(now: now.addingTimeInterval(2 * 86_400), limit: 10) { now.addingTimeInterval(3 * 86_400) }
            #expect(due == [RefreshCheck(subject: new, clientID: Records.webClient, token: "rt-old-team")])
        }
    }

    // MARK: sweeping

    @Test("the sweeper removes expired rows in batches no larger than its limit", arguments: StoreKind.allCases)
    func sweepIsBounded(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            let past = now.addingTimeInterval(-86_400)
            let sub = Records.subject()
            for index in 0..<5 {
                try await store.savePending(Records.pending(at: past, lifetime: 600))
                _ = try await store.completeSignIn(Records.signIn(sub, at: past, sessionID: "old-\(index)", sessionLifetime: 600))
            }
            let livePending = Records.pending(at: now)
            try await store.savePending(livePending)
            _ = try await store.completeSignIn(Records.signIn(sub, at: now, sessionID: "live", sessionLifetime: 600))

            #expect(try await store.sweepExpired(now: now, limit: 3) == 6)
            #expect(try await fixture.sql.count("pending_authorizations") == 3)
            #expect(try await fixture.sql.count("sessions") == 3)
            #expect(try await store.sweepExpired(now: now, limit: 3) == 4)
            #expect(try await store.sweepExpired(now: now, limit: 3) == 0)
            #expect(try await store.consumePending(state: livePending.state, now: now) == livePending)
            #expect(try await store.session(idHash: SignInFlow.hash("live"), now: now) != nil)
            #expect(try await fixture.sql.count("users", sub: sub) == 1)
        }
    }

    // MARK: encryption at rest

    @Test("refresh tokens are sealed at rest, and a rotated key list still opens tokens sealed with the old key", arguments: StoreKind.allCases)
    func refreshTokensEncryptedAndRotatable(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let oldStore = fixture.store
            let oldKey = fixture.key
            let now = Support.now()
            let early = Records.subject(), late = Records.subject()
            let earlyToken = "r0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d.0.emu.secret-early"
            _ = try await oldStore.completeSignIn(Records.signIn(early, at: now, refreshToken: earlyToken))
            try await oldStore.enqueueRevocation(clientID: Records.webClient, token: "queued-secret-token", at: now)

            let stored = try await fixture.sql.texts("SELECT token FROM refresh_tokens WHERE sub = \(Support.literal(early))")
            let raw = try #require(stored.first ?? nil)
            #expect(!raw.contains(earlyToken))
            #expect(!raw.contains("secret-early"))
            #expect(raw.hasPrefix(try Self.keyID(oldKey) + ":"))
            #expect(try await fixture.sql.count("revocations", where: "token LIKE '%queued-secret%'") == 0)

            let newKey = TokenCipher.generateKey()
            let rotated = try await fixture.open(keys: [newKey, oldKey])
            let lateToken = "r9f8e7d6c5b4a39281706f5e4d3c2b1a0.0.emu.secret-late"
            _ = try await rotated.completeSignIn(Records.signIn(late, at: now, refreshToken: lateToken))
            let lateRaw = try #require(try await fixture.sql.texts("SELECT token FROM refresh_tokens WHERE sub = \(Support.literal(late))").first ?? nil)
            #expect(lateRaw.hasPrefix(try Self.keyID(newKey) + ":"))
            #expect(!lateRaw.contains("secret-late"))

            // The rotated store reads both.
            let due = try await rotated.claimRefreshChecks(now: now.addingTimeInterval(86_400 + 60), limit: 10) { now.addingTimeInterval(2 * 86_400) }
            #expect(Set(due.map(\.token)) == [earlyToken, lateToken])
            #expect(try await rotated.claimRevocations(now: now, limit: 10, retryAt: now.addingTimeInterval(60)).map(\.token) == ["queued-secret-token"])

            // A store that lost the old key cannot read what it sealed, and that stops nothing else: the other
            // user's check still runs, the unsendable revocation is dropped, and deletion still deletes.
            let newOnly = try await fixture.open(keys: [newKey])
            let later = now.addingTimeInterval(4 * 86_400)
            #expect(try await newOnly.claimRefreshChecks(now: later, limit: 10) { later.addingTimeInterval(86_400) }.map(\.token) == [lateToken])
            #expect(try await newOnly.claimRevocations(now: now.addingTimeInterval(120), limit: 10, retryAt: later).isEmpty)
            #expect(try await fixture.sql.count("revocations", where: "1 = 1") == 0)
            #expect(try await newOnly.deleteUser(subject: early, tombstone: false, at: now) == nil)
            #expect(try await fixture.sql.count("users", sub: early) == 0)
            #expect(try await rotated.deleteUser(subject: late, tombstone: false, at: now)?.token == lateToken)
        }
    }

    /// The id a cipher puts before the colon of what it seals with `key`.
    static func keyID(_ key: String) throws -> String {
        let sealed = try TokenCipher(base64Keys: [key]).seal("probe")
        return String(sealed.prefix { $0 != ":" })
    }
}
