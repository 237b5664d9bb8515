import AppleSignIn
import Foundation
import Logging
import NIOCore
import ServiceLifecycle

/// A store backend with the session cache in front (`check_cache_seconds`): what `makeStore` returns, whichever the
/// database. The backend only reads and writes; this layer reads sessions from memory (`SessionCache`), bounds and
/// shares out the look-ups that must ask the database (`SessionLookups`), and has the cache forget a person or a
/// session after every write that changes them has committed: sign-in, sign-out (one session, or every one from the
/// sessions page or the console), Apple's notifications, deletion, a revoked link (a failed refresh check). With
/// several instances on one database, a `SessionChangeChannel` tells the others (PostgreSQL's `LISTEN`/`NOTIFY`). A
/// new backend implements the role protocols and nothing of this.
final class SessionCachedStore: StoreLayer {
    /// The store underneath.
    let backend: any SignInStore
    /// The sessions and unknown cookies held in memory.
    let cache: SessionCache
    /// The look-ups at the database, bounded by what the backend's pool can run at once.
    let lookups: SessionLookups
    /// The look-ups in progress, by the hash they look up: a request with the same cookie (a page's parallel
    /// requests, an HTTP/2 client's streams, once the cookie's time in memory is over) waits for that one instead of
    /// asking the database again. Before, each asked on its own: 640 streams of one cookie took 640 places and the line
    /// (160 with SQLite), and some were refused with the 503 page.
    private let sessionReads = SingleFlight<(SessionRecord, UserRecord)?>()
    private let tokenReads = SingleFlight<(SessionRecord, UserRecord)?>()

    /// A look-up joins a read in progress only when no write has made the cache forget anything since that read began
    /// (the cache's generation, in the key): a request that comes after a sign-out has committed never gets what a
    /// read begun before it found.
    private static func flightKey(_ hash: String, _ generation: UInt64) -> String {
        String(generation) + " " + hash
    }
    /// How other instances on the same database hear of changes, if there can be any.
    let changes: (any SessionChangeChannel)?
    let logger: Logger

    /// `lookupWait`: how long a look-up may wait in line for a place at the database (`SessionLookups.maxWait`).
    init(_ backend: any SignInStore, cache: SessionCache, changes: (any SessionChangeChannel)? = nil, lookupWait: TimeAmount = .seconds(1), logger: Logger) {
        self.backend = backend
        self.cache = cache
        lookups = SessionLookups(pool: backend.queriesAtOnce, maxWait: lookupWait)
        self.changes = changes
        self.logger = logger
    }

    /// The SQLite store with its session cache, which every store of this process opened on the same file shares
    /// (another process writing it, such as `siwa migrate-users`, is seen within `cacheSeconds`).
    convenience init(_ backend: SQLiteStore, cacheSeconds: Int = SessionCache.defaultLifetimeSeconds, logger: Logger = Logger(label: "siwa")) {
        self.init(backend, cache: SessionCache.shared(for: backend.pool.path, lifetime: TimeInterval(cacheSeconds)), logger: logger)
    }

    /// The PostgreSQL store with its session cache, hearing the other instances' changes through `LISTEN`/`NOTIFY`.
    convenience init(_ backend: PostgresStore, cacheSeconds: Int = SessionCache.defaultLifetimeSeconds) {
        let changes = PostgresSessionChanges(client: backend.client, logger: backend.logger, timeout: backend.operationTimeout)
        self.init(backend, cache: SessionCache(lifetime: TimeInterval(cacheSeconds)), changes: changes, logger: backend.logger)
    }

    /// Has the cache forget `change`, which a write just committed, and tells the other instances.
    private func committed(_ change: SessionChange) async {
        cache.forget(change)
        guard let changes else { return }
        do {
            try await changes.announce(change)
        } catch {
            logger.warning("other instances not told of a session change; their copies expire within check_cache_seconds", metadata: ["error": "\(String(reflecting: error))"])
        }
    }

    /// Runs `write`, then has `change` forgotten. A write that failed is forgotten here too (its answer may have been
    /// lost after it committed), not announced.
    private func write<T>(_ change: SessionChange, announce: (T) -> Bool = { _ in true }, _ write: () async throws -> T) async throws -> T {
        let result: T
        do {
            result = try await write()
        } catch {
            cache.forget(change)
            throw error
        }
        if announce(result) { await committed(change) } else { cache.forget(change) }
        return result
    }

    // MARK: UsersAndSessions

    func completeSignIn(_ completed: CompletedSignIn) async throws -> UserRecord {
        // A transfer renames a user whose old sub only the write knows: everything is forgotten then.
        try await write(completed.transferSubject == nil ? .subject(completed.subject) : .everything) { try await backend.completeSignIn(completed) }
    }

    func cachedSession(idHash: String, now: Date) -> (SessionRecord, UserRecord)? {
        cache.lookup(idHash, now: now)
    }

