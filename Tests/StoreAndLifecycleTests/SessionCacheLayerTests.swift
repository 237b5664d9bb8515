import AppleSignIn
import Foundation
@testable import SignInServer
import Synchronization
import TestSupport
import Testing

/// The session cache as one layer over either backend (`SessionCachedStore`): every write that changes a person or a
/// session ends what memory holds of it at once, and the look-ups that must ask the database are bounded and shared
/// out without turning away the people whose sessions exist.
@Suite("The session cache over either backend")
struct SessionCacheLayerTests {
    /// The writes that change what a cached session shows, each as the part of siwa that makes it.
    enum Write: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case signOut, signOutEverywhere, operatorEndsSessions, consentRevoked, accountDelete, emailDisabled, deletion, refreshCheckFailed, signInAgain, teamTransfer
        var testDescription: String { rawValue }
    }

    @Test("each kind of write ends, or changes, a session held in memory at once", arguments: StoreKind.allCases, Write.allCases)
    func everyWriteReachesTheCache(_ kind: StoreKind, _ write: Write) async throws {
        try await StoreFixture.with(kind) { fixture in
            // Sessions stay in memory far longer than the test: only the write can end them there.
            let store = SessionCachedStore(fixture.store.backend, cache: SessionCache(lifetime: 600), logger: Support.logger("test.cache"))
            let sub = Records.subject(), bystander = Records.subject()
            let now = Support.now()
            _ = try await store.completeSignIn(Records.signIn(sub, at: now, sessionID: "phone", firstName: "Ada"))
            _ = try await store.completeSignIn(Records.signIn(sub, at: now, sessionID: "laptop"))
            _ = try await store.completeSignIn(Records.signIn(bystander, at: now, sessionID: "other", firstName: "Grace"))
            let (phone, laptop, other) = (SignInFlow.hash("phone"), SignInFlow.hash("laptop"), SignInFlow.hash("other"))
            for idHash in [phone, laptop, other] {
                #expect(try await store.session(idHash: idHash, now: now, askedBy: "192.0.2.1") != nil)
                #expect(store.cachedSession(idHash: idHash, now: now) != nil, "the session is not held in memory, so the test shows nothing")
            }

            var ended: [String] = [phone, laptop]
            switch write {
            case .signOut:
                // `SessionController`'s sign-out: this browser's session only.
                #expect(try await store.deleteSession(idHash: phone))
                ended = [phone]
            case .signOutEverywhere, .operatorEndsSessions:
                // The sessions page's "everywhere" and the console's "end all": each session of the person, one by one.
                for session in try await store.sessions(subject: sub, now: now) { #expect(try await store.deleteSession(idHash: session.idHash)) }
            case .consentRevoked, .accountDelete:
                #expect(try await store.apply(try Records.notification(write == .consentRevoked ? "consent-revoked" : "account-delete", sub: sub), receivedAt: now) == .applied)
            case .emailDisabled:
                #expect(try await store.apply(try Records.notification("email-disabled", sub: sub), receivedAt: now) == .applied)
                ended = []
                #expect(store.cachedSession(idHash: phone, now: now)?.1.emailForwardingDisabled != false, "the page still shows forwarding on")
                #expect(try await store.session(idHash: phone, now: now)?.1.emailForwardingDisabled == true)
            case .deletion:
                // `AccountLifecycle.delete`: the person deletes their account.
                _ = try await store.deleteUser(subject: sub, tombstone: false, at: now)
            case .refreshCheckFailed:
                // `AccountLifecycle`'s daily check: Apple no longer knows the refresh token.
                try await store.revokeLink(subject: sub, at: now)
            case .signInAgain:
                // A later sign-in whose identity token carries another address (the name of the first sign-in is kept).
                _ = try await store.completeSignIn(Records.signIn(sub, at: now, sessionID: "tablet", email: "augusta@example.org", firstName: "Augusta"))
                ended = []
                #expect(store.cachedSession(idHash: phone, now: now).map { $0.1.email == "augusta@example.org" } ?? true, "the page still shows the old address")
                #expect(try await store.session(idHash: phone, now: now)?.1.email == "augusta@example.org")
                #expect(try await store.session(idHash: phone, now: now)?.1.firstName == "Ada")
            case .teamTransfer:
                // A sign-in under the new team's sub takes the old user over: what memory holds of anyone is forgotten.
                try await store.setTransferSubject("transfer-" + sub, for: sub)
                let renamed = Records.subject()
                _ = try await store.completeSignIn(Records.signIn(renamed, at: now, sessionID: "new-team", transferSubject: "transfer-" + sub))
                ended = []
                for idHash in [phone, laptop, other] { #expect(store.cachedSession(idHash: idHash, now: now) == nil) }
                #expect(try await store.session(idHash: phone, now: now)?.1.subject == renamed)
            }
            for idHash in ended {
                #expect(store.cachedSession(idHash: idHash, now: now) == nil, "an ended session is still held in memory")
                #expect(try await store.session(idHash: idHash, now: now) == nil)
            }
            // Someone else's session is not disturbed (a transfer forgets everyone, who is then read again).
            #expect(try await store.session(idHash: other, now: now)?.1.firstName == "Grace")
            if write != .teamTransfer { #expect(store.cachedSession(idHash: other, now: now) != nil) }
        }
    }

    @Test("a burst of more look-ups than the bound, of sessions that exist, all find their session", arguments: StoreKind.allCases)
    func burstOfRealSessionsAllSucceeds(_ kind: StoreKind) async throws {
        // Twice the old fixed bound (64, past which a look-up was refused at once), more than the bound (three times the
        // pool): visitors behind four addresses, all at once.
        let cookies = (0..<128).map { "burst-\($0)" }
        try await Self.withSlowStore(kind, sessions: cookies, delay: .milliseconds(10)) { store, backend, now in
            let found = try await withThrowingTaskGroup(of: Bool.self) { group in
                for (index, cookie) in cookies.enumerated() {
                    group.addTask { try await store.session(idHash: SignInFlow.hash(cookie), now: now, askedBy: "198.51.100.\(index % 4)") != nil }
                }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            #expect(found == cookies.count)
            #expect(backend.most > 1)
            #expect(backend.most <= store.lookups.limit, "more look-ups handed to the store at once than the bound")
        }
    }

    @Test("many look-ups of one cookie at once (an HTTP/2 client's streams, a page's parallel requests, as the cookie's time in memory ends) ask the store once, and all find the session: before, each took a place, and past the line they were refused", arguments: StoreKind.allCases)
    func lookUpsOfOneCookieShareOneRead(_ kind: StoreKind) async throws {
        try await Self.withSlowStore(kind, sessions: ["shared-cookie"], delay: .milliseconds(50)) { store, backend, now in
            // More than the line holds, all from one address.
            let count = store.lookups.share + store.lookups.lineLimit + 50
            let found = try await withThrowingTaskGroup(of: Bool.self) { group in
                for _ in 0..<count {
                    group.addTask { try await store.session(idHash: SignInFlow.hash("shared-cookie"), now: now, askedBy: "198.51.100.7") != nil }
                }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            #expect(found == count)
            #expect(backend.reads == 1, "the store was asked \(backend.reads) times")
        }
    }

    @Test("a look-up that begins after a write has committed (the session ended) does not join a read of the same cookie that began before it: it finds no session", arguments: StoreKind.allCases)
    func lookUpAfterWriteDoesNotJoinEarlierRead(_ kind: StoreKind) async throws {
        try await Self.withSlowStore(kind, sessions: ["ending"], delay: .milliseconds(800), readsBeforeDelay: true) { store, backend, now in
            let hash = SignInFlow.hash("ending")
            let early = Task { try await store.session(idHash: hash, now: now, askedBy: "198.51.100.1") }
            // Once the early look-up has read the session (its read then takes 800 ms more), the session ends.
            while backend.reads == 0 { try await Task.sleep(for: .milliseconds(5)) }
            try await Task.sleep(for: .milliseconds(100))
            #expect(try await store.deleteSession(idHash: hash))
            let late = try await store.session(idHash: hash, now: now, askedBy: "198.51.100.1")
            #expect(late == nil, "a look-up after the session ended found it")
            _ = try await early.value
        }
    }

    @Test("a flood of made-up cookies from one address neither starves other addresses nor hands the store more than the bound", arguments: StoreKind.allCases)
    func floodFromOneAddress(_ kind: StoreKind) async throws {
        let visitors = (0..<30).map { "visitor-\($0)" }
        try await Self.withSlowStore(kind, sessions: visitors, delay: .milliseconds(20)) { store, backend, now in
            let flooding = Shared(true)
            let refused = Shared(0)
            // More look-ups at once than its share of the places and of the line, all the time, from one address, each
            // of a new made-up cookie; one refused tries again after a moment.
            let flood = Task {
                await withTaskGroup(of: Void.self) { group in
                    for _ in 0..<(store.lookups.share + store.lookups.lineShare + 20) {
                        group.addTask {
                            while flooding.value {
                                do {
                                    _ = try await store.session(idHash: SignInFlow.hash("made-up-" + Support.randomHex()), now: now, askedBy: "203.0.113.66")
                                } catch {
                                    refused.change { $0 += 1 }
                                    try? await Task.sleep(for: .milliseconds(5))
                                }
                            }
                        }
                    }
                }
            }
            try await Task.sleep(for: .milliseconds(200))
            // Meanwhile three other addresses each look their visitors' sessions up, one after the other.
            let found = try await withThrowingTaskGroup(of: Int.self) { group in
                for address in 0..<3 {
                    group.addTask {
                        var found = 0
                        for (index, cookie) in visitors.enumerated() where index % 3 == address {
                            if try await store.session(idHash: SignInFlow.hash(cookie), now: now, askedBy: "198.51.100.\(address)") != nil { found += 1 }
                        }
                        return found
                    }
                }
                return try await group.reduce(0, +)
            }
            flooding.change { $0 = false }
            await flood.value
            #expect(found == visitors.count, "other addresses' look-ups were refused during the flood")
            #expect(refused.value > 0, "the flood was never turned away, so it did not test the bound")
            #expect(backend.most <= store.lookups.limit, "more look-ups handed to the store at once than the bound")
            #expect(backend.mostMadeUp <= store.lookups.share, "one address held more than its share of the places")
        }
    }

    /// Runs `body` with the cache layer over a fresh store of `kind` whose session reads take `delay` longer, holding a
    /// session for each cookie of `sessions`.
    static func withSlowStore(
        _ kind: StoreKind, sessions cookies: [String], delay: Duration, readsBeforeDelay: Bool = false,
        _ body: (SessionCachedStore, SlowReads, Date) async throws -> Void
    ) async throws {
        try await StoreFixture.with(kind) { fixture in
            let now = Support.now()
            for cookie in cookies { _ = try await fixture.store.backend.completeSignIn(Records.signIn(Records.subject(), at: now, sessionID: cookie)) }
            let backend = SlowReads(fixture.store.backend, delay: delay, real: cookies, readsBeforeDelay: readsBeforeDelay)
            // The line's wait is long here: these tests are about who gets a place, not about how long one waits (under
            // the full suite's load, 1 s went by in line with the reads slowed).
            let store = SessionCachedStore(backend, cache: SessionCache(lifetime: 600), lookupWait: .seconds(60), logger: Support.logger("test.cache"))
            try await body(store, backend, now)
        }
    }
}

/// A backend whose session reads take `delay` longer, counting how many are at the database at once, all together and
/// of the cookies it was told are real or not.
final class SlowReads: StoreLayer {
    let backend: any SignInStore
    let delay: Duration
    private let real: Set<String>
    private let counts = Mutex<(now: [Bool: Int], most: [Bool: Int], all: Int, mostAll: Int, reads: Int)>(([:], [:], 0, 0, 0))

    /// Reads, then waits `delay` (else waits, then reads).
    let readsBeforeDelay: Bool

    /// `real`: the session cookies that exist (values, not hashes).
    init(_ backend: any SignInStore, delay: Duration, real: [String], readsBeforeDelay: Bool = false) {
        self.backend = backend
        self.delay = delay
        self.real = Set(real.map(SignInFlow.hash))
        self.readsBeforeDelay = readsBeforeDelay
    }

    /// The most session reads at once.
    var most: Int { counts.withLock { $0.mostAll } }

    /// Session reads, all told.
    var reads: Int { counts.withLock { $0.reads } }

    /// The most reads at once of cookies that are not sessions.
    var mostMadeUp: Int { counts.withLock { $0.most[false] ?? 0 } }

    func session(idHash: String, now: Date) async throws -> (SessionRecord, UserRecord)? {
        let isReal = real.contains(idHash)
        counts.withLock { counts in
            counts.reads += 1
            counts.all += 1
            counts.mostAll = max(counts.mostAll, counts.all)
            counts.now[isReal, default: 0] += 1
            counts.most[isReal] = max(counts.most[isReal] ?? 0, counts.now[isReal] ?? 0)
        }
        defer {
            counts.withLock { counts in
                counts.all -= 1
                counts.now[isReal, default: 0] -= 1
            }
        }
        if readsBeforeDelay {
            let found = try await backend.session(idHash: idHash, now: now)
            try await Task.sleep(for: delay)
            return found
        }
        try await Task.sleep(for: delay)
        return try await backend.session(idHash: idHash, now: now)
    }
}

