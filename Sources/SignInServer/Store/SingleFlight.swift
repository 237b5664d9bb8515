import Synchronization

/// One run at a time per key: a caller that finds a run of its key in progress waits for that run's result (or error)
/// instead of starting its own. The run is a task of its own, so a caller that goes away (its client gone) leaves the
/// others their result.
final class SingleFlight<Value: Sendable>: Sendable {
    private let runs = Mutex<[String: Task<Value, any Error>]>([:])

    func run(_ key: String, _ body: @escaping @Sendable () async throws -> Value) async throws -> Value {
        let task = runs.withLock { runs -> Task<Value, any Error> in
            if let running = runs[key] { return running }
            // Registered before it can end: its own removal takes the same lock.
            let task = Task {
                defer { self.runs.withLock { _ = $0.removeValue(forKey: key) } }
                return try await body()
            }
            runs[key] = task
            return task
        }
        return try await task.value
    }
}
