import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// `upstream_max_connections`: how many requests (and WebSockets) may be at the upstream at once, on both carriers
/// together, each holding one connection. One more waits in line for a place, up to as many waiting as there are
/// places, for at most `upstream_timeout_ms`; past the line, or after the wait, the client gets the 503 page and the
/// upstream nothing. siwa's other clients (its own pages, checks, requests whose place came) do not notice.
final class UpstreamAdmission: Sendable {
    /// How many may be at the upstream at once (and how many may wait).
    let limit: Int

    private struct Waiter {
        let id: UInt64
        let resume: @Sendable (Bool) -> Void
    }

    private struct State {
        var inUse = 0
        var waiting: [Waiter] = []
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())

    init(limit: Int) {
        self.limit = limit
    }

    /// How many are at the upstream now (for the tests and metrics).
    var inUse: Int { state.withLock { $0.inUse } }

    /// Takes a place when one is free, without waiting (the byte path's way in: most requests find one).
    func tryEnter() -> Bool {
        state.withLock { state in
            guard state.inUse < limit else { return false }
            state.inUse += 1
            return true
        }
    }

    /// Asks for a place: `resume(true)` once there is one, at once when one is free; `resume(false)` at once when the
    /// line is full. Returns the ticket of a request that waits (for `giveUp`), nil when `resume` was called.
    func enter(_ resume: @escaping @Sendable (Bool) -> Void) -> UInt64? {
        enum Outcome { case admitted, refused, waiting(UInt64) }
        let outcome = state.withLock { state -> Outcome in
            if state.inUse < limit {
                state.inUse += 1
                return .admitted
            }
            guard state.waiting.count < limit else { return .refused }
            state.nextID &+= 1
            state.waiting.append(Waiter(id: state.nextID, resume: resume))
            return .waiting(state.nextID)
        }
        switch outcome {
        case .admitted:
            resume(true)
            return nil
        case .refused:
            resume(false)
            return nil
        case .waiting(let id):
            return id
        }
    }

    /// Stops waiting for the place of `ticket`: true when it was still waiting (it will not be resumed), false when
    /// its place came meanwhile (it was, or is being, resumed with `true`, and must `leave`).
    func giveUp(_ ticket: UInt64) -> Bool {
        state.withLock { state in
            guard let index = state.waiting.firstIndex(where: { $0.id == ticket }) else { return false }
            state.waiting.remove(at: index)
            return true
        }
    }

    /// Frees a place, which goes to the first in line if any.
    func leave() {
        let next = state.withLock { state -> Waiter? in
            if !state.waiting.isEmpty { return state.waiting.removeFirst() }
            state.inUse = max(0, state.inUse - 1)
            return nil
        }
        next?.resume(true)
    }

    /// A place, waiting for one for at most `timeout`; nil when none came (the line was full, or the wait too long).
    /// The place is freed when the returned pass is let go.
    func pass(waitingAtMost timeout: TimeAmount) async -> Pass? {
        let once = ResumeOnce()
        let admitted = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            once.set(continuation)
            if let ticket = enter({ once.resume($0) }) {
                let timer = MultiThreadedEventLoopGroup.singleton.any().scheduleTask(in: timeout) {
                    if self.giveUp(ticket) { once.resume(false) }
                }
                once.onResume { timer.cancel() }
            }
        }
        return admitted ? Pass(self) : nil
    }

    /// A place at the upstream, freed when let go (by whatever held it last: the answer's body, the WebSocket relay).
    final class Pass: Sendable {
        private let admission: UpstreamAdmission
        init(_ admission: UpstreamAdmission) { self.admission = admission }
        deinit { admission.leave() }
    }
}

/// A continuation resumed once, whoever comes first (the place, or the wait's end).
private final class ResumeOnce: Sendable {
    private let state = Mutex<(continuation: CheckedContinuation<Bool, Never>?, value: Bool?, after: (@Sendable () -> Void)?)>((nil, nil, nil))

    func set(_ continuation: CheckedContinuation<Bool, Never>) {
        let early = state.withLock { state -> Bool? in
            if let value = state.value { return value }
            state.continuation = continuation
            return nil
        }
        if let early { continuation.resume(returning: early) }
    }

    func resume(_ value: Bool) {
        let (continuation, after) = state.withLock { state -> (CheckedContinuation<Bool, Never>?, (@Sendable () -> Void)?) in
            guard state.value == nil else { return (nil, nil) }
            state.value = value
            defer { state.continuation = nil }
            return (state.continuation, state.after)
        }
        after?()
        continuation?.resume(returning: value)
    }

    /// Runs `action` once resumed (at once if already).
    func onResume(_ action: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            if state.value != nil { return true }
            state.after = action
            return false
        }
        if now { action() }
    }
}
