import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// How many look-ups of session cookies not in memory go to the database at once, shared out among the clients
/// that ask.
///
/// At most `limit` at once: three times the store's pool (`pool`: PostgreSQL's connections, SQLite's readers), so that
/// the pool always has the next look-up ready when a connection frees. With exactly the pool, connections went idle
/// between look-ups: fewer look-ups a second, and postgres-nio starts keep-alive and idle timers each time a connection
/// parks, whose memory stays until they would have fired (siwa grew from 80 to 210 MB in 30 s of look-ups). One more
/// waits in a line for a place, up to `lineLimit` waiting, for at most `maxWait`; past the line, or after the wait, it
/// is refused (`SessionLookupsBusy`, the 503 page). Of both, one client address holds at most its share (`share`
/// places, two thirds; `lineShare` in line, half), and a freed place goes to the addresses in line in turn, so a flood
/// of made-up cookies from one address costs the database a bounded number of queries at once and leaves the rest of
/// the places and of the line to everyone else; a burst of real visitors waits a moment instead of being turned away.
/// Unknown cookies asked about again never get here (`SessionCache.isUnknown`).
final class SessionLookups: Sendable {
    /// How many may be handed to the store at once.
    let limit: Int
    /// How many may wait for a place.
    let lineLimit: Int
    /// How many of the places, and of the line, one address may hold.
    let share: Int
    let lineShare: Int
    /// How long one may wait for a place.
    let maxWait: TimeAmount

    /// Each connection (or reader) of the store's pool has this many look-ups in line for it at most: at a millisecond
    /// or two a look-up, a full line clears well within `maxWait`.
    static let waitingPerConnection = 32

    private struct Waiter {
        let ticket: UInt64
        let continuation: CheckedContinuation<Bool, Never>
        /// When it is refused if no place came.
        let deadline: NIODeadline
    }

    private struct State {
        var atDatabase = 0
        var byAddress: [String: (atDatabase: Int, waiting: Int)] = [:]
        /// Each address's waiters, first come first.
        var lines: [String: [Waiter]] = [:]
        /// The addresses with waiters, in the order a freed place goes round them.
        var turn: [String] = []
        var waiting = 0
        var nextTicket: UInt64 = 0
        /// One timer for the whole line, due when the waiter in line longest is: a timer per waiter cost two wake-ups
        /// of an event loop per look-up that waited.
        var timerArmed = false
    }

    private let state = Mutex(State())

    /// Look-ups for a store whose pool runs `pool` queries at once.
    init(pool: Int, maxWait: TimeAmount = .seconds(1)) {
        let pool = max(1, pool)
        limit = 3 * pool
        share = 2 * pool
        lineLimit = Self.waitingPerConnection * pool
        lineShare = lineLimit / 2
        self.maxWait = maxWait
    }

    /// How many are at the database, and how many wait, now.
    var load: (atDatabase: Int, waiting: Int) { state.withLock { ($0.atDatabase, $0.waiting) } }

    /// Runs `read` once a place at the database is free for `client`, waiting for one in line if need be;
    /// `SessionLookupsBusy` when the line (or the client's share of it) is full or no place came within `maxWait`.
    func run<T>(for client: String, _ read: () async throws -> T) async throws -> T {
        try await enter(client)
        defer { leave(client) }
        return try await read()
    }

    private func enter(_ client: String) async throws {
        enum Outcome { case admitted, refused, waiting(UInt64) }
        let outcome = state.withLock { state -> Outcome in
            let mine = state.byAddress[client, default: (0, 0)]
            if state.atDatabase < limit, mine.atDatabase < share, mine.waiting == 0 {
                state.atDatabase += 1
                state.byAddress[client] = (mine.atDatabase + 1, mine.waiting)
                return .admitted
            }
            guard state.waiting < lineLimit, mine.waiting < lineShare else { return .refused }
            // Its place in line is counted now, so that no more than the line's length can be let in at once.
            state.waiting += 1
            state.byAddress[client] = (mine.atDatabase, mine.waiting + 1)
            state.nextTicket &+= 1
            return .waiting(state.nextTicket)
        }
        switch outcome {
        case .admitted:
            return
        case .refused:
            throw SessionLookupsBusy(limit: limit, waiting: lineLimit)
        case .waiting(let ticket):
            let admitted = await withTaskCancellationHandler {
                await withCheckedContinuation { continuation in
                    queue(Waiter(ticket: ticket, continuation: continuation, deadline: .now() + maxWait), for: client)
                }
            } onCancel: {
                giveUp(ticket, client: client)
            }
            guard admitted else { throw SessionLookupsBusy(limit: limit, waiting: lineLimit) }
        }
    }

