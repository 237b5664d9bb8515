import AppleSignIn
import Foundation
@testable import SignInServer
import Testing

/// Single use under concurrency, on both stores: of many callers racing for the same thing, exactly one wins.
@Suite("Store concurrency")
struct StoreConcurrencyTests {
    @Test("50 parallel callbacks with the same state: exactly one gets the pending sign-in", arguments: StoreKind.allCases)
    func parallelConsumePending(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            let pending = Records.pending(at: now)
            try await store.savePending(pending)
            let results = try await withThrowingTaskGroup(of: PendingAuthorization?.self) { group in
                for _ in 0..<50 {
                    group.addTask { try await store.consumePending(state: pending.state, now: now) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(results.count == 50)
            #expect(results.compactMap { $0 } == [pending])
        }
    }

    @Test("50 parallel deliveries of the same notification: exactly one is applied", arguments: StoreKind.allCases)
    func parallelApply(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let sub = Records.subject()
            let now = Support.now()
            _ = try await store.completeSignIn(Records.signIn(sub, at: now, refreshToken: "rt"))
            let notification = try Records.notification("consent-revoked", sub: sub)
            let outcomes = try await withThrowingTaskGroup(of: NotificationOutcome.self) { group in
                for _ in 0..<50 {
                    group.addTask { try await store.apply(notification, receivedAt: now) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(outcomes.filter { $0 == .applied }.count == 1)
            #expect(outcomes.filter { $0 == .duplicate }.count == 49)
            #expect(try await fixture.sql.count("notifications") == 1)
            #expect(try await fixture.sql.count("sessions", sub: sub) == 0)
        }
    }

    @Test("20 parallel claims of due refresh checks: each due token is claimed exactly once", arguments: StoreKind.allCases)
    func parallelClaimRefreshChecks(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            var subjects: [String] = []
            for index in 0..<30 {
                let sub = Records.subject()
                subjects.append(sub)
                _ = try await store.completeSignIn(Records.signIn(sub, at: now.addingTimeInterval(Double(index)), refreshToken: "rt-\(index)"))
            }
            // One more that is not due yet.
            _ = try await store.completeSignIn(Records.signIn(Records.subject(), at: now.addingTimeInterval(86_400), refreshToken: "rt-later"))
            let checkTime = now.addingTimeInterval(86_400 + 120)
            let claims = try await withThrowingTaskGroup(of: [RefreshCheck].self) { group in
                for _ in 0..<20 {
                    group.addTask { try await store.claimRefreshChecks(now: checkTime, limit: 4) { checkTime.addingTimeInterval(86_400) } }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let claimed = claims.flatMap { $0 }.map(\.subject)
            #expect(claimed.count == 30)
            #expect(Set(claimed) == Set(subjects))
            #expect(claims.allSatisfy { $0.count <= 4 })
            #expect(try await store.claimRefreshChecks(now: checkTime, limit: 100) { checkTime.addingTimeInterval(86_400) }.isEmpty)
        }
    }
}
