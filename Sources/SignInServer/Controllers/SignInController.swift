import AppleSignIn
import Foundation
import HTTPTypes
import Hummingbird
import JOSE
import Logging

/// The sign-in page, its button's style sheet, and the start of a sign-in (the redirect to Apple).
struct SignInController: Sendable {
    let flow: SignInFlow
    let renderer: PageRenderer
    let cookies: CookiePolicy
    let settings: ServerSettings
    let metrics: ServerMetrics
    let proxy: ClientAddressResolver
    /// Apple's origin (for the popup's postMessage check) and the return URL's host, worked out once: reading
    /// a Foundation URL's parts on every request showed in profiles.
    let appleOrigin: String
    let returnAuthority: String
    /// The sign-in page's four shapes (language × signed in or not), rendered at start: building and looking up a
    /// cache key per view was half of the page's own work in a profile.
    private let shapes: [PageLanguage: (signedOut: PreparedPage, signedIn: PreparedPage)]
    /// The English shapes, for a language without its own (none: every language has them).
    private let fallbackShapes: (signedOut: PreparedPage, signedIn: PreparedPage)
    private static let slotNames = ["startURL", "popupStartURL", "csrfToken"]

    init(flow: SignInFlow, renderer: PageRenderer, cookies: CookiePolicy, settings: ServerSettings, metrics: ServerMetrics, proxy: ClientAddressResolver) {
        self.flow = flow
        self.renderer = renderer
        self.cookies = cookies
        self.settings = settings
        self.metrics = metrics
        self.proxy = proxy
        // Both URLs were checked to be absolute http(s) URLs with a host when the configuration was read.
        appleOrigin = ServerSettings.origin(of: settings.apple.authorizeBaseURL)
        returnAuthority = ServerSettings.authority(of: settings.returnURL)
        let origin = appleOrigin
        func shapes(_ language: PageLanguage) -> (signedOut: PreparedPage, signedIn: PreparedPage) {
            func shape(signedIn: Bool) -> PreparedPage {
                renderer.prepare(
                    "signin", title: renderer.string("signInTitle", language), language: language,
                    fixed: ["signedIn": signedIn],
                    fixedText: [
                        "buttonStyle": settings.button.style.rawValue,
                        "buttonTitle": renderer.string(settings.button.title.stringKey, language),
                        "appleOrigin": origin,
                    ],
                    slotNames: Self.slotNames
                )
            }
            return (shape(signedIn: false), shape(signedIn: true))
        }
        let english = shapes(.english)
        fallbackShapes = english
        self.shapes = Dictionary(uniqueKeysWithValues: PageLanguage.allCases.map { ($0, $0 == .english ? english : shapes($0)) })
    }

    /// Where a sign-in without a return path lands: siwa's session page, or in front of an upstream the site's home
    /// page (`/session` is the site's there).
    private var landing: String { settings.upstream == nil ? "/session" : "/" }

    /// `sessions` guards the sign-in page, which says when the person is already signed in.
    func addRoutes(to router: Router<ServerContext>, sessions: RouterGroup<ServerContext>) {
        for path in DoorRoutes.Page.signInPaths { sessions.get(RouterPath(path), use: signInPage) }
        router.get("/button.css") { _, _ in
            Response(status: .ok, headers: [.contentType: "text/css; charset=utf-8", .cacheControl: "max-age=300"], body: .init(byteBuffer: ByteBuffer(string: settings.button.css)))
        }
        router.get("/auth/apple", use: start)
    }

    @Sendable func signInPage(_ request: Request, context: ServerContext) async throws -> Response {
        let signedIn = if case .signedIn = context.visitor { true } else { false }
        let returnTo = request.uri.queryParameters.get("return_to").map { String($0) }
        return signInPage(language: request.pageLanguage, signedIn: signedIn, returnTo: returnTo, csrfCookie: request.cookieValue(cookies.csrfName)).response
    }

