import AppleSignIn
import Foundation
import Hummingbird
import JOSE
import Logging

/// The operator's console (issue 28, part B), for the members of `admin_groups`: people (search; for each, their
/// groups, sessions, last sign-in, relay address or not, Apple's consent state) with "end this" and "end all"
/// sessions; groups (add and remove members, as `siwa groups` does); OpenID clients (list, add with the secret shown
/// once, remove); the latest audit events (filtered by person, event, time). Every change is a POST with the
/// operator's CSRF token and an audit event naming the operator. No JavaScript; English and Chinese; `no-store`.
/// Anyone else signed in gets the 403 page with no hint of what is here; someone signed out is sent to sign in.
struct ConsoleController: Sendable {
    let store: any SignInStore
    let renderer: PageRenderer
    let access: AccessControl
    let adminGroups: [String]
    let audit: AuditTrail
    let configuredClients: [ProviderClientRecord]
    let logger: Logger

    func addRoutes(to sessions: RouterGroup<ServerContext>) {
        guard !adminGroups.isEmpty else { return }
        sessions.get("/auth/admin", use: guarded(people))
        sessions.get("/auth/admin/person", use: guarded(person))
        sessions.post("/auth/admin/end", use: guarded(endSessions))
        sessions.get("/auth/admin/groups", use: guarded(groups))
        sessions.post("/auth/admin/groups/add", use: guarded(addMember))
        sessions.post("/auth/admin/groups/remove", use: guarded(removeMember))
        sessions.get("/auth/admin/clients", use: guarded(clients))
        sessions.post("/auth/admin/clients/add", use: guarded(addClient))
        sessions.post("/auth/admin/clients/remove", use: guarded(removeClient))
        sessions.get("/auth/admin/audit", use: guarded(auditPage))
    }

    /// `handler` for an operator only (`operatorOf`): anyone else gets the sign-in or the 403 page first.
    private func guarded(
        _ handler: @escaping @Sendable (Request, ServerContext, Operator) async throws -> Response
    ) -> @Sendable (Request, ServerContext) async throws -> Response {
        { request, context in
            switch try operatorOf(request, context) {
            case .success(let op): return try await handler(request, context, op)
            case .failure(let answer): return answer
            }
        }
    }

    /// Who is operating: a signed-in member of `admin_groups`.
    struct Operator: Sendable {
        let session: SessionRecord
        let user: UserRecord
        var name: String { user.email ?? user.subject }
    }

    /// An operator, or the answer for anyone else.
    enum Gate {
        case success(Operator)
        case failure(Response)
    }

    /// The operator of `context`, or the answer for anyone else: sign in, or the 403 page (no hint of the console).
    private func operatorOf(_ request: Request, _ context: ServerContext) throws -> Gate {
        switch context.visitor {
        case .signedIn(let session, let user):
            let groups = access.groups(subject: user.subject, email: user.email)
            guard groups.contains(where: adminGroups.contains) else { throw ErrorPage.closed }
            return .success(Operator(session: session, user: user))
        case .storeUnavailable(let retryURL): throw ErrorPage.storeUnavailable(retryURL: retryURL)
        case .anonymous, .notLooked:
            let back = request.uri.path.hasPrefix("/auth/admin") && request.method == .get ? request.uri.description : "/auth/admin"
            return .failure(Response.redirect(to: "/auth/apple?return_to=" + FormEncoding.encode(back), type: .found))
        }
    }

    /// The form of a POST, after the operator's CSRF token is checked.
    private func form(_ request: Request, _ op: Operator) async throws -> [String: String] {
        var request = request
        let body = (try? await request.collectBody(upTo: 16_384)) ?? ByteBuffer()
        let fields = (try? CallbackPayload.parseFields(body.readableBytesView)) ?? [:]
        guard let token = fields["csrf_token"], ConstantTime.equals(token, op.session.csrfToken) else { throw ErrorPage.csrf(retryURL: "/auth/admin") }
        return fields
    }

    private func page(_ request: Request, _ op: Operator, _ values: [String: Any]) -> Response {
        let language = request.pageLanguage
        var values = values
        values["csrfToken"] = op.session.csrfToken
        return renderer.listPage("admin", title: renderer.string("adminTitle", language), language: language, values: values)
    }

    private func unavailable(_ error: any Error, retry: String) -> ErrorPage {
        logger.error("store unavailable", metadata: ["error": "\(String(describing: type(of: error)))"])
        return ErrorPage.storeUnavailable(retryURL: retry)
    }

    private static func label(_ user: UserRecord) -> String {
        user.displayName.map { "\($0) (\(user.email ?? user.subject))" } ?? user.email ?? user.subject
    }

    // MARK: people

