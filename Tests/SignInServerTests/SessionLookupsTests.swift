import Foundation
@testable import SignInServer
import Synchronization
import Testing

/// Look-ups of session cookies not in memory (`SessionCache.lookUpMissing`): what keeps a flood of made-up cookies
/// from driving the database at line rate.
@Suite("Session look-ups of cookies not in memory: bounded at once, unknown ones remembered briefly")
struct SessionLookupsTests {
    @Test("a cookie the database did not know is not asked about again while remembered, and is asked about once that has passed")
    func unknownCookiesAreRemembered() async throws {
        let cache = SessionCache(lifetime: 5, capacity: 100, missLimit: 4)
        let reads = Mutex(0)
        let now = Date()
        for offset in [0.0, 1, 4.9] {
            let found = try await cache.lookUpMissing("made-up", now: now + offset) {
                reads.withLock { $0 += 1 }
                return nil
            }
            #expect(found == nil)
        }
        #expect(reads.withLock { $0 } == 1, "the database was asked again about a cookie it did not know")
        _ = try await cache.lookUpMissing("made-up", now: now + 5.1) {
            reads.withLock { $0 += 1 }
            return nil
        }
        #expect(reads.withLock { $0 } == 2)
    }

    @Test("past missLimit look-ups at the database at once, one more is refused (a 503), and the next after one ends is made")
    func lookUpsAtOnceAreBounded() async throws {
        let cache = SessionCache(lifetime: 5, capacity: 100, missLimit: 1)
        let (entered, enteredContinuation) = AsyncStream<Void>.makeStream()
        let (release, releaseContinuation) = AsyncStream<Void>.makeStream()
        let held = Task {
            try await cache.lookUpMissing("slow", now: Date()) {
                enteredContinuation.yield()
                for await _ in release { break }
                return nil
            }
        }
        for await _ in entered { break }
        await #expect(throws: SessionLookupsBusy.self) {
            _ = try await cache.lookUpMissing("other", now: Date()) { nil }
        }
        releaseContinuation.yield()
        _ = try await held.value
        let after = try await cache.lookUpMissing("other", now: Date()) { nil }
        #expect(after == nil)
    }
}
