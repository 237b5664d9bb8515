import Foundation
import Hummingbird

/// Account events (issue 47, part B): the deliveries not yet taken by their app, and those given up after a day,
/// each sent again on the operator's press (audited).
extension ConsoleController {
    /// `GET /auth/admin/events`.
    @Sendable func eventsPage(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        let deliveries: [EventDelivery]
        do {
            deliveries = try await store.eventDeliveries(limit: 500)
        } catch { throw unavailable(error, retry: "/auth/admin/events") }
        let language = request.pageLanguage
        let dates = DateFormatters.shared
        let rows: [[String: Any]] = deliveries.map { delivery in
            [
                "id": String(delivery.id), "webhook": delivery.webhook, "type": delivery.type, "sub": delivery.subject, "attempts": String(delivery.attempts),
                "state": renderer.string(delivery.failedAt == nil ? "adminEventPending" : "adminEventFailed", language),
                "when": dates.display(delivery.failedAt ?? delivery.nextAttemptAt, language) + " UTC", "error": delivery.lastError ?? "",
                "failed": delivery.failedAt != nil, "csrfToken": op.session.csrfToken,
            ]
        }
        return page(request, op, ["eventsPage": ["deliveries": rows, "csrfToken": op.session.csrfToken]])
    }

    /// `POST /auth/admin/events/resend`: the failed delivery `id` is tried again now.
    @Sendable func resendEvent(_ request: Request, context: ServerContext, op: Operator) async throws -> Response {
        let fields = try await form(request, op)
        guard let id = Int64(fields["id"] ?? "") else { return Response.redirect(to: "/auth/admin/events", type: .normal) }
        do {
            if try await store.resendEventDelivery(id: id, at: Date()) {
                audit.record(AuditEvent("event-resent", reason: "delivery \(id)", actor: op.name))
            }
        } catch { throw unavailable(error, retry: "/auth/admin/events") }
        return Response.redirect(to: "/auth/admin/events", type: .normal)
    }
}