    /// Puts a waiter, already counted, in its address's line (and may admit it at once, if a place freed meanwhile),
    /// and sees that the line's timer runs.
    private func queue(_ waiter: Waiter, for client: String) {
        let (admitted, arm) = state.withLock { state -> ([Waiter], Bool) in
            if state.lines[client]?.isEmpty ?? true { state.turn.append(client) }
            state.lines[client, default: []].append(waiter)
            // Every waiter waits as long, so a timer already set for an earlier one comes first.
            let arm = !state.timerArmed
            state.timerArmed = true
            return (dispatch(&state), arm)
        }
        for next in admitted { next.continuation.resume(returning: true) }
        if arm { armTimer(at: waiter.deadline) }
        // A request that went away before it was in line (its cancellation found nothing to take out) leaves now.
        if Task.isCancelled { giveUp(waiter.ticket, client: client) }
    }

    private func armTimer(at deadline: NIODeadline) {
        MultiThreadedEventLoopGroup.singleton.any().scheduleTask(deadline: deadline) { self.expire() }
    }

    /// Refuses every waiter whose wait is over, and sets the timer again for the next one due.
    private func expire() {
        let now = NIODeadline.now()
        let (expired, next) = state.withLock { state -> ([Waiter], NIODeadline?) in
            var expired: [Waiter] = []
            var next: NIODeadline?
            for client in Array(state.lines.keys) {
                guard let line = state.lines[client] else { continue }
                // Each line is first come first served: its overdue waiters are at its front.
                let over = line.prefix { $0.deadline <= now }.count
                if over > 0 {
                    expired.append(contentsOf: line.prefix(over))
                    state.lines[client] = Array(line.dropFirst(over))
                    for _ in 0..<over { Self.leftLine(client, in: &state) }
                }
                if let first = state.lines[client]?.first?.deadline { next = min(next ?? first, first) }
            }
            state.timerArmed = next != nil
            return (expired, next)
        }
        for waiter in expired { waiter.continuation.resume(returning: false) }
        if let next { armTimer(at: next) }
    }

    /// Takes the waiter `ticket` out of line and refuses it, if it is still waiting (its request went away).
    private func giveUp(_ ticket: UInt64, client: String) {
        let waiter = state.withLock { state -> Waiter? in
            guard let index = state.lines[client]?.firstIndex(where: { $0.ticket == ticket }) else { return nil }
            let waiter = state.lines[client]?.remove(at: index)
            Self.leftLine(client, in: &state)
            return waiter
        }
        waiter?.continuation.resume(returning: false)
    }

    private func leave(_ client: String) {
        let admitted = state.withLock { state -> [Waiter] in
            state.atDatabase -= 1
            if let mine = state.byAddress[client] {
                state.byAddress[client] = mine.atDatabase <= 1 && mine.waiting == 0 ? nil : (mine.atDatabase - 1, mine.waiting)
            }
            return dispatch(&state)
        }
        for next in admitted { next.continuation.resume(returning: true) }
    }

    /// Gives the free places to the waiters of the addresses in turn, each below its share; the waiters admitted.
    private func dispatch(_ state: inout State) -> [Waiter] {
        var admitted: [Waiter] = []
        var passed = 0
        // Once round the addresses in line without one taken: the rest are at their share.
        while state.atDatabase < limit, !state.turn.isEmpty, passed < state.turn.count {
            let client = state.turn.removeFirst()
            guard state.byAddress[client, default: (0, 0)].atDatabase < share, let next = state.lines[client]?.first else {
                if state.lines[client]?.isEmpty == false { state.turn.append(client) }
                passed += 1
                continue
            }
            passed = 0
            // In place: a copy of the line taken out and put back was copied whole at each place given.
            state.lines[client]?.removeFirst()
            admitted.append(next)
            Self.leftLine(client, in: &state)
            state.atDatabase += 1
            state.byAddress[client, default: (0, 0)].atDatabase += 1
        }
        return admitted
    }

    /// Counts a waiter of `client` out of line (admitted or refused) and takes the address off the turn when its line
    /// is empty.
    private static func leftLine(_ client: String, in state: inout State) {
        state.waiting -= 1
        state.byAddress[client, default: (0, 0)].waiting -= 1
        if state.lines[client]?.isEmpty ?? true {
            state.lines.removeValue(forKey: client)
            state.turn.removeAll { $0 == client }
        } else if !state.turn.contains(client) {
            state.turn.append(client)
        }
        if let mine = state.byAddress[client], mine.atDatabase == 0, mine.waiting == 0 { state.byAddress.removeValue(forKey: client) }
    }
}

/// A look-up of a session not in memory that found no place at the database: the line was full, or no place came
/// within the wait.
struct SessionLookupsBusy: Error, CustomStringConvertible {
    let limit: Int
    let waiting: Int
    var description: String { "no place for a session look-up: \(limit) at the database at once and \(waiting) in line at most, or the wait was too long" }
}
