import Synchronization

/// Runs `operation`, giving up with `timeoutError` after `timeout`.
///
/// Not a task group: a group waits for every child before it returns, so an operation that neither finishes nor
/// honours cancellation (a PostgreSQL connection dropped mid-transaction, found by the soak test) would hold the
/// request forever. The operation runs in its own task; whichever of it and the timer finishes first answers,
/// and the other is cancelled and left to end on its own.
func withDeadline<T: Sendable>(
    _ timeout: Duration, onTimeout timeoutError: any Error & Sendable, _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    let outcome = FirstOutcome<T>()
    let work = Task { try await operation() }
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            outcome.install(continuation)
            let timer = Task {
                try await Task.sleep(for: timeout)
                outcome.finish(.failure(timeoutError))
                work.cancel()
            }
            Task {
                let result = await work.result
                timer.cancel()
                outcome.finish(result)
            }
        }
    } onCancel: {
        work.cancel()
        outcome.finish(.failure(CancellationError()))
    }
}

/// The first of several outcomes, delivered once to a continuation that may be installed before or after it.
private final class FirstOutcome<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var result: Result<T, any Error>?
        var delivered = false
    }

    private let state = Mutex(State())

    func install(_ continuation: CheckedContinuation<T, any Error>) {
        let ready: Result<T, any Error>? = state.withLock { state in
            if let result = state.result, !state.delivered {
                state.delivered = true
                return result
            }
            state.continuation = continuation
            return nil
        }
        if let ready { continuation.resume(with: ready) }
    }

    func finish(_ result: Result<T, any Error>) {
        let continuation: CheckedContinuation<T, any Error>? = state.withLock { state in
            guard !state.delivered, state.result == nil else { return nil }
            state.result = result
            guard let continuation = state.continuation else { return nil }
            state.delivered = true
            state.continuation = nil
            return continuation
        }
        continuation?.resume(with: result)
    }
}
