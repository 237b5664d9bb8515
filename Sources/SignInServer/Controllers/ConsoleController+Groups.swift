import Foundation
import Hummingbird

/// Groups: their members and where each membership comes from; members added and removed as `siwa groups` does.
extension ConsoleController {
    /// `GET /auth/admin/groups`: every group, with `error` (a refused change's reason) when given.
    @Sendable func groups(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        return groupsPage(request, op, error: request.uri.queryParameters.get("error").map { String($0) })
    }

    /// The groups page; `error`, a refused change's reason, shown above the groups.
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

    /// `POST /auth/admin/groups/add`: `member` into `group`.
    @Sendable func addMember(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        try await changeMember(request, context, op, adding: true)
    }

    /// `POST /auth/admin/groups/remove`: `member` out of `group`.
    @Sendable func removeMember(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        try await changeMember(request, context, op, adding: false)
    }

    /// Adds or removes the form's `member` in its `group`, in force here at once and audited naming the operator.
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
}
