import Foundation
import Hummingbird
import JOSE

/// People: the search, one person's page, and ending their sessions.
extension ConsoleController {
    /// `GET /auth/admin?q=`: the people whose name, email or sub contains `q` (50 at most).
    @Sendable func people(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        let query = String((request.uri.queryParameters.get("q") ?? "").prefix(200))
        let found: [UserRecord]
        do { found = try await store.searchPeople(query, limit: 50) } catch { throw unavailable(error, retry: "/auth/admin") }
        let list: [[String: Any]] = found.map { ["label": Self.label($0), "sub": $0.subject, "subEncoded": FormEncoding.encode($0.subject)] }
        return page(request, op, ["people": ["query": query, "list": list]])
    }

    /// `GET /auth/admin/person?sub=`: one person's groups, sessions, last sign-in, relay address and consent.
    @Sendable func person(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        let language = request.pageLanguage
        guard let sub = request.uri.queryParameters.get("sub").map({ String($0) }) else { throw ErrorPage.notFound }
        let user: UserRecord?
        let sessions: [SessionRecord]
        do {
            user = try await store.user(subject: sub)
            sessions = try await store.sessions(subject: sub, now: Date())
        } catch { throw unavailable(error, retry: "/auth/admin") }
        guard let user else { throw ErrorPage.notFound }
        let dates = DateFormatters.shared
        let groups = access.groups(subject: user.subject, email: user.email)
        let rows: [[String: Any]] = sessions.map { session in
            [
                "sid": session.publicID, "device": renderer.device(session, language), "network": session.details?.network ?? "unknown",
                "via": renderer.via(session, language), "began": dates.display(session.createdAt, language) + " UTC", "sub": user.subject,
                "csrfToken": op.session.csrfToken,
            ]
        }
        return page(request, op, ["person": [
            "label": Self.label(user), "sub": user.subject, "email": user.email ?? renderer.string("notShared", language), "relay": user.isPrivateEmail,
            "groups": groups.isEmpty ? renderer.string("adminNone", language) : groups.joined(separator: ", "),
            "lastSignIn": dates.display(user.lastSignInAt, language) + " UTC",
            "consent": renderer.string(user.linkRevokedAt == nil ? "adminConsentActive" : "adminConsentRevoked", language),
            "sessions": rows, "hasSessions": !rows.isEmpty, "csrfToken": op.session.csrfToken,
        ]])
    }

    /// `POST /auth/admin/end`: `sub` and `sid` (one session's public id, or `all`).
    @Sendable func endSessions(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        let fields = try await form(request, op)
        guard let sub = fields["sub"], let sid = fields["sid"] else { throw ErrorPage.notFound }
        do {
            let sessions = try await store.sessions(subject: sub, now: Date()).filter { sid == "all" || $0.publicID == sid }
            for session in sessions { _ = try await store.deleteSession(idHash: session.idHash) }
            audit.record(AuditEvent("sessions-ended", sub: sub, reason: sid == "all" ? "all \(sessions.count) sessions, by an operator" : "session \(sid), by an operator", actor: op.name))
        } catch { throw unavailable(error, retry: "/auth/admin") }
        return Response.redirect(to: "/auth/admin/person?sub=" + FormEncoding.encode(sub), type: .normal)
    }
}
