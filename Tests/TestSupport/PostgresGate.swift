/// Tests share the one PostgreSQL server `scripts/test` starts; the test that restarts it must have it alone. Every
/// test target runs in the same process, so the gate lives here: a test of any target that uses the server holds it
/// shared (`TestPostgres.withFreshDatabase`, and the end-to-end tests that start `siwa serve` on it), and the restart
/// test holds it exclusively.
public actor PostgresGate {
    public static let shared = PostgresGate()

    private var readers = 0
    private var writer = false
    private var waiting: [(exclusive: Bool, continuation: CheckedContinuation<Void, Never>)] = []

    /// Runs `body` holding the gate shared or exclusively.
    public nonisolated func with<T: Sendable>(exclusive: Bool, _ body: () async throws -> T) async throws -> T {
        await acquire(exclusive: exclusive)
        do {
            let value = try await body()
            await release(exclusive: exclusive)
            return value
        } catch {
            await release(exclusive: exclusive)
            throw error
        }
    }

    private func acquire(exclusive: Bool) async {
        if waiting.isEmpty && grantable(exclusive) {
            take(exclusive)
            return
        }
        await withCheckedContinuation { waiting.append((exclusive, $0)) }
    }

    private func release(exclusive: Bool) {
        if exclusive { writer = false } else { readers -= 1 }
        // First come, first served: a waiting writer holds back later readers, so it is not starved.
        while let next = waiting.first, grantable(next.exclusive) {
            waiting.removeFirst()
            take(next.exclusive)
            next.continuation.resume()
        }
    }

    private func grantable(_ exclusive: Bool) -> Bool {
        exclusive ? !writer && readers == 0 : !writer
    }

    private func take(_ exclusive: Bool) {
        if exclusive { writer = true } else { readers += 1 }
    }
}
