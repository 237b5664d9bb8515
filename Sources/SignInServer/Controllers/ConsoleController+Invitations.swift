import Foundation
import Hummingbird

/// Invitations (issue 47, part A): listed with their state, made (the link shown once: the store keeps its hash),
/// revoked; as `siwa invite` does, audited naming the operator.
extension ConsoleController {
    /// `GET /auth/admin/invitations`.
    @Sendable func invitationsPage(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        try await invitationsPage(request, op, error: nil, link: nil)
    }

    /// The invitations page; `error`, a refused change's reason; `link`, the link of the invitation just made.
    private func invitationsPage(_ request: Request, _ op: Operator, error: String?, link: String?) async throws -> Response {
        let all: [InvitationRecord]
        do {
            all = try await store.invitations()
        } catch { throw unavailable(error, retry: "/auth/admin/invitations") }
        let language = request.pageLanguage
        let dates = DateFormatters.shared
        let now = Date()
        let rows: [[String: Any]] = all.map { invitation in
            let closed = invitation.closed(at: now)
            let state = renderer.string("adminInvitation.\(closed?.rawValue ?? "open")", language)
            return [
                "id": invitation.id, "groups": invitation.groups.joined(separator: ", "), "note": invitation.note ?? "",
                "uses": "\(invitation.uses - invitation.usesLeft)/\(invitation.uses)", "expires": dates.display(invitation.expiresAt, language) + " UTC",
                "state": state, "open": closed == nil, "createdBy": invitation.createdBy, "csrfToken": op.session.csrfToken,
            ]
        }
        var values: [String: Any] = ["invitationsPage": ["invitations": rows, "csrfToken": op.session.csrfToken, "link": link ?? ""]]
        if let error { values["error"] = error }
        return page(request, op, values)
    }

    /// `POST /auth/admin/invitations/create`: `groups` (comma- or space-separated), `uses`, `expires` (`7d`, `12h`…),
    /// `note`; the page with the new link, shown this once.
    @Sendable func createInvitation(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        let fields = try await form(request, op)
        let groups = (fields["groups"] ?? "").split(whereSeparator: { $0 == "," || $0 == " " }).map(String.init)
        let drafted: (invitation: InvitationRecord, token: String)
        do {
            let uses = Int((fields["uses"] ?? "").trimmingCharacters(in: .whitespaces)) ?? 0
            let expires = (fields["expires"] ?? "").trimmingCharacters(in: .whitespaces)
            drafted = try Invitations.draft(
                groups: groups, uses: uses, lifetime: expires.isEmpty ? Invitations.defaultLifetime : try Invitations.lifetime(expires),
                note: fields["note"], createdBy: op.name
            )
        } catch {
            return try await invitationsPage(request, op, error: error.description, link: nil)
        }
        do {
            try await invitations.create(drafted.invitation)
        } catch { throw unavailable(error, retry: "/auth/admin/invitations") }
        return try await invitationsPage(request, op, error: nil, link: Invitations.link(origin: publicOrigin, token: drafted.token))
    }

    /// `POST /auth/admin/invitations/revoke`: the invitation `id` closes.
    @Sendable func revokeInvitation(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        let fields = try await form(request, op)
        do {
            _ = try await invitations.revoke(id: fields["id"] ?? "", actor: op.name)
        } catch { throw unavailable(error, retry: "/auth/admin/invitations") }
        return Response.redirect(to: "/auth/admin/invitations", type: .normal)
    }
}
