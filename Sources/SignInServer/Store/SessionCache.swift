import Foundation
import Synchronization

/// Recently looked-up sessions, so a signed-in request (a page view, a forward-auth check) costs no database
/// round trip (`check_cache_seconds`).
///
/// Every SQLiteStore of a process opened on the same file shares one cache (`shared(for:lifetime:)`); each
/// PostgresStore has its own, which hears the other instances' changes through PostgreSQL's `LISTEN`/`NOTIFY`
/// (`SessionInvalidationListener`). Every change that can alter what a session shows passes through a store,
/// which invalidates the subject after its write has committed. A generation counter keeps a lookup that raced
/// with such a change from caching what it read before the change. Entries also expire after `lifetime`, the
/// bound on staleness when a change is not heard (another process writing the same SQLite file, such as
/// `siwa migrate-users`; a PostgreSQL instance whose listening connection is down), and never outlive the
/// session. A lifetime of 0 keeps nothing.
///
/// A cookie the database did not know is remembered as unknown for as long (at most `capacity` of them, forgotten
/// all at once when full, so they cannot crowd out the sessions), and at most `missLimit` look-ups of cookies not in
/// memory go to the database at once; one more is refused (`SessionLookupsBusy`, a 503). A flood of made-up session
/// cookies costs the database a bounded number of queries at once, and siwa's signed-in visitors, whose sessions
/// are in memory, do not notice it. A session id is random and only handed out once stored, so no cookie that was
/// unknown becomes a session later.
final class SessionCache: Sendable {
    private struct Entry {
        var session: SessionRecord
        var user: UserRecord
        var cachedAt: Date
        /// When its use was last noted for `touched`.
        var touchedAt: Date
    }

    private struct State {
        var entries: [String: Entry] = [:]
        var bySubject: [String: Set<String>] = [:]
        var generation: UInt64 = 0
        /// Cookies (by hash) the database did not know, and when it said so.
        var unknown: [String: Date] = [:]
        /// Look-ups at the database now.
        var misses = 0
        /// Sessions used since the last `drainTouches`, and when (at most one note a minute per cached session).
        var touched: [String: Date] = [:]
    }

    let lifetime: TimeInterval
    let capacity: Int
    /// How many look-ups of sessions not in memory may be at the database at once.
    let missLimit: Int
    private let state = Mutex(State())

    init(lifetime: TimeInterval = 5, capacity: Int = 10_000, missLimit: Int = 64) {
        self.lifetime = lifetime
        self.capacity = capacity
        self.missLimit = missLimit
    }

    /// Looks `idHash` up in the database with `read` unless it is known to be unknown (nil), within `missLimit`
    /// (`SessionLookupsBusy` past it); what is found is kept, what is not is remembered as unknown.
    func lookUpMissing(
        _ idHash: String, now: Date, _ read: () async throws -> (SessionRecord, UserRecord)?
    ) async throws -> (SessionRecord, UserRecord)? {
        let admitted = state.withLock { state -> Result<UInt64, SessionLookupsBusy>? in
            if let since = state.unknown[idHash], (0..<lifetime).contains(now.timeIntervalSince(since)) { return nil }
            guard state.misses < missLimit else { return .failure(SessionLookupsBusy(limit: missLimit)) }
            state.misses += 1
            return .success(state.generation)
        }
        // Known to be unknown: no session, without asking again.
        guard let admitted else { return nil }
        let generation = try admitted.get()
        defer { state.withLock { $0.misses -= 1 } }
        let found = try await read()
        if let found {
            store(found, readAt: generation, now: now)
        } else if lifetime > 0 {
            state.withLock { state in
                if state.unknown.count >= capacity { state.unknown.removeAll(keepingCapacity: true) }
                state.unknown[idHash] = now
            }
        }
        return found
    }

    private static let registry = Mutex<[String: SessionCache]>([:])

