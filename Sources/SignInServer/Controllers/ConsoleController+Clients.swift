import AppleSignIn
import Foundation
import Hummingbird

/// OpenID clients: the configured and stored ones listed, stored ones added (the secret shown once) and removed.
extension ConsoleController {
    /// `GET /auth/admin/clients`.
    @Sendable func clients(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        return try await clientsPage(request, op, secret: nil, error: nil)
    }

    /// The clients page, with a new client's `secret` (this answer only) or a refused addition's `error`; never cached.
    private func clientsPage(_ request: Request, _ op: Operator, secret: String?, error: String?) async throws -> Response {
        let stored: [ProviderClientRecord]
        do { stored = try await store.providerClients() } catch { throw unavailable(error, retry: "/auth/admin/clients") }
        let all = configuredClients.map { ($0, false) } + stored.map { ($0, true) }
        let language = request.pageLanguage
        let list: [[String: Any]] = all.map { client, inStore in
            [
                "clientID": client.clientID,
                "kind": renderer.string(client.isService ? "adminService" : client.isPublic ? "adminPublic" : "adminConfidential", language)
                    + (client.deviceFlow ? ", " + renderer.string("adminDevice", language) : "")
                    + (inStore ? "" : ", " + renderer.string("adminFromConfiguration", language)),
                "redirects": client.redirectURIs.joined(separator: " "), "stored": inStore, "csrfToken": op.session.csrfToken,
            ]
        }
        var section: [String: Any] = ["clients": list, "csrfToken": op.session.csrfToken]
        if let secret { section["secret"] = secret }
        var values: [String: Any] = ["clientsPage": section]
        if let error { values["error"] = error }
        var response = page(request, op, values)
        response.headers[.cacheControl] = "no-store"
        return response
    }

    /// `POST /auth/admin/clients/add`: `client_id`, `redirect_uri`, `public`, `backchannel_logout_uri`.
    @Sendable func addClient(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        let fields = try await form(request, op)
        let isPublic = fields["public"] == "yes"
        let secret = isPublic ? nil : RandomToken.generate()
        let client: ProviderClientRecord
        do {
            client = try ProviderClientRecord.validated(
                clientID: fields["client_id"] ?? "", secretHash: secret.map(ProviderSettings.hash), redirectURIs: [fields["redirect_uri"] ?? ""].filter { !$0.isEmpty },
                postLogoutRedirectURIs: [], scopes: [], isPublic: isPublic, idTokenAlgorithm: "RS256", pairwiseSubject: false, createdAt: Date(),
                backchannelLogoutURI: fields["backchannel_logout_uri"].flatMap { $0.isEmpty ? nil : $0 }
            )
        } catch {
            return try await clientsPage(request, op, secret: nil, error: error.description)
        }
        do {
            guard try await store.addProviderClient(client) else {
                return try await clientsPage(request, op, secret: nil, error: "client \(client.clientID) is already registered")
            }
        } catch { throw unavailable(error, retry: "/auth/admin/clients") }
        audit.record(AuditEvent("client-added", reason: client.clientID, actor: op.name))
        // Shown on this answer only: it is stored hashed, and the page is not cached.
        return try await clientsPage(request, op, secret: secret, error: nil)
    }

    /// `POST /auth/admin/clients/remove`: `client_id`, a stored client's.
    @Sendable func removeClient(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        let fields = try await form(request, op)
        let clientID = fields["client_id"] ?? ""
        do {
            if try await store.removeProviderClient(clientID: clientID) {
                audit.record(AuditEvent("client-removed", reason: clientID, actor: op.name))
            }
        } catch { throw unavailable(error, retry: "/auth/admin/clients") }
        return Response.redirect(to: "/auth/admin/clients", type: .normal)
    }
}
