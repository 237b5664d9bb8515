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
        switch AccessDecision(context.visitor, policy: front.policy) {
        case .allow(let user): return await allowed(user, status: .accepted, request: request, context: context)
        case .deny: return Self.empty(.forbidden)
        case .signIn: return Self.empty(.unauthorized)
        case .unavailable: return Self.empty(.serviceUnavailable)
        }
    }

    @Sendable func forward(_ request: Request, context: ServerContext) async throws -> Response {
        switch AccessDecision(context.visitor, policy: front.policy) {
        case .allow(let user): return await allowed(user, status: .ok, request: request, context: context)
        case .deny(let user):
            // Shown on the app's host: siwa's stylesheets are linked at public_url.
            return renderer.denied(user, signOutURL: front.publicOrigin + "/auth/sign-out", language: request.pageLanguage, assetOrigin: front.publicOrigin)
        case .unavailable: return renderer.render(.storeUnavailable(retryURL: original(request, context: context) ?? "/"), language: request.pageLanguage)
        case .signIn:
            let method = proxy.forwarded(.xForwardedMethod, request, context: context)?.uppercased() ?? request.method.rawValue
            guard request.isPageNavigation(method: method) else { return Self.empty(.unauthorized) }
            return front.signInRedirect(returningTo: original(request, context: context))
        }
    }

    /// The identity headers, and the assertion addressed to the forwarded origin (`X-Forwarded-Proto` and
    /// `-Host` from a trusted proxy); without a forwarded origin there is no audience, so no assertion.
    private func allowed(_ user: UserRecord, status: HTTPResponse.Status, request: Request, context: ServerContext) async -> Response {
        var token: String?
        if let audience = proxy.forwardedOrigin(request.headers, peer: context.remoteAddress?.ipAddress) {
            token = await assertions.assertion(for: user, audience: audience)
        }
        return Response(status: status, headers: Self.allowedFields(user, assertion: token))
    }

    /// The header fields of a request let through: `no-store`, the identity headers, and the assertion when there
    /// is one. The byte path (`RawFrontPath`) answers with the same fields.
    static func allowedFields(_ user: UserRecord, assertion: String?) -> HTTPFields {
        var fields: HTTPFields = [.cacheControl: "no-store"]
        fields.append(contentsOf: IdentityHeaders.fields(for: user))
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
    /// `allowed_emails`, `allowed_email_domains`, `allowed_subs`: what the running server applies now. Assigning
    /// gives these settings a policy of their own; `reload(policy:)` changes it for every copy (SIGHUP).
    public var policy: AccessPolicy {
        get { livePolicy.withLock { $0 } }
        set { livePolicy = LivePolicy(newValue) }
    }

    private typealias LivePolicy = SharedValue<AccessPolicy>
    private var livePolicy: LivePolicy

    public init(publicOrigin: String, redirects: RedirectPolicy = RedirectPolicy(domains: []), policy: AccessPolicy = AccessPolicy()) {
        self.publicOrigin = publicOrigin.hasSuffix("/") ? String(publicOrigin.dropLast()) : publicOrigin
        self.redirects = redirects
        livePolicy = LivePolicy(policy)
    }

    /// Puts `policy` in force for the server built with these settings (and every copy of them); returns the
    /// policy it replaces.
    @discardableResult
    public func reload(policy: AccessPolicy) -> AccessPolicy {
        livePolicy.withLock { current in
            defer { current = policy }
            return current
        }
    }
}

/// A value shared by reference between copies of the settings that hold it, read and replaced under a lock.
final class SharedValue<Value: Sendable>: Sendable {
    private let value: Mutex<Value>

    init(_ value: Value) {
        self.value = Mutex(value)
    }

    func withLock<T>(_ body: (inout Value) -> T) -> T {
        value.withLock { body(&$0) }
    }
}

extension HTTPField.Name {
    /// `X-Forwarded-Method`, `X-Forwarded-Uri`: the original request, from Traefik and Caddy.
    static let xForwardedMethod = HTTPField.Name("X-Forwarded-Method")
    static let xForwardedUri = HTTPField.Name("X-Forwarded-Uri")
}
