import DoorHTTP
import HTTPTypes
import Hummingbird
import Logging

/// The built-in proxy's door (`--upstream`): a request for a path siwa does not own passes to the upstream when
/// its session's person is let in by the rules (with siwa's identity headers and `X-Siwa-Assertion` addressed to
/// the upstream's origin), or when a `public` rule (`skip_auth_routes` among them) matches (with none); otherwise
/// siwa answers: a browser is sent to the sign-in and comes back to the same URL, anything else gets 401; a person
/// the rules turn away, and anyone on a `deny` rule, gets 403. The upstream's answers pass as
/// they are; siwa's own carry its security headers.
struct UpstreamGate: Sendable {
    let forwarder: UpstreamForwarder
    let front: FrontSettings
    let sessions: SessionMiddleware
    let renderer: PageRenderer
    let security: SecurityHeadersMiddleware<ServerContext>
    let assertions: IdentityAssertions
    let audit: AuditTrail
    let resolver: ClientAddressResolver

    /// The answer to `request`, whose target the front read as `target` (`SiwaPaths.route`): decided on it, and
    /// forwarded with it.
    func respond(to request: Request, target: RequestTarget, context: ServerContext) async throws -> Response {
        switch await decision(request, target: target, context: context) {
        case .pass:
            return await forward(request, target: target, context: context, identity: [])
        case .allow(let user, let groups):
            return await forward(request, target: target, context: context, identity: await identity(of: user, groups: groups))
        case .deny(let user, _):
            if request.acceptsJSON {
                return own(Response.problem(.forbidden, "denied", "Not allowed", "This site's access rules do not let this request through."))
            }
            return own(renderer.denied(user, signOutURL: front.publicOrigin + "/auth/sign-out", language: request.pageLanguage))
        case .signIn:
            if request.isPageNavigation(method: request.method.rawValue) {
                return own(front.signInRedirect(returningTo: front.publicOrigin + target.forwarded))
            }
            return page(.signedOut, request)
        case .unavailable(let retryURL):
            return page(.storeUnavailable(retryURL: retryURL), request)
        }
    }

    /// The rules' decision on `request` for `target`, the host it was sent to and its method: the session is looked
    /// up only when the rule that applies needs a person.
    func decision(_ request: Request, target: RequestTarget, context: ServerContext) async -> AccessDecision {
        let asked = AccessRequest(host: request.head.authority, method: request.method.rawValue, path: target.path)
        var decision = AccessDecision(.notLooked, request: asked, access: front.access)
        if case .signIn = decision {
            decision = AccessDecision(await sessions.visitor(request, context: context), request: asked, access: front.access)
        }
        if case .deny(let user, let judgement) = decision {
            audit.record(.denied(user, asked, judgement, ip: resolver.clientAddress(request, context: context)))
        }
        return decision
    }

    /// The identity headers of `user` (in `groups`) and, when a key can sign, the assertion addressed to the
    /// upstream's origin.
    func identity(of user: UserRecord, groups: [String]) async -> [HTTPField] {
        Self.identityFields(user, groups: groups, assertion: await assertions.assertion(for: user, groups: groups, audience: forwarder.settings.origin))
    }

    /// The identity headers of `user`, and `assertion` when there is one (also what the fast path sends).
    static func identityFields(_ user: UserRecord, groups: [String], assertion: String?) -> [HTTPField] {
        var fields = IdentityHeaders.fields(for: user, groups: groups)
        if let name = IdentityHeaders.assertion, let assertion { fields.append(HTTPField(name: name, value: assertion)) }
        return fields
    }

    /// The upstream's side of the WebSocket `request` asks for, opened with the same identity as a plain request
    /// would carry; nil (nothing sent to the upstream) when the request would not be forwarded, or when the upstream
    /// did not switch protocols (logged). `respond` then answers the same request: 401, 403, or 502.
    func openWebSocket(_ request: Request, target: RequestTarget, context: ServerContext) async -> UpstreamWebSocket? {
        let identity: [HTTPField]
        switch await decision(request, target: target, context: context) {
        case .pass: identity = []
        case .allow(let user, let groups): identity = await self.identity(of: user, groups: groups)
        case .deny, .signIn, .unavailable: return nil
        }
        do {
            return try await forwarder.openWebSocket(request, target: target, context: context, identity: identity)
        } catch {
            switch error {
            case .timedOut: context.logger.error("upstream did not open the WebSocket in time", metadata: ["timeout_ms": "\(forwarder.settings.timeoutMS)"])
            case .unreachable(let cause): context.logger.error("upstream WebSocket not opened", metadata: ["error": "\(cause)"])
            case .broken(let reason): context.logger.error("upstream WebSocket not opened", metadata: ["error": "\(reason)"])
            case .busy: context.logger.warning("upstream WebSocket not opened: upstream_max_connections in use")
            }
            return nil
        }
    }

    /// The upstream's answer, or siwa's 502 or 504 page when none came.
    private func forward(_ request: Request, target: RequestTarget, context: ServerContext, identity: [HTTPField]) async -> Response {
        // A WebSocket upgrade that may pass reaches here only when the upstream did not switch protocols for it
        // (`openWebSocket`): passed on as a plain request it would lose its Upgrade header and mean something else.
        if request.isWebSocketUpgrade {
            return page(.badGateway(retryURL: request.head.path ?? "/"), request)
        }
        do {
            return try await forwarder.forward(request, target: target, context: context, identity: identity)
        } catch {
            return failed(error, request, logger: context.logger)
        }
    }

    /// siwa's 400 page for a request the front does not pass on (`reason`, logged): nothing reaches the upstream.
    func refuse(_ request: Request, because reason: String, logger: Logger) -> Response {
        logger.notice("request refused at the door", metadata: ["reason": "\(reason)", "method": "\(request.method)"])
        return page(.badTarget, request)
    }

    /// siwa's 504 or 502 page when the upstream gave no answer to `request` (logged).
    func failed(_ failure: UpstreamForwarder.Failure, _ request: Request, logger: Logger) -> Response {
        switch failure {
        case .broken(let reason):
            logger.error("upstream answered what siwa does not pass on", metadata: ["reason": "\(reason)"])
            return page(.badUpstream(retryURL: request.head.path ?? "/"), request)
        case .busy:
            logger.warning("upstream_max_connections in use: a request waited in vain", metadata: ["limit": "\(forwarder.settings.maxConnections)"])
            return page(.busy(retryURL: request.head.path ?? "/"), request)
        case .timedOut:
            logger.error("upstream did not answer in time", metadata: ["timeout_ms": "\(forwarder.settings.timeoutMS)"])
            return page(.gatewayTimeout(retryURL: request.head.path ?? "/"), request)
        case .unreachable(let cause):
            logger.error("upstream unreachable", metadata: ["error": "\(cause)"])
            return page(.badGateway(retryURL: request.head.path ?? "/"), request)
        }
    }

    /// `page` as a page, or as problem details for a client that asked for JSON.
    private func page(_ page: ErrorPage, _ request: Request) -> Response {
        own(request.acceptsJSON ? renderer.problem(page) : renderer.render(page, language: request.pageLanguage))
    }

    private func own(_ response: Response) -> Response {
        var response = response
        security.secure(&response)
        return response
    }
}