    /// Access tokens share the cache with sessions (both are SHA-256 of random values), read as sessions of their
    /// client; a session's own look-up never answers with one (an access token sent as a cookie opens nothing).
    func accessToken(hash: String, now: Date, askedBy client: String) async throws -> (SessionRecord, UserRecord)? {
        if let cached = cache.lookup(hash, now: now) { return cached.0.isAccessToken ? cached : nil }
        if cache.isUnknown(hash, now: now) { return nil }
        return try await tokenReads.run(Self.flightKey(hash, cache.generation)) { [self] in try await readAccessToken(hash: hash, now: now, askedBy: client) }
    }

    private func readAccessToken(hash: String, now: Date, askedBy client: String) async throws -> (SessionRecord, UserRecord)? {
        try await lookups.run(for: client) {
            let generation = cache.generation
            // A service's token names the service (`ServiceIdentity`); any other a person, who must still exist.
            guard let token = try await backend.providerToken(hash: hash, kind: .access, now: now),
                let user = token.subject.hasPrefix(ServiceIdentity.prefix)
                    ? ServiceIdentity.user(token.subject, since: token.createdAt) : try await backend.user(subject: token.subject)
            else {
                cache.rememberUnknown(hash, now: now)
                return nil
            }
            let found = (
                SessionRecord(
                    idHash: hash, subject: user.subject, csrfToken: "", createdAt: token.createdAt, expiresAt: token.expiresAt, via: "token:" + token.clientID,
                    parentSID: token.sessionID
                ), user
            )
            cache.store(found, readAt: generation, now: now)
            return found
        }
    }

    func revokeProviderToken(hash: String, clientID: String) async throws -> Bool {
        // The access token itself leaves memory at once; the rest of its grant (revoking a refresh token) within
        // check_cache_seconds, as its records say nothing here of which access tokens it holds.
        try await write(.session(idHash: hash)) { try await backend.revokeProviderToken(hash: hash, clientID: clientID) }
    }

    func removeProviderClient(clientID: String) async throws -> Bool {
        // Its tokens go with it: a service's at once (they are all of its subject), a person's within check_cache_seconds.
        try await write(.subject(ServiceIdentity.prefix + clientID)) { try await backend.removeProviderClient(clientID: clientID) }
    }

    func revokeProviderTokens(subject: String) async throws {
        try await write(.subject(subject)) { try await backend.revokeProviderTokens(subject: subject) }
    }

    func session(idHash: String, now: Date) async throws -> (SessionRecord, UserRecord)? {
        try await session(idHash: idHash, now: now, askedBy: "")
    }

    func session(idHash: String, now: Date, askedBy client: String) async throws -> (SessionRecord, UserRecord)? {
        if let cached = cache.lookup(idHash, now: now) { return cached.0.isAccessToken ? nil : cached }
        // Known to be unknown: no session, without asking again.
        if cache.isUnknown(idHash, now: now) { return nil }
        return try await sessionReads.run(Self.flightKey(idHash, cache.generation)) { [self] in try await readSession(idHash: idHash, now: now, askedBy: client) }
    }

    private func readSession(idHash: String, now: Date, askedBy client: String) async throws -> (SessionRecord, UserRecord)? {
        try await lookups.run(for: client) {
            let generation = cache.generation
            guard let found = try await backend.session(idHash: idHash, now: now) else {
                cache.rememberUnknown(idHash, now: now)
                return nil
            }
            cache.store(found, readAt: generation, now: now)
            return found
        }
    }

    func deleteSession(idHash: String) async throws -> Bool {
        try await write(.session(idHash: idHash)) { try await backend.deleteSession(idHash: idHash) }
    }

    /// Forgotten here and, with PostgreSQL, on every instance: the next request reads the renewed time.
    func renewAuthentication(idHash: String, subject: String, at: Date) async throws -> Bool {
        try await write(.session(idHash: idHash)) { try await backend.renewAuthentication(idHash: idHash, subject: subject, at: at) }
    }

    // MARK: LifecycleQueue

    func deleteUser(subject: String, tombstone: Bool, at: Date) async throws -> RefreshCheck? {
        try await write(.subject(subject)) { try await backend.deleteUser(subject: subject, tombstone: tombstone, at: at) }
    }

    func revokeLink(subject: String, at: Date) async throws {
        try await write(.subject(subject)) { try await backend.revokeLink(subject: subject, at: at) }
    }

    // MARK: NotificationLedger

    func apply(_ notification: AppleNotification, receivedAt: Date) async throws -> NotificationOutcome {
        // A duplicate, or a type siwa does not know, changed nothing: no instance needs telling.
        try await write(.subject(notification.event.subject), announce: { $0 == .applied }) {
            try await backend.apply(notification, receivedAt: receivedAt)
        }
    }

    // MARK: SessionList

    func drainSessionTouches() -> [(idHash: String, at: Date)] {
        cache.drainTouches()
    }

    // MARK: StoreMaintenance

    /// The backend's services and, with other instances to hear, the listener that feeds the cache.
    var services: [any Service] {
        backend.services + (changes.map { [$0.listener(feeding: cache)] } ?? [])
    }
}
