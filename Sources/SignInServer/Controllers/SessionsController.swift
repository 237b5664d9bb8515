import AppleSignIn
import Foundation
import Hummingbird
import Logging

/// A person's own sessions (issue 28, part A): `GET /auth/sessions` lists where they are signed in, each with when
/// it began and was last used, the browser and system, the network and how it came, the current one marked; a
/// session is ended one at a time or "everywhere else", by POST with the CSRF token and a confirmation step. The
/// same list as JSON at `/auth/api/sessions` for native apps (their bearer). Ending a session ends it for the
/// apps too (`BackchannelLogout`).
struct SessionsController: Sendable {
    let store: any UsersAndSessions & SessionList
    let renderer: PageRenderer
    let cookies: CookiePolicy
    let audit: AuditTrail
    /// Who asks (the store shares out its look-ups by client address).
    let proxy: ClientAddressResolver

    func addRoutes(to router: Router<ServerContext>, sessions: RouterGroup<ServerContext>) {
        // Someone signed out who opens the list in a browser signs in and comes back to it.
        let signedIn = sessions.group().add(middleware: SignInFirstMiddleware()).group(context: SignedInContext.self)
        signedIn.get("/auth/sessions", use: list)
        signedIn.head("/auth/sessions") { request, context in try await list(request, context: context).createHeadResponse() }
        signedIn.post("/auth/sessions/end", use: end)
        router.get("/auth/api/sessions", use: api)
    }

    /// The person's live sessions, the current one first.
    private func sessions(of user: UserRecord, current: SessionRecord) async throws -> [SessionRecord] {
        do {
            let all = try await store.sessions(subject: user.subject, now: Date())
            return all.filter { $0.idHash == current.idHash } + all.filter { $0.idHash != current.idHash }
        } catch {
            throw ErrorPage.storeUnavailable(retryURL: "/auth/sessions")
        }
    }

    @Sendable func list(_ request: Request, context: SignedInContext) async throws -> Response {
        let language = request.pageLanguage
        let dates = DateFormatters.shared
        let all = try await sessions(of: context.user, current: context.session)
        let rows: [[String: Any]] = all.map { session in
            let lastUsed = session.idHash == context.session.idHash ? Date() : (session.lastUsedAt ?? session.createdAt)
            return [
                "sid": session.publicID, "current": session.idHash == context.session.idHash,
                "device": renderer.device(session, language), "network": session.details?.network ?? "unknown",
                "via": renderer.via(session, language),
                "began": dates.display(session.createdAt, language) + " UTC", "beganISO": dates.isoString(session.createdAt),
                "lastUsed": dates.display(lastUsed, language) + " UTC", "lastUsedISO": dates.isoString(lastUsed),
                "csrfToken": context.csrfToken,
            ]
        }
        return renderer.listPage(
            "sessions", title: renderer.string("sessionsTitle", language), language: language,
            values: ["sessions": rows, "others": all.count > 1, "csrfToken": context.csrfToken]
        )
    }

