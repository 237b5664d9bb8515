import ServiceLifecycle

/// What a committed write changed, as far as sessions held in memory are concerned: what every instance's
/// `SessionCache` must forget.
enum SessionChange: Sendable, Equatable {
    /// Every session of a person (sign-in, sign-out everywhere, account deletion, a revoked link, a notification).
    case subject(String)
    /// One session (a sign-out), by id hash.
    case session(idHash: String)
    /// Anything (a team transfer renames a person whose old sub only the write knew).
    case everything

    /// How the change travels between instances: `sub:<subject>`, `session:<id hash>`, `all`.
    var payload: String {
        switch self {
        case .subject(let subject): "sub:" + subject
        case .session(let idHash): "session:" + idHash
        case .everything: "all"
        }
    }

    /// The change `payload` names; anything unreadable is taken as `.everything`.
    init(payload: String) {
        if payload.hasPrefix("sub:") {
            self = .subject(String(payload.dropFirst(4)))
        } else if payload.hasPrefix("session:") {
            self = .session(idHash: String(payload.dropFirst(8)))
        } else {
            self = .everything
        }
    }
}

/// How the instances sharing a database tell each other what changed (PostgreSQL: `LISTEN`/`NOTIFY`). A store
/// backend needs none: `SessionCachedStore` announces after each write commits, and the channel's listener feeds the
/// other instances' caches.
protocol SessionChangeChannel: Sendable {
    /// Tells every instance (this one included) of `change`, which has committed.
    func announce(_ change: SessionChange) async throws
    /// The service that hears every instance's announcements and has `cache` forget what they name; while it cannot
    /// hear them, it forgets everything whenever it starts hearing again.
    func listener(feeding cache: SessionCache) -> any Service
}
