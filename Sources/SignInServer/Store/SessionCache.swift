import Foundation
import Synchronization

/// Recently looked-up sessions, so a signed-in request (a page view, a forward-auth check) costs no database
/// round trip (`check_cache_seconds`), and cookies the database did not know, so a cookie asked about again costs none
/// either. `SessionCachedStore` keeps it in front of a store backend.
///
/// Every change that can alter what a session shows passes through `SessionCachedStore`, which has the cache
/// `forget` it after the write has committed (and other instances hear of it through a `SessionChangeChannel`). A
/// generation counter keeps a look-up that raced with such a change from caching what it read before the change.
/// Entries also expire after `lifetime`, the bound on staleness when a change is not heard (another process writing
/// the same SQLite file, such as `siwa migrate-users`; a PostgreSQL instance whose listening connection is down), and
/// never outlive the session. A lifetime of 0 keeps nothing.
///
/// Each map holds at most `capacity` keys and, to make room, forgets its oldest. A cookie the database did not know
/// is remembered for `lifetime` too, first on probation; asked about again while remembered, it moves to a protected
/// part. A flood of made-up cookies, each asked about once (remembering them is of no use), only turns the probation
/// part over, and never pushes out the cookies that come back (a browser still sending a session that ended), nor
/// the sessions. A session id is random and only handed out once stored, so no cookie that was unknown becomes a
/// session later.
final class SessionCache: Sendable {
    private struct Entry {
        /// Both records behind one reference: reading an entry (every request from memory does) takes one reference,
        /// not every string of both records (36 retains and releases a request in callgrind's count).
        let records: Records
        var cachedAt: Date
        /// When its use was last noted for `touched`.
        var touchedAt: Date

        var session: SessionRecord { records.session }
        var user: UserRecord { records.user }

        init(session: SessionRecord, user: UserRecord, cachedAt: Date, touchedAt: Date) {
            records = Records(session: session, user: user)
            self.cachedAt = cachedAt
            self.touchedAt = touchedAt
        }
    }

    private final class Records: Sendable {
        let session: SessionRecord
        let user: UserRecord

        init(session: SessionRecord, user: UserRecord) {
            self.session = session
            self.user = user
        }
    }

    private struct State {
        var entries: OldestFirstMap<Entry>
        var bySubject: [String: Set<String>] = [:]
        /// Access tokens held here, by the public id of the session their grant began in (they end with it).
        var bySID: [String: Set<String>] = [:]
        var generation: UInt64 = 0
        /// Cookies (by hash) the database did not know, and when it said so: asked about once, and again.
        var unknownOnce: OldestFirstMap<Date>
        var unknownAgain: OldestFirstMap<Date>
        /// Sessions used since the last `drainTouches`, and when (at most one note a minute per cached session).
        var touched: [String: Date] = [:]
    }

    let lifetime: TimeInterval
    let capacity: Int
    private let state: Mutex<State>

    /// `check_cache_seconds`' default, the one place it is written (`ServerSettings.defaultCheckCacheSeconds` is
    /// this; the store is a layer below the settings).
    static let defaultLifetimeSeconds = 5

    init(lifetime: TimeInterval = TimeInterval(SessionCache.defaultLifetimeSeconds), capacity: Int = 10_000) {
        self.lifetime = lifetime
        self.capacity = capacity
        state = Mutex(State(entries: OldestFirstMap(capacity: capacity), unknownOnce: OldestFirstMap(capacity: capacity), unknownAgain: OldestFirstMap(capacity: capacity)))
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
            guard let entry = state.entries.value(for: idHash) else { return nil }
            guard entry.session.expiresAt > now, now.timeIntervalSince(entry.cachedAt) < lifetime else {
                Self.remove(idHash, entry.session, from: &state)
                return nil
            }
            if now.timeIntervalSince(entry.touchedAt) >= Self.touchEvery, !entry.session.isAccessToken {
                state.entries.modify(idHash) { $0.touchedAt = now }
                Self.note(idHash, now, in: &state, capacity: capacity)
            }
            return (entry.session, entry.user)
        }
    }

    /// Whether the database said within `lifetime` that it did not know `idHash` (then there is no session, without
    /// asking again). A cookie asked about again while remembered moves to the part a flood cannot reach.
    func isUnknown(_ idHash: String, now: Date) -> Bool {
        let lifetime = lifetime
        let fresh = { (since: Date) in (0..<lifetime).contains(now.timeIntervalSince(since)) }
        return state.withLock { state in
            if let since = state.unknownAgain[idHash] {
                if fresh(since) { return true }
                state.unknownAgain.remove(idHash)
            }
            guard let since = state.unknownOnce.remove(idHash) else { return false }
            guard fresh(since) else { return false }
            state.unknownAgain.set(since, for: idHash)
            return true
        }
    }

    /// Remembers that the database did not know `idHash` at `now`.
    func rememberUnknown(_ idHash: String, now: Date) {
        guard lifetime > 0 else { return }
        state.withLock { $0.unknownOnce.set(now, for: idHash) }
    }

    /// The generation to pass to `store` for a lookup starting now.
    var generation: UInt64 { state.withLock { $0.generation } }

    /// Caches what a lookup read, unless something was forgotten since it began.
    func store(_ found: (SessionRecord, UserRecord), readAt generation: UInt64, now: Date) {
        state.withLock { state in
            // A session read from the database is one in use.
            if !found.0.isAccessToken { Self.note(found.0.idHash, now, in: &state, capacity: capacity) }
            guard lifetime > 0, state.generation == generation else { return }
            let (session, user) = found
            if let previous = state.entries[session.idHash] { Self.remove(session.idHash, previous.session, from: &state) }
            if let evicted = state.entries.set(Entry(session: session, user: user, cachedAt: now, touchedAt: now), for: session.idHash) {
                Self.unindex(evicted.key, evicted.value.session, in: &state)
            }
            state.bySubject[session.subject, default: []].insert(session.idHash)
            if let sid = session.parentSID { state.bySID[sid, default: []].insert(session.idHash) }
        }
    }

    /// Forgets what `change` names (after a write that changed it committed, here or in another instance).
    func forget(_ change: SessionChange) {
        state.withLock { state in
            state.generation &+= 1
            switch change {
            case .subject(let subject):
                for idHash in state.bySubject[subject] ?? [] {
                    if let entry = state.entries[idHash] { Self.remove(idHash, entry.session, from: &state) }
                }
                state.bySubject.removeValue(forKey: subject)
            case .session(let idHash):
                if let entry = state.entries[idHash] { Self.remove(idHash, entry.session, from: &state) }
                // The access tokens of grants that began in it end with it.
                for token in state.bySID[SessionRecord.publicID(idHash: idHash)] ?? [] {
                    if let entry = state.entries[token] { Self.remove(token, entry.session, from: &state) }
                }
            case .everything:
                state.entries.removeAll()
                state.bySubject.removeAll()
                state.bySID.removeAll()
            }
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

    private static func remove(_ idHash: String, _ session: SessionRecord, from state: inout State) {
        state.entries.remove(idHash)
        unindex(idHash, session, in: &state)
    }

    private static func unindex(_ idHash: String, _ session: SessionRecord, in state: inout State) {
        state.bySubject[session.subject]?.remove(idHash)
        if state.bySubject[session.subject]?.isEmpty == true { state.bySubject.removeValue(forKey: session.subject) }
        guard let sid = session.parentSID else { return }
        state.bySID[sid]?.remove(idHash)
        if state.bySID[sid]?.isEmpty == true { state.bySID.removeValue(forKey: sid) }
    }
}
