import HTTPTypes
import Hummingbird
import Logging

/// The built-in proxy's door (`--upstream`): a request for a path siwa does not own passes to the upstream when
/// its session's person is let in by the policy (with siwa's identity headers), or when it is on a
/// `skip_auth_routes` route (with none); otherwise siwa answers: a browser is sent to the sign-in and comes back to
/// the same URL, anything else gets 401; a person the policy turns away gets 403. The upstream's answers pass as
/// they are; siwa's own carry its security headers.
struct UpstreamGate: Sendable {
    let forwarder: UpstreamForwarder
    let front: FrontSettings
    let sessions: SessionMiddleware
    let renderer: PageRenderer
    let security: SecurityHeadersMiddleware<ServerContext>

    func respond(to request: Request, context: ServerContext) async throws -> Response {
        if forwarder.settings.skipsAuth(method: request.method, path: request.uri.path) {
            return await forward(request, context: context, identity: [])
        }
        let visitor = await sessions.visitor(request, logger: context.logger)
        switch AccessDecision(visitor, policy: front.policy) {
        case .allow(let user):
            return await forward(request, context: context, identity: IdentityHeaders.fields(for: user))
        case .deny(let user):
            if request.acceptsJSON {
                return own(Response.problem(.forbidden, "denied", "Not allowed", "The signed-in Apple account is not allowed by this site's access policy."))
            }
            return own(renderer.denied(user, signOutURL: front.publicOrigin + "/auth/sign-out", language: request.pageLanguage))
        case .signIn:
            if request.isPageNavigation(method: request.method.rawValue) {
                return own(front.signInRedirect(returningTo: front.publicOrigin + (request.head.path ?? "/")))
            }
            return page(.signedOut, request)
        case .unavailable(let retryURL):
            return page(.storeUnavailable(retryURL: retryURL), request)
        }
    }

    /// The upstream's answer, or siwa's 502 or 504 page when none came.
    private func forward(_ request: Request, context: ServerContext, identity: [HTTPField]) async -> Response {
        do {
            return try await forwarder.forward(request, context: context, identity: identity)
        } catch {
            switch error {
            case .timedOut:
                context.logger.error("upstream did not answer in time", metadata: ["timeout_ms": "\(forwarder.settings.timeoutMS)"])
                return page(.gatewayTimeout(retryURL: request.head.path ?? "/"), request)
            case .unreachable(let cause):
                context.logger.error("upstream unreachable", metadata: ["error": "\(cause)"])
                return page(.badGateway(retryURL: request.head.path ?? "/"), request)
            }
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
