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
    func decide(
        _ asked: AccessRequest, narrowing: [AccessPolicy] = [], clientAddress: @autoclosure () -> String, logger: Logger,
        visitor: () async -> Visitor
    ) async -> AccessDecision {
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
    /// come back to after signing in, when known.
    func refusal(_ decision: AccessDecision, at door: Door, request: Request, method: String, original: String?) -> Response? {
        let navigation = request.isPageNavigation(method: method)
        switch (decision, door) {
        case (.pass, _), (.allow, _):
            return nil
        case (.deny, .check):
            return Self.empty(.forbidden)
        case (.signIn, .check):
            return Self.empty(.unauthorized)
        case (.unavailable, .check):
            return Self.empty(.serviceUnavailable)
        case (.signIn, .forward) where !navigation:
            return Self.empty(.unauthorized)
        case (.signIn, _) where navigation:
            return own(front.signInRedirect(returningTo: original))
        case (.signIn, _):
            return page(.signedOut, request)
        case (.unavailable(let retryURL), .upstream):
            return page(.storeUnavailable(retryURL: retryURL), request)
        case (.unavailable, .forward):
            return own(renderer.render(.storeUnavailable(retryURL: original ?? "/"), language: request.pageLanguage))
        case (.deny, .upstream) where request.acceptsJSON:
            return own(Response.problem(.forbidden, "denied", "Not allowed", "This site's access rules do not let this request through."))
        case (.deny(let user, _), .upstream):
            return own(renderer.denied(user, signOutURL: front.publicOrigin + "/auth/sign-out", language: request.pageLanguage))
        case (.deny(let user, _), .forward):
            // Shown on the app's host: siwa's stylesheets are linked at public_url.
            return own(renderer.denied(user, signOutURL: front.publicOrigin + "/auth/sign-out", language: request.pageLanguage, assetOrigin: front.publicOrigin))
        }
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
