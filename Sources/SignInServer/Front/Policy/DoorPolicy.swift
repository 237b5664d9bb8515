import HTTPTypes
import Hummingbird
import Logging

/// How the doors that answer with Hummingbird's `Response` render the one verdict (`DoorVerdicts`, in Verdict/):
/// the built-in proxy (`--upstream`, every carrier), nginx's `auth_request` check, the forward auth of Traefik and
/// Caddy, and Envoy's `ext_authz` (over HTTP as such an answer, over gRPC copied into a `DeniedHttpResponse`). The
/// decision is not made here: only what siwa answers when a request is not let through.
struct DoorPolicy: Sendable {
    let verdicts: DoorVerdicts
    let renderer: PageRenderer
    let security: SecurityHeadersMiddleware<ServerContext>

    var front: FrontSettings { verdicts.front }

    /// Which door asks: what a refusal looks like depends on who reads it.
    enum Door {
        /// `--upstream`: a person's browser, a page's script, or an API client reads siwa's answer itself.
        case upstream
        /// `/auth/check` (nginx `auth_request`): statuses without a body; nginx shows its own pages.
        case check
        /// `/auth/forward` (Traefik, Caddy) and Envoy's `ext_authz`: the proxy passes siwa's answer to the browser as
        /// it is, on the app's host.
        case forward
    }

    /// The verdict on `request` (`DoorVerdicts.decide`).
    func decide(_ request: DoorRequest, logger: Logger, visitor: () async -> Visitor) async -> DoorVerdict {
        await verdicts.decide(request, logger: logger, visitor: visitor)
    }

    /// siwa's answer at `door` when `verdict` does not let the request through (callers render `.allow` themselves,
    /// so it never comes here; answered as an internal error if it did). `fields`: the
    /// original request's (its language, whether it asked for JSON); `original`: the URL the request was for, when
    /// known (a store failure's page offers to try it again).
    func refusal(_ verdict: DoorVerdict, at door: Door, fields: HTTPFields, original: String?) -> RenderedPage {
        let challenge = verdict.challenge
        switch (verdict, door) {
        case (.allow, _):
            return Self.empty(.internalServerError)
        case (.badToken, .check), (.signIn, .check):
            // nginx passes 401 and 403 on (with WWW-Authenticate) and turns any other status into a 500.
            return Self.challenged(Self.empty(.unauthorized), challenge ?? DoorVerdict.challenge(error: nil))
        case (.deny, .check):
            return Self.challenged(Self.empty(.forbidden), challenge)
        case (.unavailable, .check):
            return Self.empty(.serviceUnavailable)
        case (.stepUp, .check):
            // nginx passes the 401 and its challenge on; its error_page for 401 sends a browser to sign in.
            return Self.challenged(Self.empty(.unauthorized), challenge)
        case (.stepUp(true, let returnTo, _), _):
            // A page that says why, whose button starts the sign-in with Apple and comes back to the same URL.
            // A 401 says its challenge (RFC 9110 §15.5.2), which says why (RFC 9470).
            return Self.challenged(page(.signInAgain(url: front.signInURL(returningTo: returnTo)), fields), challenge)
        case (.stepUp, _):
            return own(Self.challenged(
                RenderedPage.problem(.unauthorized, "insufficient_user_authentication", "Sign in again", "This address asks for a more recent sign-in with Apple."), challenge
            ))
        case (.badToken(let problem), _):
            let status = verdict.status ?? .unauthorized
            return own(Self.challenged(RenderedPage.problem(status, problem.code.rawValue, "Bearer token not accepted", problem.description), challenge))
        case (.signIn(true, let returnTo), _):
            return own(front.signInRedirect(returningTo: returnTo))
        case (.signIn, _):
            return own(Self.challenged(renderer.problem(.signedOut), challenge))
        case (.unavailable(let retryURL), .upstream):
            return page(.storeUnavailable(retryURL: retryURL), fields)
        case (.unavailable, .forward):
            return own(renderer.rendered(.storeUnavailable(retryURL: original ?? "/"), language: PageLanguage.negotiate(fields[.acceptLanguage])))
        case (.deny(_, _, true), _):
            return own(Self.challenged(
                RenderedPage.problem(.forbidden, "denied", "Not allowed", "This site's access rules do not let this request through."), challenge
            ))
        case (.deny(let user, _, _), .upstream):
            return own(renderer.denied(
                user, signOutURL: front.publicOrigin + "/auth/sign-out", language: PageLanguage.negotiate(fields[.acceptLanguage]), contact: front.invitationContact
            ))
        case (.deny(let user, _, _), .forward):
            // Shown on the app's host: siwa's stylesheets are linked at public_url.
            return own(renderer.denied(
                user, signOutURL: front.publicOrigin + "/auth/sign-out", language: PageLanguage.negotiate(fields[.acceptLanguage]), assetOrigin: front.publicOrigin,
                contact: front.invitationContact
            ))
        }
    }

    /// `response` with `challenge` as its `WWW-Authenticate`, when there is one.
    static func challenged(_ page: RenderedPage, _ challenge: String?) -> RenderedPage {
        guard let challenge else { return page }
        var page = page
        page.headers[.wwwAuthenticate] = challenge
        return page
    }

    /// `page` as a page, or as problem details for a client that asked for JSON, with siwa's security headers.
    func page(_ page: ErrorPage, _ fields: HTTPFields) -> RenderedPage {
        own(fields.acceptsJSON ? renderer.problem(page) : renderer.rendered(page, language: PageLanguage.negotiate(fields[.acceptLanguage])))
    }

    /// A check's answer without a body, never cached.
    static func empty(_ status: HTTPResponse.Status) -> RenderedPage {
        RenderedPage(status: status, headers: [.cacheControl: "no-store"], body: ByteBuffer())
    }

    /// A check's answer that lets the request through, before its identity fields: no body, never cached (a cache
    /// keyed by URL in front of siwa must not hand one person's identity to the next), and none of a page's security
    /// headers, since only the proxy that asked reads it (nginx's `auth_request`, Traefik's and Caddy's forward auth,
    /// Envoy's `ext_authz` take the fields they are configured to and drop the rest). Envoy parses every field it is
    /// given: the page's security headers were about 27,000 of the 425,000 instructions Envoy spent on a request it
    /// asked siwa about (`Benchmarks/run-callgrind.sh`, docs/benchmarks.md).
    static func passed(_ status: HTTPResponse.Status) -> RenderedPage {
        var fields: HTTPFields = [.cacheControl: "no-store"]
        fields.markReadByProxyOnly()
        return RenderedPage(status: status, headers: fields, body: ByteBuffer())
    }

    /// `response` with siwa's security headers (the router's middleware adds them too; setting them twice is one set).
    private func own(_ page: RenderedPage) -> RenderedPage {
        var page = page
        security.secure(&page.headers)
        return page
    }
}
