import Hummingbird

/// The latest audit events of this instance.
extension ConsoleController {
    /// `GET /auth/admin/audit?who=&event=&since=`: the latest 200 events that match.
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
