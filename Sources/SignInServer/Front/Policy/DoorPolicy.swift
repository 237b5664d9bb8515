import HTTPTypes
import Hummingbird
import Logging

/// The door's one policy: the place that turns a request into a verdict (`decide`, the rules and who asks, audited
/// when it refuses) and a verdict into siwa's answer when it does not let the request through (`refusal`), for every
/// door: the built-in proxy (`--upstream`, every carrier), nginx's `auth_request` check, and the forward auth of
/// Traefik and Caddy. The carriers and controllers only move what it says: forward (with the identity the verdict
/// names), or write its answer. A new way to present an identity (a bearer token) plugs into `decide`; a new door,
/// into `Door`.
struct DoorPolicy: Sendable {
    let front: FrontSettings
    let renderer: PageRenderer
    let security: SecurityHeadersMiddleware<ServerContext>
    let audit: AuditTrail

    /// Which door asks: what a refusal looks like depends on who reads it.
    enum Door {
        /// `--upstream`: a person's browser, a page's script, or an API client reads siwa's answer itself.
        case upstream
        /// `/auth/check` (nginx `auth_request`): statuses without a body; nginx shows its own pages.
        case check
        /// `/auth/forward` (Traefik, Caddy): the proxy passes siwa's answer to the browser as it is.
        case forward
    }

    /// The decision on `asked`: the rules first, and the session (`visitor`) only when the rule that applies needs a
    /// person. A refusal is audited (with `clientAddress`), and a rule that could not be applied is logged.
    /// `credential`: the bearer token the request presents; one presented where the door never takes one (the
    /// query, two `Authorization` fields) is refused before any rule, so that no rule passes it on.
    func decide(
        _ asked: AccessRequest, narrowing: [AccessPolicy] = [], credential: BearerCredential = .none, clientAddress: @autoclosure () -> String,
        logger: Logger, visitor: () async -> Visitor
    ) async -> AccessDecision {
        if case .refused(let problem) = credential {
            logger.notice("bearer token refused at the door", metadata: ["reason": "\(problem.description)"])
            return .badToken(problem)
        }
        var decision = AccessDecision(.notLooked, request: asked, access: front.access, narrowing: narrowing)
        if case .signIn = decision {
            decision = AccessDecision(await visitor(), request: asked, access: front.access, narrowing: narrowing)
        }
        if case .deny(let user, let judgement) = decision {
            if let reason = judgement.reason {
                logger.warning("access rule could not be applied", metadata: ["rule": "\(judgement.rule)", "reason": "\(reason)"])
            }
            audit.record(.denied(user, asked, judgement, ip: clientAddress()))
        }
        return decision
    }

    /// siwa's answer at `door` to `request` when `decision` does not let it through; nil when it does (`pass`, `allow`).
    /// `method`: the request's method as the site got it (a proxy's `X-Forwarded-Method`); `original`: the URL to
    /// come back to after signing in, when known. A browser's navigation is sent to sign in; anything else (a bearer
    /// token, a page's `fetch()`, a command line) gets 401 with problem details and `WWW-Authenticate` (RFC 6750
    /// §3), as does every 401 of the door; a token a rule refuses gets 403 in the same form.
    func refusal(_ decision: AccessDecision, at door: Door, request: Request, method: String, original: String?) -> Response? {
        let navigation = request.isPageNavigation(method: method)
        switch (decision, door) {
        case (.pass, _), (.allow, _):
            return nil
        case (.badToken(let problem), .check):
            // nginx passes 401 and 403 on (with WWW-Authenticate) and turns any other status into a 500.
            return Self.challenged(Self.empty(.unauthorized), problem)
        case (.badToken(let problem), _):
            let status: HTTPResponse.Status = problem.code == .invalidRequest ? .badRequest : .unauthorized
            return own(Self.challenged(Response.problem(status, problem.code.rawValue, "Bearer token not accepted", problem.description), problem))
        case (.deny, .check):
            return Self.bearerDenied(Self.empty(.forbidden), request)
        case (.signIn, .check):
            return Self.challenged(Self.empty(.unauthorized), nil)
        case (.unavailable, .check):
            return Self.empty(.serviceUnavailable)
        case (.signIn, _) where navigation:
            return own(front.signInRedirect(returningTo: original))
        case (.signIn, _):
            return own(Self.challenged(renderer.problem(.signedOut), nil))
        case (.unavailable(let retryURL), .upstream):
            return page(.storeUnavailable(retryURL: retryURL), request)
        case (.unavailable, .forward):
            return own(renderer.render(.storeUnavailable(retryURL: original ?? "/"), language: request.pageLanguage))
        case (.deny, _) where request.acceptsJSON || request.isScripted:
            return own(Self.bearerDenied(
                Response.problem(.forbidden, "denied", "Not allowed", "This site's access rules do not let this request through."), request
            ))
        case (.deny(let user, _), .upstream):
            return own(renderer.denied(user, signOutURL: front.publicOrigin + "/auth/sign-out", language: request.pageLanguage))
        case (.deny(let user, _), .forward):
            // Shown on the app's host: siwa's stylesheets are linked at public_url.
            return own(renderer.denied(user, signOutURL: front.publicOrigin + "/auth/sign-out", language: request.pageLanguage, assetOrigin: front.publicOrigin))
        }
    }

    /// The realm every challenge of the door names.
    static let realm = "siwa"

    /// `response` with `WWW-Authenticate: Bearer realm="siwa"`, and the error of `problem` when a token was refused.
    static func challenged(_ response: Response, _ problem: BearerProblem?) -> Response {
        var response = response
        var challenge = "Bearer realm=\"\(realm)\""
        if let problem { challenge += ", error=\"\(problem.code.rawValue)\", error_description=\"\(problem.description)\"" }
        response.headers[.wwwAuthenticate] = challenge
        return response
    }

    /// A 403 to a request that came with a bearer token says so as RFC 6750 §3.1 does (`insufficient_scope`).
    static func bearerDenied(_ response: Response, _ request: Request) -> Response {
        guard case .token = BearerCredential.read(authorization: request.headers[values: .authorization], query: nil) else { return response }
        var response = response
        response.headers[.wwwAuthenticate] = "Bearer realm=\"\(realm)\", error=\"insufficient_scope\", error_description=\"the access rules do not let this token's person or client through here\""
        return response
    }

    /// `page` as a page, or as problem details for a client that asked for JSON, with siwa's security headers.
    func page(_ page: ErrorPage, _ request: Request) -> Response {
        own(request.acceptsJSON ? renderer.problem(page) : renderer.render(page, language: request.pageLanguage))
    }

    /// A check's answer without a body, never cached.
    static func empty(_ status: HTTPResponse.Status) -> Response {
        Response(status: status, headers: [.cacheControl: "no-store"])
    }

    /// `response` with siwa's security headers (the router's middleware adds them too; setting them twice is one set).
    private func own(_ response: Response) -> Response {
        var response = response
        security.secure(&response)
        return response
    }
}
