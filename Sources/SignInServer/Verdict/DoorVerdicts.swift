import HTTPTypes
import Logging

/// The door's one decision: a plain request (`DoorRequest`) in, a plain verdict (`DoorVerdict`) out, for every door
/// and carrier. The rules are read first, and who asks (the session, a bearer token) is looked up only when the rule
/// that applies needs a person; a refusal by the rules is audited. A new way to present an identity plugs into
/// `Visitor`; a new door renders `DoorVerdict` and decides nothing.
struct DoorVerdicts: Sendable {
    let front: FrontSettings
    let audit: AuditTrail

    /// The verdict on `request`. `visitor` looks up who asks, and is called only when the rule needs a person. A
    /// token presented where the door never takes one (the query, two `Authorization` fields) is refused before any
    /// rule, so that no rule passes it on.
    func decide(_ request: DoorRequest, logger: Logger, visitor: () async -> Visitor) async -> DoorVerdict {
        if case .refused(let problem) = request.credential {
            logger.notice("bearer token refused at the door", metadata: ["reason": "\(problem.description)"])
            return .badToken(problem)
        }
        let decision: AccessDecision
        if let ruled = Self.withoutVisitor(request.asked, narrowing: request.narrowing, front: front) {
            decision = ruled
        } else {
            decision = AccessDecision(await visitor(), request: request.asked, access: front.access, narrowing: request.narrowing)
        }
        if case .deny(let user, let judgement) = decision {
            if let reason = judgement.reason {
                logger.warning("access rule could not be applied", metadata: ["rule": "\(judgement.rule)", "reason": "\(reason)"])
            }
            audit.record(.denied(user, request.asked, judgement, ip: request.clientAddress))
        }
        return verdict(decision, for: request)
    }

    /// The verdict a decision on `request` comes to: the one place where a decision becomes what the door does.
    func verdict(_ decision: AccessDecision, for request: DoorRequest) -> DoorVerdict {
        switch decision {
        case .pass:
            return .allow(Self.admission(nil, asked: request.asked, authorization: request.fields[.authorization], front: front))
        case .allow(let user, let groups, let client, let authenticatedAt):
            let person = Admission.Person(user: user, groups: groups, client: client, authenticatedAt: authenticatedAt)
            return .allow(Self.admission(person, asked: request.asked, authorization: request.fields[.authorization], front: front))
        case .signIn:
            return .signIn(navigation: request.isNavigation, returnTo: request.original)
        case .badToken(let problem):
            return .badToken(problem)
        case .deny(let user, _):
            let bearer = if case .token = request.credential { true } else { false }
            return .deny(user, bearer: bearer, scripted: request.fields.acceptsJSON || request.fields.isScripted)
        case .unavailable(let retryURL):
            return .unavailable(retryURL: retryURL)
        case .stepUp(_, let maxAge):
            return .stepUp(navigation: request.isNavigation, returnTo: request.original, maxAge: maxAge)
        }
    }

    /// The decision the rules for `asked` come to before anyone is looked up: nil when the rule needs a person (then
    /// the visitor decides).
    static func withoutVisitor(_ asked: AccessRequest, narrowing: [AccessPolicy], front: FrontSettings) -> AccessDecision? {
        let decision = AccessDecision(.notLooked, request: asked, access: front.access, narrowing: narrowing)
        if case .signIn = decision { return nil }
        return decision
    }

    /// What goes on when the rules let `person` in (nil on a `public` rule) for `asked`, and with which
    /// `Authorization` (the request's, `authorization`): the one place where a decision becomes an admission.
    static func admission(_ person: Admission.Person?, asked: AccessRequest, authorization: String?, front: FrontSettings) -> Admission {
        let keeps = front.keepsAuthorization(client: person?.client, asked)
        return Admission(person: person, authorization: keeps ? authorization : nil, dropsAuthorization: !keeps && authorization != nil)
    }

    /// What memory alone decides, for the byte path (`BytePathAnswers`), which answers on the event loop without a task.
    enum FromMemory {
        /// Let in (a person memory holds, or a `public` rule).
        case admit(Admission)
        /// A person memory holds, whose sign-in is older than the rule allows (`max_auth_age`): the decision, for the
        /// door to render as the handlers would (`verdict`, `DoorPolicy.refusal`); nothing is audited for it.
        case stepUp(AccessDecision)
    }

    /// `decide`'s rules and admission with who asks as memory holds them (`visitor`, asked only when the rule needs a
    /// person). Nil when the handlers answer: another refusal (rendered and audited there), a sign-in, or a session
    /// not in memory (looked up there).
    static func fromMemory(
        _ asked: AccessRequest, narrowing: [AccessPolicy] = [], authorization: String?, front: FrontSettings, visitor: () -> Visitor
    ) -> FromMemory? {
        let decision = withoutVisitor(asked, narrowing: narrowing, front: front) ?? AccessDecision(visitor(), request: asked, access: front.access, narrowing: narrowing)
        switch decision {
        case .pass:
            return .admit(admission(nil, asked: asked, authorization: authorization, front: front))
        case .allow(let user, let groups, let client, let authenticatedAt):
            let person = Admission.Person(user: user, groups: groups, client: client, authenticatedAt: authenticatedAt)
            return .admit(admission(person, asked: asked, authorization: authorization, front: front))
        case .stepUp:
            return .stepUp(decision)
        case .signIn, .badToken, .deny, .unavailable:
            return nil
        }
    }

    /// The admission memory alone gives (`fromMemory`), nil for anything else.
    static func admissionFromMemory(
        _ asked: AccessRequest, narrowing: [AccessPolicy] = [], authorization: String?, front: FrontSettings, visitor: () -> Visitor
    ) -> Admission? {
        guard case .admit(let admission) = fromMemory(asked, narrowing: narrowing, authorization: authorization, front: front, visitor: visitor) else { return nil }
        return admission
    }
}

extension FrontSettings {
    /// Whether the upstream gets the request's `Authorization`: always, unless a bearer token let the person in
    /// (`client` holds it) and the rule for `asked` does not pass it on (`pass_authorization`). Every door and the
    /// byte path ask this, and nothing else does.
    func keepsAuthorization(client: String?, _ asked: AccessRequest) -> Bool {
        client == nil || access.passesAuthorization(asked)
    }
}
