import Dispatch
import Foundation
@testable import SignInServer
import Testing

/// The bounded wait every PostgreSQL operation goes through (a request gets a 503 instead of hanging).
@Suite("Deadlines on store operations")
struct DeadlineTests {
    struct Timeout: Error, Equatable {}
    struct Refused: Error, Equatable {}

    @Test("an operation that ignores cancellation and does not end still gets an answer at the deadline")
    func stuckOperation() async throws {
        let clock = ContinuousClock()
        let start = clock.now
        await #expect(throws: Timeout.self) {
            try await withDeadline(.milliseconds(300), onTimeout: Timeout()) { () async throws -> Int in
                // Like a connection PostgreSQL dropped mid-transaction: ten minutes' wait that ignores cancellation
                // (a timer on a dispatch queue, so no thread is held meanwhile; a Task.sleep loop would spin once
                // cancelled).
                await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
                    DispatchQueue.global().asyncAfter(deadline: .now() + 600) { continuation.resume() }
                }
                return 1
            }
        }
        // Far below the operation's ten minutes, with room for a CI run whose threads are busy with other suites
        // (46 s was seen there; alone it answers in 0.3 s).
        #expect(clock.now - start < .seconds(300), "answered after \(clock.now - start)")
    }

    @Test("a result or an error before the deadline is passed through unchanged")
    func passThrough() async throws {
        #expect(try await withDeadline(.seconds(8), onTimeout: Timeout()) { 42 } == 42)
        await #expect(throws: Refused.self) {
            try await withDeadline(.seconds(8), onTimeout: Timeout()) { () async throws -> Int in throw Refused() }
        }
    }
}