    /// The sign-in page in `language`, saying whether the person is `signedIn`, starting a sign-in that lands on
    /// `returnTo` (a path of this site; anything else lands on `landing`), with the form token of `csrfCookie` (a
    /// new one, and its cookie, for a visitor without one). One function for the handlers and the byte path
    /// (`SitePages`).
    func signInPage(language: PageLanguage, signedIn: Bool, returnTo: String?, csrfCookie: String?) -> RenderedPage {
        let returnTo = SignInFlow.safeReturnPath(returnTo, otherwise: landing)
        let csrf = csrfCookie ?? RandomToken.generate()
        let encodedReturn = FormEncoding.encode(returnTo)
        // Every language has its shapes (made for `PageLanguage.allCases` at start).
        let shapes = shapes[language] ?? fallbackShapes
        // In the order of `slotNames`.
        var page = (signedIn ? shapes.signedIn : shapes.signedOut).rendered([
            "/auth/apple?return_to=" + encodedReturn, "/auth/apple?mode=popup&return_to=" + encodedReturn, csrf,
        ])
        page.headers.append(HTTPField(name: .setCookie, value: cookies.csrfHeader(csrf)))
        return page
    }

    /// `GET /auth/apple?return_to=/path` (a path of this site) or `?rd=URL` (an absolute URL on an allowed
    /// redirect domain; any other is ignored and the sign-in lands on `/`), or `?invite=<token>` (from an
    /// invitation's page: the person is made a member when the sign-in completes, and lands on what became of it).
    @Sendable func start(_ request: Request, context: ServerContext) async throws -> Response {
        var returnTo: String
        var again: String  // the same start, as the query of a hop to another host: only what was accepted
        let invite = request.uri.queryParameters.get("invite").flatMap { Invitations.isToken($0) ? String($0) : nil }
        if let invite {
            returnTo = landing
            again = "invite=" + invite
        } else if let rd = request.uri.queryParameters.get("rd") {
            returnTo = settings.front.redirects.allowed(String(rd)) ?? "/"
            again = "rd=" + FormEncoding.encode(returnTo)
        } else {
            returnTo = SignInFlow.safeReturnPath(request.uri.queryParameters.get("return_to"), otherwise: landing)
            again = "return_to=" + FormEncoding.encode(returnTo)
        }
        // The binding cookie must be set on the host Apple returns to, or it will not come back.
        // In local mode, move the browser to the return URL's host (localhost vs 127.0.0.1) before setting it;
        // behind a proxy in Apple mode, a browser on plain HTTP would never send the Secure binding cookie back.
        let wrongHost = settings.mode == .local && proxy.host(request, context: context).map { $0 != returnAuthority } ?? false
        let plainBehindProxy = settings.secureCookies && proxy.trusted(context.remoteAddress?.ipAddress)
            && proxy.scheme(request, context: context) != "https"
        if wrongHost || plainBehindProxy {
            // Once only: behind a proxy that passes neither the browser's host nor its scheme (nginx's defaults), the
            // browser is already where this sends it, and a second hop would be a loop. `moved` marks the hop.
            if request.uri.queryParameters.get("moved") == nil {
                let mode = request.uri.queryParameters.get("mode") == "popup" ? "mode=popup&" : ""
                return Response.redirect(to: settings.origin + "/auth/apple?" + mode + again + "&moved=1", type: .found)
            }
            context.logger.notice(
                "sign-in started on another host or scheme than public_url's, after a move there: the proxy in front passes neither X-Forwarded-Host nor X-Forwarded-Proto (or is not in trusted_proxies); the sign-in goes on",
                metadata: ["host": "\(proxy.host(request, context: context) ?? "none")", "scheme": "\(proxy.scheme(request, context: context))"]
            )
        }
        let started: SignInFlow.Started
        do {
            started = try await flow.start(
                returnTo: returnTo, responseMode: request.uri.queryParameters.get("mode") == "popup" ? .webMessage : .formPost,
                invitationHash: invite.map(SignInFlow.hash)
            )
        } catch {
            context.logger.error("could not start a sign-in", metadata: ["error": "\(error)"])
            throw ErrorPage.storeUnavailable(retryURL: "/")
        }
        metrics.signInsStarted.increment()
        var response = Response.redirect(to: started.authorizeURL.absoluteString, type: .found)
        // The session this browser holds, if any, ends when the sign-in completes (`SignInCompletion`): Apple's
        // cross-site return does not carry the session cookie (SameSite=Lax), so the binding cookie names it.
        let replaced = request.cookieValue(cookies.sessionName).flatMap(SessionCookie.hash)
        response.setCookie(cookies.binding(CookiePolicy.bindingValue(started.bindingToken, replacing: replaced)))
        response.headers[.cacheControl] = "no-store"
        return response
    }
}
