import Foundation

/// What the session cookie of a request led to.
enum Visitor: Sendable {
    /// The route does not look sessions up.
    case notLooked
    /// No session cookie, or one naming no live session.
    case anonymous(hadCookie: Bool)
    /// A live session and its user.
    case signedIn(SessionRecord, UserRecord)
    /// A bearer token siwa issued, live: the session it stands for (a native app's session, or an access token's own
    /// record, `SessionRecord.via`), its person, and the client that holds it (a bundle ID, an OpenID client's id).
    case bearer(SessionRecord, UserRecord, client: String)
    /// A bearer token siwa does not take: unknown, expired, revoked, or presented where it must not be.
    case badToken(BearerProblem)
    /// The store did not answer; `retryURL` is the page to try again.
    case storeUnavailable(retryURL: String)
}

/// What the front does with a request, from who is asking and the rules in force (`AccessControl`).
enum AccessDecision {
    /// A `public` rule: passes without a person, without identity.
    case pass
    /// Signed in and let in, with the person's groups now, and the client holding the bearer token when one was
    /// presented (nil for a browser's cookie).
    case allow(UserRecord, groups: [String], client: String?, authenticatedAt: Date?)
    /// Not let in: a `deny` rule (for anyone, `nil` when no one is signed in), or a person the rule or policy does
    /// not name.
    case deny(UserRecord?, AccessJudgement)
    /// No live session, and the request needs one.
    case signIn
    /// The request needs a person and presented a bearer token siwa does not take.
    case badToken(BearerProblem)
    /// The store did not answer; `retryURL` is the page to try again.
    case unavailable(retryURL: String)
    /// The rule lets the person in, but their last authentication with Apple is older than its `max_auth_age`
    /// (`maxAge` seconds): Apple again, or 401 `insufficient_user_authentication` (RFC 9470).
    case stepUp(UserRecord, maxAge: Int)

    /// The decision for `request` by `visitor`, narrowed by a check's query parameters (`narrowing`), at `now`.
    init(_ visitor: Visitor, request: AccessRequest, access: AccessControl, narrowing: [AccessPolicy] = [], now: Date = Date()) {
        let (user, client, session): (UserRecord?, String?, SessionRecord?) = switch visitor {
        case .signedIn(let session, let user): (user, nil, session)
        case .bearer(let session, let user, let client): (user, client, session)
        default: (nil, nil, nil)
        }
        let judgement = access.judge(request, subject: user?.subject, email: user?.email, client: client, narrowing: narrowing)
        switch (judgement.verdict, user) {
        case (.public, _): self = .pass
        case (.allow, let user?):
            if let maxAge = judgement.maxAuthAge, let session, now.timeIntervalSince(session.authenticatedAt) > TimeInterval(maxAge) {
                self = .stepUp(user, maxAge: maxAge)
            } else {
                self = .allow(user, groups: judgement.groups, client: client, authenticatedAt: session?.authenticatedAt)
            }
        case (.deny, let user): self = .deny(user, judgement)
        case (.allow, nil), (.signIn, _):
            switch visitor {
            case .storeUnavailable(let retryURL): self = .unavailable(retryURL: retryURL)
            case .badToken(let problem): self = .badToken(problem)
            default: self = .signIn
            }
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