    /// `POST /auth/sessions/end` with `sid` (one session's public id, or `others`): without `confirm=yes`, the page
    /// asking to confirm; with it, the session (or every other one) ends, and the browser goes back to the list.
    @Sendable func end(_ request: Request, context: SignedInContext) async throws -> Response {
        var request = request
        let language = request.pageLanguage
        let body = (try? await request.collectBody(upTo: 4096)) ?? ByteBuffer()
        let fields = (try? CallbackPayload.parseFields(body.readableBytesView)) ?? [:]
        guard let token = fields["csrf_token"], ConstantTime.equals(token, context.csrfToken), let sid = fields["sid"] else {
            throw ErrorPage.csrf(retryURL: "/auth/sessions")
        }
        let all = try await sessions(of: context.user, current: context.session)
        let chosen = sid == "others" ? all.filter { $0.idHash != context.session.idHash } : all.filter { $0.publicID == sid }
        guard !chosen.isEmpty else {
            // Ended already (another tab, an operator): nothing to confirm.
            return Response.redirect(to: "/auth/sessions", type: .normal)
        }
        guard fields["confirm"] == "yes" else {
            let (heading, text) = sid == "others"
                ? ("sessionsConfirmOthers", "sessionsConfirmOthersText") : ("sessionsConfirmOne", "sessionsConfirmOneText")
            let what = sid == "others" ? String(chosen.count) : renderer.device(chosen[0], language)
            return renderer.listPage(
                "sessionsconfirm", title: renderer.string(heading, language), language: language,
                values: [
                    "heading": renderer.string(heading, language), "what": renderer.string(text, language).replacingOccurrences(of: "%@", with: what),
                    "sid": sid, "csrfToken": context.csrfToken,
                ]
            )
        }
        do {
            for session in chosen { _ = try await store.deleteSession(idHash: session.idHash) }
        } catch {
            context.logger.error("store unavailable", metadata: ["error": "\(error)"])
            throw ErrorPage.storeUnavailable(retryURL: "/auth/sessions")
        }
        audit.record(AuditEvent(
            "sign-out", sub: context.user.subject, email: context.user.email,
            reason: sid == "others" ? "everywhere else (\(chosen.count) sessions)" : "session \(sid) from the sessions page"
        ))
        if chosen.contains(where: { $0.idHash == context.session.idHash }) {
            var response = Response.redirect(to: "/", type: .normal)
            response.setCookie(cookies.expired(cookies.sessionName))
            return response
        }
        return Response.redirect(to: "/auth/sessions", type: .normal)
    }

    /// `GET /auth/api/sessions` with `Authorization: Bearer <session_token>` (a native app's): the same list as JSON.
    @Sendable func api(_ request: Request, context: ServerContext) async throws -> Response {
        let (current, user): (SessionRecord, UserRecord)
        switch await APIController.bearerSession(request, context: context, store: store, proxy: proxy) {
        case .found(let found, let foundUser, _): (current, user) = (found, foundUser)
        case .refused(let answer): return answer
        }
        do {
            struct Entry: Encodable {
                var sid: String
                var current: Bool
                var device: String
                var network: String
                var via: String
                var signed_in_at: Date
                var last_used_at: Date
                var expires_at: Date
            }
            let all = try await store.sessions(subject: user.subject, now: Date())
            return Response.json(["sessions": all.map { session in
                Entry(
                    sid: session.publicID, current: session.idHash == current.idHash, device: session.details?.device ?? "unknown browser",
                    network: session.details?.network ?? "unknown", via: session.details?.via ?? "page", signed_in_at: session.createdAt,
                    last_used_at: session.idHash == current.idHash ? Date() : session.lastUsedAt ?? session.createdAt, expires_at: session.expiresAt
                )
            }])
        } catch {
            return Response.problem(.serviceUnavailable, "store-unavailable", "Try again", "The database did not answer.")
        }
    }
}

extension PageRenderer {
    /// How `session` came, in `language`: the sign-in page, an OpenID client by name, or an app.
    func via(_ session: SessionRecord, _ language: PageLanguage) -> String {
        let via = session.details?.via ?? "page"
        if via.hasPrefix("client:") { return string("sessionsViaClient", language).replacingOccurrences(of: "%@", with: String(via.dropFirst(7))) }
        if via.hasPrefix("native") {
            let app = via.hasPrefix("native:") ? String(via.dropFirst(7)) : ""
            return string("sessionsViaNative", language).replacingOccurrences(of: "%@", with: app)
        }
        return string("sessionsViaPage", language)
    }

    /// The browser and system of `session` in words; "unknown browser" in `language` when the sign-in did not say.
    func device(_ session: SessionRecord, _ language: PageLanguage) -> String {
        guard let device = session.details?.device, device != "unknown browser" else { return string("sessionsUnknownBrowser", language) }
        return device
    }
}
