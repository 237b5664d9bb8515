import AppleSignIn
import Foundation
import HTTPTypes
import Hummingbird
import JOSE
import Logging
import Synchronization

/// Forward-auth: the proxy in front of a site asks on every request whether to let it through.
/// `GET /auth/check` answers nginx's `auth_request` (202 with identity headers, 401, 403; never a redirect,
/// never a body); `GET /auth/forward` answers Traefik's `forwardAuth` and Caddy's `forward_auth`, which pass
/// the original request in `X-Forwarded-*` (believed from `trusted_proxies` only) and want a browser sent to
/// the sign-in. Neither writes to the store.
struct ForwardAuthController: Sendable {
    let policy: DoorPolicy
    let proxy: ClientAddressResolver
    let assertions: IdentityAssertions
    /// Who asks when the request presents a bearer token (the cookie's session is in `context.visitor`).
    let sessions: SessionMiddleware

    /// `sessions`: the routes `SessionMiddleware` guards.
    func addRoutes(to sessions: RouterGroup<ServerContext>) {
        sessions.get(RouterPath(DoorRoutes.Check.check.path), use: check)
        sessions.get(RouterPath(DoorRoutes.Check.forward.path), use: forward)
    }

    /// `GET /.well-known/siwa/jwks.json`: the public keys of `X-Siwa-Assertion`.
    func addKeySetRoute(to router: Router<ServerContext>) {
        router.get("/.well-known/siwa/jwks.json") { _, context in
            do {
                var response = Response.json(try await assertions.publishedKeySet())
                response.headers[.cacheControl] = "public, max-age=300"
                return response
            } catch {
                context.logger.error("signing keys unavailable", metadata: ["error": "\(error)"])
                throw ErrorPage.storeUnavailable(retryURL: "/.well-known/siwa/jwks.json")
            }
        }
    }

    @Sendable func check(_ request: Request, context: ServerContext) async throws -> Response {
        await answer(request, at: .check, method: request.method.rawValue, original: nil, passStatus: .accepted, context: context)
    }

    @Sendable func forward(_ request: Request, context: ServerContext) async throws -> Response {
        let method = proxy.forwarded(.xForwardedMethod, request, context: context)?.uppercased() ?? request.method.rawValue
        return await answer(request, at: .forward, method: method, original: original(request, context: context), passStatus: .ok, context: context)
    }

    /// A check's answer at `door`: the refusal, or `passStatus` with the identity when a person is let in, and the
    /// `Authorization` the upstream is to get (`upstreamAuthorization`).
    private func answer(
        _ request: Request, at door: DoorPolicy.Door, method: String, original: String?, passStatus: HTTPResponse.Status, context: ServerContext
    ) async -> Response {
        let decision = await decision(request, context: context)
        if let refusal = policy.refusal(decision, at: door, request: request, method: method, original: original) { return refusal }
        var response = DoorPolicy.empty(passStatus)
        var client: String?
        if case .allow(let user, let groups, let holder) = decision {
            response = await allowed(user, groups: groups, client: holder, status: passStatus, request: request, context: context)
            client = holder
        }
        if let authorization = upstreamAuthorization(request, client: client, context: context) {
            response.headers[.authorization] = authorization
            if let name = IdentityHeaders.authorization { response.headers[name] = authorization }
        }
        return response
    }

    /// The request's `Authorization` when the upstream is to get it, as `--upstream` passes it (`UpstreamGate.passed`):
    /// always, unless a bearer token let the request in (`client` holds it) and its rule does not pass it
    /// (`pass_authorization`); the identity headers and the assertion stand for the token then. Said twice in the
    /// answer: as `X-Auth-Request-Authorization` (nginx's `auth_request_set`, Caddy's `copy_headers`) and as
    /// `Authorization` (Traefik's `authResponseHeaders` copies a field under its own name only), so that a proxy
    /// configured as docs/front.md shows sets the upstream's `Authorization` from the answer, and drops it when the
    /// answer has none.
    private func upstreamAuthorization(_ request: Request, client: String?, context: ServerContext) -> String? {
        guard let authorization = request.headers[.authorization] else { return nil }
        guard client != nil else { return authorization }
        let asked = proxy.checkedRequest(request.headers, fromTrusted: proxy.trusted(context.remoteAddress?.ipAddress))
        return policy.front.access.passesAuthorization(asked) ? authorization : nil
    }

    /// The door policy's decision on the request the proxy asks about (`ClientAddressResolver.checkedRequest`),
    /// narrowed by the check's own query (`CheckNarrowing`), with the session `SessionMiddleware` looked up.
    private func decision(_ request: Request, context: ServerContext) async -> AccessDecision {
        let fromTrusted = proxy.trusted(context.remoteAddress?.ipAddress)
        let checked = proxy.checkedRequest(request.headers, fromTrusted: fromTrusted)
        let narrowing = request.uri.query.map { CheckNarrowing.parse(query: Substring($0)) } ?? []
        // The token the original request carries: in its Authorization field (passed to the check), or in its query
        // as the trusted proxy says the original URI.
        let credential = BearerCredential.read(authorization: request.headers[values: .authorization], query: proxy.checkedQuery(request.headers, fromTrusted: fromTrusted))
        return await policy.decide(
            checked, narrowing: narrowing, credential: credential, clientAddress: proxy.clientAddress(request, context: context), logger: context.logger
        ) {
            credential == .none ? context.visitor : await sessions.doorVisitor(request, credential: credential, context: context)
        }
    }

    /// The identity headers, and the assertion addressed to the forwarded origin (`X-Forwarded-Proto` and
    /// `-Host`); without a forwarded origin there is no audience, so no assertion. `client`: who holds the bearer
    /// token that let the person in (`X-Auth-Request-Client`, the assertion's `azp`).
    private func allowed(_ user: UserRecord, groups: [String], client: String?, status: HTTPResponse.Status, request: Request, context: ServerContext) async -> Response {
        var token: String?
        if let audience = proxy.forwardedOrigin(request.headers, peer: context.remoteAddress?.ipAddress) {
            token = await assertions.assertion(for: user, groups: groups, audience: audience, client: client)
        }
        return Response(status: status, headers: IdentityHeaders.checkFields(user, groups: groups, assertion: token, client: client))
    }

    /// The URL the browser asked the proxy for, from trusted `X-Forwarded-Proto`, `-Host` and `-Uri`.
    private func original(_ request: Request, context: ServerContext) -> String? {
        guard let host = proxy.forwarded(.xForwardedHost, request, context: context),
            let uri = proxy.forwarded(.xForwardedUri, request, context: context), uri.hasPrefix("/")
        else { return nil }
        let scheme = proxy.forwarded(.xForwardedProto, request, context: context)?.lowercased() == "https" ? "https" : "http"
        return scheme + "://" + host + uri
    }

}


extension HTTPField.Name {
    /// `X-Forwarded-Method`, `X-Forwarded-Uri`: the original request, from Traefik and Caddy.
    static let xForwardedMethod = HTTPField.Name("X-Forwarded-Method")
    static let xForwardedUri = HTTPField.Name("X-Forwarded-Uri")
}
