import AppleSignIn
import Foundation
import Hummingbird
import Logging

/// The signed-in person's session page and sign-out.
struct SessionController: Sendable {
    let store: any UsersAndSessions
    let renderer: PageRenderer
    let cookies: CookiePolicy
    let redirects: RedirectPolicy
    let audit: AuditTrail
    /// The session page's shapes (language, private relay, forwarding, name and email shared or not), each rendered
    /// once: a view fills one in place of building a cache key from its values.
    private let sessionShapes = PreparedShapes()
    private static let sessionSlots = ["sub", "name", "email", "signedInAt", "signedInAtISO", "expiresAt", "expiresAtISO", "csrfToken"]

    /// `sessions`: the routes `SessionMiddleware` guards.
    func addRoutes(to sessions: RouterGroup<ServerContext>) {
        // Also under /auth/, which stays siwa's in front of an upstream (`SiwaPaths`); the pages link there.
        let signedIn = sessions.group(context: SignedInContext.self)
        for path in DoorRoutes.Page.sessionPaths { signedIn.get(RouterPath(path), use: sessionPage) }
        sessions.post("/auth/signout", use: signOut)
        sessions.get("/auth/sign-out", use: confirmSignOut)
        sessions.post("/auth/sign-out", use: signOut)
    }

    /// `GET /auth/sign-out?rd=URL`: a page asking to confirm (a link alone never signs anyone out). Without a
    /// session there is nothing to end: straight on to the allowed `rd`, or the sign-in page.
    @Sendable func confirmSignOut(_ request: Request, context: ServerContext) async throws -> Response {
        let rd = redirects.allowed(request.uri.queryParameters.get("rd").map { String($0) })
        guard case .signedIn(let session, let user) = context.visitor else {
            if case .storeUnavailable(let retryURL) = context.visitor { throw ErrorPage.storeUnavailable(retryURL: retryURL) }
            return Response.redirect(to: rd ?? "/", type: .found)
        }
        let language = request.pageLanguage
        var page = renderer.page(
            "signout", title: renderer.string("signOutHeading", language), language: language,
            slots: ["csrfToken": session.csrfToken, "rd": rd ?? "", "who": user.displayName ?? user.email ?? user.subject]
        )
        page.allowFormRedirect(to: rd)
        return page
    }

    @Sendable func sessionPage(_ request: Request, context: SignedInContext) async throws -> Response {
        sessionPage(language: request.pageLanguage, session: context.session, user: context.user).response
    }

    /// The session page of `session`, `user`'s, in `language`. One function for the handlers and the byte path
    /// (`SitePages`).
    func sessionPage(language: PageLanguage, session: SessionRecord, user: UserRecord) -> RenderedPage {
        let dates = DateFormatters.shared
        let name = user.displayName ?? ""
        let email = user.email ?? ""
        let languageIndex = PageLanguage.allCases.firstIndex(of: language) ?? 0
        let key = languageIndex << 4 | (user.isPrivateEmail ? 1 : 0) | (user.emailForwardingDisabled ? 2 : 0) | (name.isEmpty ? 4 : 0) | (email.isEmpty ? 8 : 0)
        let shape = sessionShapes.shape(key) {
            renderer.prepare(
                "session", title: renderer.string("sessionTitle", language), language: language,
                fixed: ["privateEmail": user.isPrivateEmail, "forwardingDisabled": user.emailForwardingDisabled],
                slotNames: Self.sessionSlots, absent: Set([name.isEmpty ? "name" : nil, email.isEmpty ? "email" : nil].compactMap { $0 })
            )
        }
        // In the order of `sessionSlots`.
        return shape.rendered([
            user.subject, name, email, dates.display(session.createdAt, language) + " UTC", dates.isoString(session.createdAt),
            dates.display(session.expiresAt, language) + " UTC", dates.isoString(session.expiresAt), session.csrfToken,
        ])
    }

    /// `POST /auth/signout` with the session's CSRF token. Without a live session there is nothing to end: back
    /// to the sign-in page (forgetting a stale cookie).
    @Sendable func signOut(_ request: Request, context: ServerContext) async throws -> Response {
        var request = request
        let session: SessionRecord
        let user: UserRecord
        switch context.visitor {
        case .signedIn(let found, let foundUser): (session, user) = (found, foundUser)
        case .storeUnavailable: throw ErrorPage.storeUnavailable(retryURL: "/auth/session")
        case .anonymous(let hadCookie):
            var response = Response.redirect(to: "/", type: .normal)
            if hadCookie { response.setCookie(cookies.expired(cookies.sessionName)) }
            return response
        case .notLooked, .bearer, .badToken: throw ErrorPage.internal()
        }
        let body = (try? await request.collectBody(upTo: 4096)) ?? ByteBuffer()
        let fields = (try? CallbackPayload.parseFields(body.readableBytesView)) ?? [:]
        return try await Self.end(
            session, csrfToken: fields["csrf_token"], store: store, cookies: cookies, goingTo: redirects.allowed(fields["rd"]) ?? "/", logger: context.logger,
            audit: audit, user: user
        )
    }

    /// Ends `session` when `csrfToken` is its own (else the form-expired page), forgets the cookie, and sends the
    /// browser on to `target` (which the caller has checked): sign-out here and a client's end-session request.
    static func end(
        _ session: SessionRecord, csrfToken: String?, store: any UsersAndSessions, cookies: CookiePolicy, goingTo target: String, logger: Logger,
        metadata: Logger.Metadata = [:], audit: AuditTrail, user: UserRecord
    ) async throws -> Response {
        guard let csrfToken, ConstantTime.equals(csrfToken, session.csrfToken) else {
            logger.notice("sign-out refused: CSRF token missing or wrong", metadata: metadata)
            throw ErrorPage.csrf(retryURL: "/auth/session")
        }
        do {
            _ = try await store.deleteSession(idHash: session.idHash)
        } catch {
            logger.error("store unavailable", metadata: ["error": "\(error)"])
            throw ErrorPage.storeUnavailable(retryURL: "/auth/session")
        }
        logger.info("signed out", metadata: metadata)
        audit.record(AuditEvent("sign-out", sub: user.subject, email: user.email, reason: metadata["client_id"].map { "end-session by \($0)" }))
        var response = Response.redirect(to: target, type: .normal)
        response.setCookie(cookies.expired(cookies.sessionName))
        return response
    }
}
