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
        var decision = AccessDecision(.notLooked, request: request.asked, access: front.access, narrowing: request.narrowing)
        if case .signIn = decision {
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
            return .allow(Admission(person: nil, authorization: request.fields[.authorization], dropsAuthorization: false))
        case .allow(let user, let groups, let client):
            let keeps = front.keepsAuthorization(client: client, request.asked)
            let authorization = request.fields[.authorization]
            return .allow(Admission(
                person: Admission.Person(user: user, groups: groups, client: client), authorization: keeps ? authorization : nil,
                dropsAuthorization: !keeps && authorization != nil
            ))
        case .signIn:
            return .signIn(navigation: request.isNavigation, returnTo: request.original)
        case .badToken(let problem):
            return .badToken(problem)
        case .deny(let user, _):
            let bearer = if case .token = request.credential { true } else { false }
            return .deny(user, bearer: bearer, scripted: request.fields.acceptsJSON || request.fields.isScripted)
        case .unavailable(let retryURL):
            return .unavailable(retryURL: retryURL)
        }
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
