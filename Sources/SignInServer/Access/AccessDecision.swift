/// What the session cookie of a request led to.
enum Visitor: Sendable {
    /// The route does not look sessions up.
    case notLooked
    /// No session cookie, or one naming no live session.
    case anonymous(hadCookie: Bool)
    /// A live session and its user.
    case signedIn(SessionRecord, UserRecord)
    /// The store did not answer; `retryURL` is the page to try again.
    case storeUnavailable(retryURL: String)
}

/// What the front does with a request, from who is asking and the rules in force (`AccessControl`).
enum AccessDecision {
    /// A `public` rule: passes without a person, without identity.
    case pass
    /// Signed in and let in, with the person's groups now.
    case allow(UserRecord, groups: [String])
    /// Not let in: a `deny` rule (for anyone, `nil` when no one is signed in), or a person the rule or policy does
    /// not name.
    case deny(UserRecord?, AccessJudgement)
    /// No live session, and the request needs one.
    case signIn
    /// The store did not answer; `retryURL` is the page to try again.
    case unavailable(retryURL: String)

    /// The decision for `request` by `visitor`, narrowed by a check's query parameters (`narrowing`).
    init(_ visitor: Visitor, request: AccessRequest, access: AccessControl, narrowing: [AccessPolicy] = []) {
        let user: UserRecord? = if case .signedIn(_, let user) = visitor { user } else { nil }
        let judgement = access.judge(request, subject: user?.subject, email: user?.email, narrowing: narrowing)
        switch (judgement.verdict, user) {
        case (.public, _): self = .pass
        case (.allow, let user?): self = .allow(user, groups: judgement.groups)
        case (.deny, let user): self = .deny(user, judgement)
        case (.allow, nil), (.signIn, _):
            if case .storeUnavailable(let retryURL) = visitor { self = .unavailable(retryURL: retryURL) } else { self = .signIn }
        }
    }
}

extension AuditEvent {
    /// A denied decision: who (nil for no one signed in), from where, the request as the rules saw it, and the rule.
    static func denied(_ user: UserRecord?, _ request: AccessRequest, _ judgement: AccessJudgement, ip: String) -> AuditEvent {
        AuditEvent(
            "denied", sub: user?.subject, email: user?.email, ip: ip, host: request.host, method: request.method, path: request.path,
            rule: judgement.rule, reason: judgement.reason
        )
    }
}
