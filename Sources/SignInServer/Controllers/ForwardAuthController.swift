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
    let renderer: PageRenderer
    let front: FrontSettings
    let proxy: ClientAddressResolver
    let assertions: IdentityAssertions
    let audit: AuditTrail

    /// `sessions`: the routes `SessionMiddleware` guards.
    func addRoutes(to sessions: RouterGroup<ServerContext>) {
        sessions.get("/auth/check", use: check)
        sessions.get("/auth/forward", use: forward)
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
        switch decision(request, context: context) {
        case .pass: return Self.empty(.accepted)
        case .allow(let user, let groups): return await allowed(user, groups: groups, status: .accepted, request: request, context: context)
        case .deny: return Self.empty(.forbidden)
        case .signIn: return Self.empty(.unauthorized)
        case .unavailable: return Self.empty(.serviceUnavailable)
        }
    }

    @Sendable func forward(_ request: Request, context: ServerContext) async throws -> Response {
        switch decision(request, context: context) {
        case .pass: return Self.empty(.ok)
        case .allow(let user, let groups): return await allowed(user, groups: groups, status: .ok, request: request, context: context)
        case .deny(let user, _):
            // Shown on the app's host: siwa's stylesheets are linked at public_url.
            return renderer.denied(user, signOutURL: front.publicOrigin + "/auth/sign-out", language: request.pageLanguage, assetOrigin: front.publicOrigin)
        case .unavailable: return renderer.render(.storeUnavailable(retryURL: original(request, context: context) ?? "/"), language: request.pageLanguage)
        case .signIn:
            let method = proxy.forwarded(.xForwardedMethod, request, context: context)?.uppercased() ?? request.method.rawValue
            guard request.isPageNavigation(method: method) else { return Self.empty(.unauthorized) }
            return front.signInRedirect(returningTo: original(request, context: context))
        }
    }

    /// The decision for the request the proxy asks about (`ClientAddressResolver.checkedRequest`), narrowed by the
    /// check's own query (`CheckNarrowing`); logged when a rule had to refuse for want of the original request.
    private func decision(_ request: Request, context: ServerContext) -> AccessDecision {
        let checked = proxy.checkedRequest(request.headers, fromTrusted: proxy.trusted(context.remoteAddress?.ipAddress))
        let narrowing = request.uri.query.map { CheckNarrowing.parse(query: Substring($0)) } ?? []
        let decision = AccessDecision(context.visitor, request: checked, access: front.access, narrowing: narrowing)
        if case .deny(let user, let judgement) = decision {
            if let reason = judgement.reason {
                context.logger.warning("access rule could not be applied", metadata: ["rule": "\(judgement.rule)", "reason": "\(reason)"])
            }
            audit.record(.denied(user, checked, judgement, ip: proxy.clientAddress(request, context: context)))
        }
        return decision
    }

    /// The identity headers, and the assertion addressed to the forwarded origin (`X-Forwarded-Proto` and
    /// `-Host`); without a forwarded origin there is no audience, so no assertion.
    private func allowed(_ user: UserRecord, groups: [String], status: HTTPResponse.Status, request: Request, context: ServerContext) async -> Response {
        var token: String?
        if let audience = proxy.forwardedOrigin(request.headers, peer: context.remoteAddress?.ipAddress) {
            token = await assertions.assertion(for: user, groups: groups, audience: audience)
        }
        return Response(status: status, headers: Self.allowedFields(user, groups: groups, assertion: token))
    }

    /// The header fields of a request let through: `no-store`, the identity headers, and the assertion when there
    /// is one. The byte path (`RawFrontPath`) answers with the same fields.
    static func allowedFields(_ user: UserRecord, groups: [String], assertion: String?) -> HTTPFields {
        var fields: HTTPFields = [.cacheControl: "no-store"]
        fields.append(contentsOf: IdentityHeaders.fields(for: user, groups: groups))
        if let assertion, let name = IdentityHeaders.assertion { fields[name] = assertion }
        return fields
    }

    /// The URL the browser asked the proxy for, from trusted `X-Forwarded-Proto`, `-Host` and `-Uri`.
    private func original(_ request: Request, context: ServerContext) -> String? {
        guard let host = proxy.forwarded(.xForwardedHost, request, context: context),
            let uri = proxy.forwarded(.xForwardedUri, request, context: context), uri.hasPrefix("/")
        else { return nil }
        let scheme = proxy.forwarded(.xForwardedProto, request, context: context)?.lowercased() == "https" ? "https" : "http"
        return scheme + "://" + host + uri
    }

    static func empty(_ status: HTTPResponse.Status) -> Response {
        Response(status: status, headers: [.cacheControl: "no-store"])
    }
}

/// The front's settings: where siwa is reached, where it may send the browser, and who may pass.
public struct FrontSettings: Sendable {
    /// `scheme://host[:port]` of siwa as browsers reach it, without a trailing slash (`public_url`).
    public var publicOrigin: String
    /// `allowed_redirect_domains`.
    public var redirects: RedirectPolicy
    /// The access rules, the global policy and the groups in force (`AccessControl`), shared by every copy of these
    /// settings: SIGHUP and a change of the configuration file replace what it holds for all of them.
    public var access: AccessControl

    /// The global policy (`allowed_emails`, `allowed_email_domains`, `allowed_subs`, `allowed_groups`) in force.
    /// Assigning gives these settings access control of their own, with no rules.
    public var policy: AccessPolicy {
        get { access.configuration.global }
        set { access = AccessControl(AccessConfiguration(global: newValue)) }
    }

    public init(publicOrigin: String, redirects: RedirectPolicy = RedirectPolicy(domains: []), policy: AccessPolicy = AccessPolicy()) {
        self.init(publicOrigin: publicOrigin, redirects: redirects, access: AccessControl(AccessConfiguration(global: policy)))
    }

    public init(publicOrigin: String, redirects: RedirectPolicy = RedirectPolicy(domains: []), access: AccessControl) {
        self.publicOrigin = publicOrigin.hasSuffix("/") ? String(publicOrigin.dropLast()) : publicOrigin
        self.redirects = redirects
        self.access = access
    }
}

extension HTTPField.Name {
    /// `X-Forwarded-Method`, `X-Forwarded-Uri`: the original request, from Traefik and Caddy.
    static let xForwardedMethod = HTTPField.Name("X-Forwarded-Method")
    static let xForwardedUri = HTTPField.Name("X-Forwarded-Uri")
}
