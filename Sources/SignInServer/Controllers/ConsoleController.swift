import AppleSignIn
import Foundation
import Hummingbird
import Logging

/// The operator's console (issue 28, part B), for the members of `admin_groups`: people (search; for each, their
/// groups, sessions, last sign-in, relay address or not, Apple's consent state) with "end this" and "end all"
/// sessions; groups (add and remove members, as `siwa groups` does); invitations (made with the link shown once,
/// listed, revoked, as `siwa invite` does); OpenID clients (list, add with the secret shown
/// once, remove); the latest audit events (filtered by person, event, time). Every change is a POST with the
/// operator's CSRF token and an audit event naming the operator. No JavaScript; English and Chinese; `no-store`.
/// Anyone else signed in gets the 403 page with no hint of what is here; someone signed out is sent to sign in.
/// One file per concern: who may enter (`+Gate`), people, groups, clients and the audit events.
struct ConsoleController: Sendable {
    let store: any SignInStore
    let renderer: PageRenderer
    let access: AccessControl
    let adminGroups: [String]
    let audit: AuditTrail
    let configuredClients: [ProviderClientRecord]
    let invitations: Invitations
    /// `public_url`'s origin: where an invitation's link points.
    let publicOrigin: String
    let logger: Logger

    /// The console's routes and, before them, its `Door`, which looks the session up with `sessions`; none without
    /// `admin_groups`. The door is a middleware of `router`: Hummingbird applies one to the routes added after it and
    /// to the router's 404, so it answers at paths the console does not have too.
    func addRoutes(to router: Router<ServerContext>, sessions: SessionMiddleware) {
        guard !adminGroups.isEmpty else { return }
        router.add(middleware: Door(console: self, sessions: sessions))
        router.get("/auth/admin", use: guarded(people))
        router.get("/auth/admin/person", use: guarded(person))
        router.post("/auth/admin/end", use: guarded(endSessions))
        router.get("/auth/admin/groups", use: guarded(groups))
        router.post("/auth/admin/groups/add", use: guarded(addMember))
        router.post("/auth/admin/groups/remove", use: guarded(removeMember))
        router.get("/auth/admin/clients", use: guarded(clients))
        router.post("/auth/admin/clients/add", use: guarded(addClient))
        router.post("/auth/admin/clients/remove", use: guarded(removeClient))
        router.get("/auth/admin/audit", use: guarded(auditPage))
        router.get("/auth/admin/invitations", use: guarded(invitationsPage))
        router.post("/auth/admin/invitations/create", use: guarded(createInvitation))
        router.post("/auth/admin/invitations/revoke", use: guarded(revokeInvitation))
        router.get("/auth/admin/events", use: guarded(eventsPage))
        router.post("/auth/admin/events/resend", use: guarded(resendEvent))
    }

    /// The form of a POST, after the operator's CSRF token is checked.
    func form(_ request: Request, _ op: Operator) async throws -> [String: String] {
        var request = request
        let body = (try? await request.collectBody(upTo: 16_384)) ?? ByteBuffer()
        let fields = (try? CallbackPayload.parseFields(body.readableBytesView)) ?? [:]
        guard let token = fields["csrf_token"], ConstantTime.equals(token, op.session.csrfToken) else { throw ErrorPage.csrf(retryURL: "/auth/admin") }
        return fields
    }

    /// A console page with `values`, carrying the operator's CSRF token for its forms.
    func page(_ request: Request, _ op: Operator, _ values: [String: Any]) -> Response {
        let language = request.pageLanguage
        var values = values
        values["csrfToken"] = op.session.csrfToken
        return renderer.listPage("admin", title: renderer.string("adminTitle", language), language: language, values: values)
    }

    /// The try-again page for a store that did not answer (`retry`: the page to try again), logged with the error's type only.
    func unavailable(_ error: any Error, retry: String) -> ErrorPage {
        logger.error("store unavailable", metadata: ["error": "\(String(describing: type(of: error)))"])
        return ErrorPage.storeUnavailable(retryURL: retry)
    }

    /// How the console names `user`: their name and email (or sub), or the email (or sub) alone.
    static func label(_ user: UserRecord) -> String {
        user.displayName.map { "\($0) (\(user.email ?? user.subject))" } ?? user.email ?? user.subject
    }
}
