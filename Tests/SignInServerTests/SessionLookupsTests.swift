import Foundation
import NIOCore
@testable import SignInServer
import Synchronization
import TestSupport
import Testing

/// Look-ups of session cookies not in memory (`SessionLookups`, `SessionCache`): what keeps a flood of made-up
/// cookies from driving the database, without turning away the people whose sessions exist.
@Suite("Session look-ups of cookies not in memory: a bounded line, shared out by address; unknown ones remembered")
struct SessionLookupsTests {
    @Test("a cookie the database did not know is remembered for the cache's lifetime, then asked about again")
    func unknownCookiesAreRemembered() {
        let cache = SessionCache(lifetime: 5, capacity: 100)
        let now = Date()
        #expect(!cache.isUnknown("made-up", now: now))
        cache.rememberUnknown("made-up", now: now)
        for offset in [0.0, 1, 4.9] {
            #expect(cache.isUnknown("made-up", now: now + offset), "the database would be asked again about a cookie it did not know")
        }
        #expect(!cache.isUnknown("made-up", now: now + 5.1))
        // A lifetime of 0 keeps nothing.
        let none = SessionCache(lifetime: 0, capacity: 100)
        none.rememberUnknown("made-up", now: now)
        #expect(!none.isUnknown("made-up", now: now))
    }

    @Test("a flood of made-up cookies, each asked about once, does not push out a cookie that comes back")
    func floodKeepsCookiesThatComeBack() {
        let cache = SessionCache(lifetime: 5, capacity: 100)
        let now = Date()
        cache.rememberUnknown("stale-browser-cookie", now: now)
        #expect(cache.isUnknown("stale-browser-cookie", now: now + 0.1))
        for index in 0..<1_000 {
            cache.rememberUnknown("random-\(index)", now: now + 0.2)
        }
        #expect(cache.isUnknown("stale-browser-cookie", now: now + 0.3), "ten times the capacity of one-off cookies pushed out one that came back")
        // The flood itself is bounded, newest kept: the oldest one-off cookies went first.
        #expect(cache.isUnknown("random-999", now: now + 0.3))
        #expect(!cache.isUnknown("random-0", now: now + 0.3))
    }

    @Test("a full cache forgets its oldest sessions, not all of them at once")
    func fullCacheForgetsOldestFirst() {
        let cache = SessionCache(lifetime: 5, capacity: 3)
        let now = Date()
        for index in 0..<4 {
            cache.store(Self.found("s\(index)"), readAt: cache.generation, now: now + Double(index) * 0.1)
        }
        #expect(cache.lookup("s0", now: now + 1) == nil)
        for index in 1..<4 {
            #expect(cache.lookup("s\(index)", now: now + 1) != nil, "session s\(index) was forgotten with the oldest")
        }
        cache.forget(.subject("person-s2"))
        #expect(cache.lookup("s2", now: now + 1) == nil)
        #expect(cache.lookup("s3", now: now + 1) != nil)
    }

    @Test("a look-up past the places waits in line for one instead of being refused, and gets it when one frees")
    func pastThePlacesWaits() async throws {
        let lookups = SessionLookups(pool: 1, maxWait: .seconds(60))
        let gate = Gate()
        let held = Self.holdAllPlaces(lookups, until: gate)
        try await Self.until { lookups.load.atDatabase == lookups.limit }
        let waiting = Task { try await lookups.run(for: "b") { "made" } }
        try await Self.until { lookups.load.waiting == 1 }
        gate.open()
        #expect(try await waiting.value == "made")
        for task in held { try await task.value }
        #expect(lookups.load == (0, 0))
    }