    @Sendable func people(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        let query = String((request.uri.queryParameters.get("q") ?? "").prefix(200))
        let found: [UserRecord]
        do { found = try await store.searchPeople(query, limit: 50) } catch { throw unavailable(error, retry: "/auth/admin") }
        let list: [[String: Any]] = found.map { ["label": Self.label($0), "sub": $0.subject, "subEncoded": FormEncoding.encode($0.subject)] }
        return page(request, op, ["people": ["query": query, "list": list]])
    }

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

    // MARK: groups

    @Sendable func groups(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        return groupsPage(request, op, error: request.uri.queryParameters.get("error").map { String($0) })
    }

    private func groupsPage(_ request: Request, _ op: Operator, error: String?) -> Response {
        let directory = access.directory
        let language = request.pageLanguage
        let sourceKey: [MembershipSource: String] = [.configuration: "adminSourceConfiguration", .store: "adminSourceStore"]
        let groups: [[String: Any]] = directory.groups.keys.sorted().map { name in
            let members = (directory.groups[name] ?? [:]).sorted { $0.key < $1.key }
            return ["name": name, "members": members.map { member, sources in
                [
                    "member": member.description, "sources": sources.sorted().map { renderer.string(sourceKey[$0] ?? "", language) }.joined(separator: ", "),
                    "removable": sources.contains(.store), "csrfToken": op.session.csrfToken, "name": name,
                ] as [String: Any]
            }]
        }
        var values: [String: Any] = ["groupsPage": ["groups": groups, "csrfToken": op.session.csrfToken]]
        if let error { values["error"] = error }
        return page(request, op, values)
    }

    @Sendable func addMember(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        try await changeMember(request, context, op, adding: true)
    }

    @Sendable func removeMember(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        try await changeMember(request, context, op, adding: false)
    }

    private func changeMember(_ request: Request, _ context: ServerContext, _ op: Operator, adding: Bool) async throws -> Response {
        let fields = try await form(request, op)
        let group = fields["group"] ?? ""
        let member: String
        do {
            try GroupName.check(group)
            member = try GroupMember(parsing: fields["member"] ?? "").description
        } catch {
            return groupsPage(request, op, error: error.description)
        }
        do {
            if adding {
                _ = try await store.addGroupMembers([member], to: group, at: Date())
            } else {
                _ = try await store.removeGroupMembers([member], from: group)
            }
            // In force here at once (other instances: NOTIFY with PostgreSQL, check_cache_seconds with SQLite).
            await GroupsRefresher(store: store, access: access, interval: .seconds(1), logger: logger).refresh()
        } catch { throw unavailable(error, retry: "/auth/admin/groups") }
        audit.record(AuditEvent("groups-changed", reason: "\(group) \(adding ? "+" : "-")\(member)", actor: op.name))
        return Response.redirect(to: "/auth/admin/groups", type: .normal)
    }

    // MARK: clients

    @Sendable func clients(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        return try await clientsPage(request, op, secret: nil, error: nil)
    }

    private func clientsPage(_ request: Request, _ op: Operator, secret: String?, error: String?) async throws -> Response {
        let stored: [ProviderClientRecord]
        do { stored = try await store.providerClients() } catch { throw unavailable(error, retry: "/auth/admin/clients") }
        let all = configuredClients.map { ($0, false) } + stored.map { ($0, true) }
        let language = request.pageLanguage
        let list: [[String: Any]] = all.map { client, inStore in
            [
                "clientID": client.clientID,
                "kind": renderer.string(client.isPublic ? "adminPublic" : "adminConfidential", language)
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

    // MARK: audit

    @Sendable func auditPage(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        let who = String((request.uri.queryParameters.get("who") ?? "").prefix(200)).lowercased()
        let event = String((request.uri.queryParameters.get("event") ?? "").prefix(64))
        let since = String((request.uri.queryParameters.get("since") ?? "").prefix(32))
        let events = audit.recent(limit: 200) { item in
            (who.isEmpty || [item.sub, item.email, item.actor].contains { $0?.lowercased().contains(who) == true })
                && (event.isEmpty || item.event == event)
                && (since.isEmpty || item.time >= since)
        }
        let rows: [[String: Any]] = events.map { item in
            [
                "time": item.time, "event": item.event, "who": [item.email ?? item.sub, item.actor.map { "by " + $0 }].compactMap { $0 }.joined(separator: " "),
                "what": [item.ip, item.host, item.method, item.path, item.rule.map { "rule " + $0 }, item.reason].compactMap { $0 }.joined(separator: " "),
            ]
        }
        return page(request, op, ["auditPage": ["events": rows, "who": who, "event": event, "since": since]])
    }
}
