import Synchronization

/// Counts requests a test server received, safely across its handler tasks.
final class Counter: Sendable {
    private let value = Mutex(0)
    func increment() { value.withLock { $0 += 1 } }
    var count: Int { value.withLock { $0 } }
}

/// Holds tasks until `parties` of them have arrived, then releases them all at once.
final class StartingGate: Sendable {
    private struct State {
        var arrived = 0
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private let parties: Int
    private let state = Mutex(State())

    init(parties: Int) { self.parties = parties }

    func arrive() async {
        await withCheckedContinuation { continuation in
            let release: [CheckedContinuation<Void, Never>] = state.withLock { state in
                state.arrived += 1
                state.waiting.append(continuation)
                guard state.arrived >= parties else { return [] }
                defer { state.waiting = [] }
                return state.waiting
            }
            for waiter in release { waiter.resume() }
        }
    }
}