    @Test("the line is bounded in length (the look-up after it is refused at once) and in time (a wait past maxWait is refused)")
    func lineIsBounded() async throws {
        // A wait of 3 s: every one of the 64 in line must have joined it before the first one's wait is over, for the
        // full line to be seen (200 ms left that to the scheduler under the full suite's load).
        let lookups = SessionLookups(pool: 2, maxWait: .seconds(3))
        let gate = Gate()
        // The places taken, then the line filled from two addresses (each holds at most `lineShare` of it).
        var tasks = Self.holdAllPlaces(lookups, until: gate)
        try await Self.until { lookups.load.atDatabase == lookups.limit }
        for client in ["a", "b"] {
            for _ in 0..<lookups.lineShare {
                tasks.append(Task { try await lookups.run(for: client) { await gate.wait() } })
            }
        }
        try await Self.until { lookups.load == (lookups.limit, lookups.lineLimit) }
        await #expect(throws: SessionLookupsBusy.self) {
            try await lookups.run(for: "c") {}
        }
        // Nobody leaves the database: every one in line is refused once its wait (3 s) is over, not when a place
        // frees (the gate stays shut). `until` gives it 30 s, which is the bound: under the full suite's load the
        // refusals once took 4.4 s to all be seen, so no tighter bound is asserted here.
        try await Self.until { lookups.load.waiting == 0 }
        gate.open()
        var refused = 0
        for task in tasks {
            if case .failure(let error) = await task.result {
                #expect(error is SessionLookupsBusy)
                refused += 1
            }
        }
        #expect(refused == lookups.lineLimit)
        #expect(lookups.load == (0, 0))
    }

    @Test("one address holds at most its share of the places and of the line; another address still gets a place at once")
    func oneAddressCannotTakeTheWholeBound() async throws {
        let lookups = SessionLookups(pool: 2, maxWait: .seconds(60))
        let gate = Gate()
        var flood: [Task<Void, any Error>] = []
        for _ in 0..<(lookups.share + lookups.lineShare) {
            flood.append(Task { try await lookups.run(for: "flood") { await gate.wait() } })
        }
        try await Self.until { lookups.load == (lookups.share, lookups.lineShare) }
        #expect(lookups.share < lookups.limit && lookups.lineShare < lookups.lineLimit)
        // More from the same address: refused at once, whatever room is left for others.
        await #expect(throws: SessionLookupsBusy.self) {
            try await lookups.run(for: "flood") {}
        }
        // Someone else: straight to the database, past the flood's line.
        #expect(try await lookups.run(for: "visitor") { "made" } == "made")
        gate.open()
        for task in flood { try await task.value }
        #expect(lookups.load == (0, 0))
    }

    @Test("a freed place goes to the addresses in line in turn, not to whoever queued the most")
    func freedPlacesGoRoundTheAddresses() async throws {
        let lookups = SessionLookups(pool: 1, maxWait: .seconds(60))
        let order = Shared<[String]>([])
        let gate = Gate()
        // Every place taken; then 10 of "flood" wait, then one of "visitor".
        let holders = Self.holdAllPlaces(lookups, until: gate)
        try await Self.until { lookups.load.atDatabase == lookups.limit }
        var waiters: [Task<Void, any Error>] = []
        for _ in 0..<10 {
            waiters.append(Task { try await lookups.run(for: "flood") { order.change { $0.append("flood") } } })
        }
        try await Self.until { lookups.load.waiting == 10 }
        waiters.append(Task { try await lookups.run(for: "visitor") { order.change { $0.append("visitor") } } })
        try await Self.until { lookups.load.waiting == 11 }
        gate.open()
        for task in holders + waiters { try await task.value }
        let served = order.value
        #expect(served.count == 11)
        #expect((served.firstIndex(of: "visitor") ?? 99) <= 2, "the visitor waited behind the flood: \(served)")
    }

    @Test("a look-up whose request went away leaves the line")
    func cancelledLookUpLeavesTheLine() async throws {
        let lookups = SessionLookups(pool: 1, maxWait: .seconds(30))
        let gate = Gate()
        let held = Self.holdAllPlaces(lookups, until: gate)
        try await Self.until { lookups.load.atDatabase == lookups.limit }
        let waiting = Task { try await lookups.run(for: "b") {} }
        try await Self.until { lookups.load.waiting == 1 }
        waiting.cancel()
        await #expect(throws: SessionLookupsBusy.self) { try await waiting.value }
        #expect(lookups.load.waiting == 0)
        gate.open()
        for task in held { try await task.value }
    }

    // MARK: helpers

    /// Takes every place, each for another address, until `gate` opens.
    static func holdAllPlaces(_ lookups: SessionLookups, until gate: Gate) -> [Task<Void, any Error>] {
        (0..<lookups.limit).map { index in Task { try await lookups.run(for: "holder\(index)") { await gate.wait() } } }
    }

    static func found(_ idHash: String) -> (SessionRecord, UserRecord) {
        let now = Date()
        let subject = "person-" + idHash
        return (
            SessionRecord(idHash: idHash, subject: subject, csrfToken: "csrf", createdAt: now, expiresAt: now + 3_600),
            UserRecord(subject: subject, email: nil, isPrivateEmail: false, firstName: nil, lastName: nil, createdAt: now, lastSignInAt: now, emailForwardingDisabled: false, linkRevokedAt: nil)
        )
    }

    /// Waits until `condition` holds (for at most 10 s: then the test fails).
    static func until(_ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while !condition() {
            guard ContinuousClock.now < deadline else {
                Issue.record("condition not reached within 30 s")
                return
            }
            try await Task.sleep(for: .milliseconds(2))
        }
    }
}

/// Holds look-ups "at the database" until opened.
final class Gate: Sendable {
    private let state = Mutex<(open: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

    func wait() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.open { return true }
                state.waiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    func open() {
        let waiting = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.open = true
            defer { state.waiting = [] }
            return state.waiting
        }
        for continuation in waiting { continuation.resume() }
    }
}
