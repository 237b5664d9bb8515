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
        let decision = await decision(request, context: context)
        if let refusal = policy.refusal(decision, at: .check, request: request, method: request.method.rawValue, original: nil) { return refusal }
        guard case .allow(let user, let groups) = decision else { return DoorPolicy.empty(.accepted) }
        return await allowed(user, groups: groups, status: .accepted, request: request, context: context)
    }

    @Sendable func forward(_ request: Request, context: ServerContext) async throws -> Response {
        let decision = await decision(request, context: context)
        let method = proxy.forwarded(.xForwardedMethod, request, context: context)?.uppercased() ?? request.method.rawValue
        if let refusal = policy.refusal(decision, at: .forward, request: request, method: method, original: original(request, context: context)) {
            return refusal
        }
        guard case .allow(let user, let groups) = decision else { return DoorPolicy.empty(.ok) }
        return await allowed(user, groups: groups, status: .ok, request: request, context: context)
    }

    /// The door policy's decision on the request the proxy asks about (`ClientAddressResolver.checkedRequest`),
    /// narrowed by the check's own query (`CheckNarrowing`), with the session `SessionMiddleware` looked up.
    private func decision(_ request: Request, context: ServerContext) async -> AccessDecision {
        let checked = proxy.checkedRequest(request.headers, fromTrusted: proxy.trusted(context.remoteAddress?.ipAddress))
        let narrowing = request.uri.query.map { CheckNarrowing.parse(query: Substring($0)) } ?? []
        return await policy.decide(checked, narrowing: narrowing, clientAddress: proxy.clientAddress(request, context: context), logger: context.logger) {
            context.visitor
        }
    }

    /// The identity headers, and the assertion addressed to the forwarded origin (`X-Forwarded-Proto` and
    /// `-Host`); without a forwarded origin there is no audience, so no assertion.
    private func allowed(_ user: UserRecord, groups: [String], status: HTTPResponse.Status, request: Request, context: ServerContext) async -> Response {
        var token: String?
        if let audience = proxy.forwardedOrigin(request.headers, peer: context.remoteAddress?.ipAddress) {
            token = await assertions.assertion(for: user, groups: groups, audience: audience)
        }
        return Response(status: status, headers: IdentityHeaders.checkFields(user, groups: groups, assertion: token))
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
