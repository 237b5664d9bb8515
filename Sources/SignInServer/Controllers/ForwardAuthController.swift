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
        let fromTrusted = proxy.trusted(context.remoteAddress?.ipAddress)
        let method = proxy.forwardedMethod(request.headers, fromTrusted: fromTrusted, own: request.method.rawValue)
        return await answer(request, at: .forward, method: method, original: proxy.forwardedURL(request.headers, fromTrusted: fromTrusted), passStatus: .ok, context: context)
    }

    /// A check's answer at `door`: the verdict's refusal, or `passStatus` with the identity when a person is let in,
    /// and the `Authorization` the upstream is to get. That is said twice: as `X-Auth-Request-Authorization`
    /// (nginx's `auth_request_set`, Caddy's `copy_headers`) and as `Authorization` (Traefik's `authResponseHeaders`
    /// copies a field under its own name only), so that a proxy configured as docs/front.md shows sets the
    /// upstream's `Authorization` from the answer, and drops it when the answer has none.
    private func answer(
        _ request: Request, at door: DoorPolicy.Door, method: String, original: String?, passStatus: HTTPResponse.Status, context: ServerContext
    ) async -> Response {
        let asked = doorRequest(request, method: method, original: original, context: context)
        let verdict = await policy.decide(asked, logger: context.logger) {
            asked.credential == .none ? context.visitor : await sessions.doorVisitor(request, credential: asked.credential, context: context)
        }
        guard case .allow(let admission) = verdict else {
            return policy.refusal(verdict, at: door, fields: request.headers, original: original).response
        }
        var response = DoorPolicy.passed(passStatus).response
        if let person = admission.person {
            var token: String?
            if let audience = proxy.forwardedOrigin(request.headers, peer: context.remoteAddress?.ipAddress) {
                token = await assertions.assertion(for: person, audience: audience)
            }
            response.headers.append(contentsOf: IdentityHeaders.fields(for: person, assertion: token))
        }
        if let authorization = admission.authorization {
            response.headers[.authorization] = authorization
            if let name = IdentityHeaders.authorization { response.headers[name] = authorization }
        }
        return response
    }

    /// The request the proxy asks about, as every door describes it: what a trusted proxy says of the original
    /// request (`ClientAddressResolver.checkedRequest`), narrowed by the check's own query (`CheckNarrowing`). The
    /// token the original request carries is in its `Authorization` field (passed to the check), or in its query as
    /// the trusted proxy says the original URI.
    private func doorRequest(_ request: Request, method: String, original: String?, context: ServerContext) -> DoorRequest {
        let fromTrusted = proxy.trusted(context.remoteAddress?.ipAddress)
        return DoorRequest(
            asked: proxy.checkedRequest(request.headers, fromTrusted: fromTrusted), method: method, fields: request.headers,
            credential: BearerCredential.read(authorization: request.headers[values: .authorization], query: proxy.checkedQuery(request.headers, fromTrusted: fromTrusted)),
            clientAddress: proxy.clientAddress(request, context: context), original: original,
            narrowing: request.uri.query.map { CheckNarrowing.parse(query: Substring($0)) } ?? []
        )
    }
}