    /// The cache of the database file at `path`, shared by every store of this process opened on it with the
    /// same `lifetime`.
    static func shared(for path: String, lifetime: TimeInterval) -> SessionCache {
        guard path != ":memory:", !path.isEmpty else { return SessionCache(lifetime: lifetime) }
        let key = URL(fileURLWithPath: path).standardizedFileURL.resolvingSymlinksInPath().path + "#\(lifetime)"
        return registry.withLock { registry in
            if let cache = registry[key] { return cache }
            let cache = SessionCache(lifetime: lifetime)
            registry[key] = cache
            return cache
        }
    }

    /// The cached session for `idHash`, if fresh and not expired.
    func lookup(_ idHash: String, now: Date) -> (SessionRecord, UserRecord)? {
        state.withLock { state in
            guard let entry = state.entries[idHash] else { return nil }
            guard entry.session.expiresAt > now, now.timeIntervalSince(entry.cachedAt) < lifetime else {
                Self.remove(idHash, subject: entry.session.subject, from: &state)
                return nil
            }
            if now.timeIntervalSince(entry.touchedAt) >= Self.touchEvery {
                state.entries[idHash]?.touchedAt = now
                Self.note(idHash, now, in: &state, capacity: capacity)
            }
            return (entry.session, entry.user)
        }
    }

    /// The generation to pass to `store` for a lookup starting now.
    var generation: UInt64 { state.withLock { $0.generation } }

    /// Caches what a lookup read, unless something was invalidated since it began.
    func store(_ found: (SessionRecord, UserRecord), readAt generation: UInt64, now: Date) {
        // A session read from the database is one in use.
        state.withLock { Self.note(found.0.idHash, now, in: &$0, capacity: capacity) }
        guard lifetime > 0 else { return }
        state.withLock { state in
            guard state.generation == generation else { return }
            if state.entries.count >= capacity {
                state.entries.removeAll(keepingCapacity: true)
                state.bySubject.removeAll(keepingCapacity: true)
            }
            let (session, user) = found
            state.entries[session.idHash] = Entry(session: session, user: user, cachedAt: now, touchedAt: now)
            state.bySubject[session.subject, default: []].insert(session.idHash)
        }
    }

    /// Forgets every session of `subject` (after a write that changed the user or their sessions).
    func invalidate(subject: String) {
        state.withLock { state in
            state.generation &+= 1
            for idHash in state.bySubject.removeValue(forKey: subject) ?? [] {
                state.entries.removeValue(forKey: idHash)
            }
        }
    }

    /// Forgets one session.
    func invalidate(idHash: String) {
        state.withLock { state in
            state.generation &+= 1
            if let entry = state.entries[idHash] { Self.remove(idHash, subject: entry.session.subject, from: &state) }
        }
    }

    /// Forgets everything.
    func invalidateAll() {
        state.withLock { state in
            state.generation &+= 1
            state.entries.removeAll()
            state.bySubject.removeAll()
        }
    }

    /// How often a cached session's use is noted: its last use is shown to the minute.
    static let touchEvery: TimeInterval = 60

    private static func note(_ idHash: String, _ now: Date, in state: inout State, capacity: Int) {
        // Bounded: past `capacity` pending notes, new ones wait for the next drain (the session is noted again later).
        guard state.touched.count < capacity || state.touched[idHash] != nil else { return }
        state.touched[idHash] = now
    }

    /// The sessions used since the last call, and when; forgotten here (`SessionTouchWriter` writes them).
    func drainTouches() -> [(idHash: String, at: Date)] {
        state.withLock { state in
            defer { state.touched.removeAll(keepingCapacity: true) }
            return state.touched.map { ($0.key, $0.value) }
        }
    }

    private static func remove(_ idHash: String, subject: String, from state: inout State) {
        state.entries.removeValue(forKey: idHash)
        state.bySubject[subject]?.remove(idHash)
        if state.bySubject[subject]?.isEmpty == true { state.bySubject.removeValue(forKey: subject) }
    }
}

/// More look-ups of sessions not in memory than `SessionCache.missLimit` at once: this one was not made.
struct SessionLookupsBusy: Error, CustomStringConvertible {
    let limit: Int
    var description: String { "more than \(limit) session look-ups at the database at once" }
}
