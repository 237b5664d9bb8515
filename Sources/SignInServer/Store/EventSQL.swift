import AppleSignIn
import Foundation
import JOSE
import Logging
import PostgresNIO
import Synchronization

/// The account events siwa tells the apps behind it of (issue 47, part B), by the Standard Webhooks convention.
public enum AccountEventType: String, Sendable, CaseIterable {
    /// A first sign-in, or an invitation used.
    case joined = "person.joined"
    /// Apple's `account-delete`, or the person's own deletion at siwa.
    case deleted = "person.deleted"
    /// Apple's `consent-revoked`: the person stopped using Sign in with Apple with this site.
    case consentRevoked = "person.consent_revoked"
    /// Apple's `email-disabled` and `email-enabled`: the relay address stopped, or started again, forwarding.
    case emailDisabled = "person.email_disabled"
    case emailEnabled = "person.email_enabled"
    /// The person's groups kept in the store changed (an invitation, `siwa groups`, the console).
    case groupsChanged = "person.groups_changed"
}

/// Why `event_webhooks` could not be read.
public struct EventWebhookError: Error, CustomStringConvertible {
    public var description: String

    init(_ description: String) {
        self.description = description
    }
}

/// One app told of account events (`event_webhooks`): where, with which secret, and which events.
public struct EventWebhook: Sendable, Hashable {
    /// Its name: the console's and the metrics' label, and what a delivery row names.
    public var name: String
    public var url: String
    /// The secret's bytes (Standard Webhooks' `whsec_` and base64, decoded).
    public var secret: [UInt8]
    public var events: Set<AccountEventType>

    public init(name: String, url: String, secret: [UInt8], events: Set<AccountEventType>) {
        self.name = name
        self.url = url
        self.secret = secret
        self.events = events
    }

    /// Reads `event_webhooks`: a JSON array of `{"name", "url", "secret": "whsec_…", "events": […]}`.
    public static func list(fromJSON text: String) throws(EventWebhookError) -> [EventWebhook] {
        guard let array = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [[String: Any]] else {
            throw EventWebhookError("a JSON array of objects with name, url, secret and events")
        }
        var names: Set<String> = []
        return try array.enumerated().map { index, object throws(EventWebhookError) in
            let at = "[\(index)]"
            guard let name = object["name"] as? String, !name.isEmpty, name.count <= 64, name.allSatisfy({ $0.isLetter || $0.isNumber || "-_.".contains($0) }), names.insert(name).inserted else {
                throw EventWebhookError("\(at).name: a unique name of letters, digits, - _ . (at most 64)")
            }
            guard let url = object["url"] as? String, let parsed = URL(string: url), ["http", "https"].contains(parsed.scheme?.lowercased() ?? ""), parsed.host != nil else {
                throw EventWebhookError("\(at).url: an absolute http or https URL")
            }
            guard let secret = object["secret"] as? String, secret.hasPrefix("whsec_"), let bytes = Data(base64Encoded: String(secret.dropFirst(6))), (24...64).contains(bytes.count) else {
                throw EventWebhookError("\(at).secret: whsec_ followed by 24 to 64 bytes in base64 (Standard Webhooks)")
            }
            guard let names = object["events"] as? [String], !names.isEmpty else {
                throw EventWebhookError("\(at).events: a list of \(AccountEventType.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            var events: Set<AccountEventType> = []
            for name in names {
                guard let type = AccountEventType(rawValue: name) else {
                    throw EventWebhookError("\(at).events: \(name) is none of \(AccountEventType.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                events.insert(type)
            }
            return EventWebhook(name: name, url: url, secret: Array(bytes), events: events)
        }
    }
}

/// Which webhooks want which events, read by the store when it writes a change (a delivery row per webhook that
/// wants the event, in the change's transaction). Set once at start (`makeStore`).
public final class EventRouting: Sendable {
    private let webhooks = Mutex<[EventWebhook]>([])

    public init() {}

    public func set(_ list: [EventWebhook]) {
        webhooks.withLock { $0 = list }
    }

    /// The names of the webhooks that want `type`.
    func names(wanting type: AccountEventType) -> [String] {
        webhooks.withLock { $0.filter { $0.events.contains(type) }.map(\.name) }
    }
}

/// One event to deliver to one webhook, as the outbox keeps it.
public struct EventDelivery: Sendable, Equatable {
    public var id: Int64
    public var webhook: String
    /// `msg_…`: Standard Webhooks' `webhook-id`, the same for every webhook told of the event.
    public var eventID: String
    public var type: String
    public var subject: String
    /// The body posted: `{"type", "timestamp", "data"}`.
    public var payload: String
    /// Tries so far (this one included, once claimed).
    public var attempts: Int
    public var createdAt: Date
    public var nextAttemptAt: Date
    /// Given up after a day; the console sends it again.
    public var failedAt: Date?
    public var lastError: String?
}

/// The outbox of account events (both stores): rows written in the transaction of the change they report, so an
/// event outlives a restart of siwa or of the database; claimed by one instance at a time, in order per person and
/// webhook.
public protocol EventOutbox: Sendable {
    /// Up to `limit` deliveries due at `now`, each the oldest open one of its person and webhook, claimed until
    /// `leaseUntil`.
    func claimEventDeliveries(now: Date, limit: Int, leaseUntil: Date) async throws -> [EventDelivery]
    /// Delivered: removed, in one statement.
    func finishEventDeliveries(ids: [Int64]) async throws
    /// Not taken: tried again at `at`, or (`failed`) given up, kept for the console.
    func retryEventDelivery(id: Int64, at: Date, error: String, failed: Bool) async throws
    /// Open and failed deliveries, oldest first (the console).
    func eventDeliveries(limit: Int) async throws -> [EventDelivery]
    /// A failed delivery tried again now; false when there is none of that id.
    func resendEventDelivery(id: Int64, at: Date) async throws -> Bool
}

/// The outbox's table and statements, written once for both stores.
enum EventSQL {
    /// Migration v12 (issue 47).
    static func v12(serialKey: String) -> [String] {
        [
            """
            CREATE TABLE event_deliveries (id \(serialKey), webhook TEXT NOT NULL, event_id TEXT NOT NULL, type TEXT NOT NULL, sub TEXT NOT NULL,
                payload TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, created_at DOUBLE PRECISION NOT NULL, next_attempt_at DOUBLE PRECISION NOT NULL,
                failed_at DOUBLE PRECISION, last_error TEXT)
            """,
            "CREATE INDEX event_deliveries_due ON event_deliveries(next_attempt_at)",
            "CREATE INDEX event_deliveries_person ON event_deliveries(webhook, sub, id)",
        ]
    }

    /// The rows of one event for every webhook that wants it: none when none does.
    static func enqueue(_ type: AccountEventType, subject: String, data: [String: Any], at: Date, routing: EventRouting) -> [ProviderStatement] {
        let webhooks = routing.names(wanting: type)
        guard !webhooks.isEmpty else { return [] }
        var data = data
        data["sub"] = subject
        let body: [String: Any] = ["type": type.rawValue, "timestamp": EventSQL.timestamp(at), "data": data]
        let payload = (try? JSONSerialization.data(withJSONObject: body, options: [.sortedKeys, .withoutEscapingSlashes])).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
        let eventID = "msg_" + RandomToken.generate(byteCount: 18)
        return webhooks.map { webhook in
            ProviderStatement(
                "INSERT INTO event_deliveries (webhook, event_id, type, sub, payload, created_at, next_attempt_at) VALUES ($1, $2, $3, $4, $5, $6, $6)",
                .text(webhook), .text(eventID), .text(type.rawValue), .text(subject), .text(payload), .real(at.timeIntervalSince1970)
            )
        }
    }

    /// A first sign-in: the person joined.
    static func joined(_ completed: CompletedSignIn, routing: EventRouting) -> [ProviderStatement] {
        enqueue(.joined, subject: completed.subject, data: ["via": "sign-in", "private_email": completed.isPrivateEmail], at: completed.at, routing: routing)
    }

    /// What Apple's notification tells the apps, with what Apple sent (its type and time), never a token.
    static func told(_ notification: AppleNotification, receivedAt: Date, routing: EventRouting) -> [ProviderStatement] {
        let event = notification.event
        let type: AccountEventType
        switch event.type {
        case .accountDelete: type = .deleted
        case .consentRevoked: type = .consentRevoked
        case .emailDisabled: type = .emailDisabled
        case .emailEnabled: type = .emailEnabled
        case .unknown: return []
        }
        let apple: [String: Any] = ["type": event.type.rawValue, "event_time": EventSQL.timestamp(event.eventTime), "jti": notification.id]
        var data: [String: Any] = ["apple": apple]
        if type == .deleted { data["reason"] = "account-delete" }
        return enqueue(type, subject: event.subject, data: data, at: receivedAt, routing: routing)
    }

    /// A person's groups changed in the store: `added` and `removed`, group names.
    static func groupsChanged(subject: String, added: [String], removed: [String], via: String, at: Date, routing: EventRouting) -> [ProviderStatement] {
        enqueue(.groupsChanged, subject: subject, data: ["added": added, "removed": removed, "via": via], at: at, routing: routing)
    }

    private static let columns = "id, webhook, event_id, type, sub, payload, attempts, created_at, next_attempt_at, failed_at, last_error"

    /// Claims due deliveries that are the oldest open one of their person and webhook (so a person's events arrive in
    /// order); PostgreSQL skips rows another instance is claiming (`lockRows`).
    static func claim(now: Date, limit: Int, leaseUntil: Date, lockRows: Bool) -> ProviderStatement {
        ProviderStatement(
            """
            UPDATE event_deliveries SET attempts = attempts + 1, next_attempt_at = $2
            WHERE id IN (SELECT d.id FROM event_deliveries d WHERE d.failed_at IS NULL AND d.next_attempt_at <= $1
                AND NOT EXISTS (SELECT 1 FROM event_deliveries e WHERE e.webhook = d.webhook AND e.sub = d.sub AND e.id < d.id AND e.failed_at IS NULL)
                ORDER BY d.id LIMIT $3\(lockRows ? " FOR UPDATE SKIP LOCKED" : ""))
            RETURNING \(columns)
            """,
            .real(now.timeIntervalSince1970), .real(leaseUntil.timeIntervalSince1970), .integer(limit)
        )
    }

    static func finish(ids: [Int64]) -> ProviderStatement {
        var statement = ProviderStatement("DELETE FROM event_deliveries WHERE id IN (" + ids.indices.map { "$\($0 + 1)" }.joined(separator: ", ") + ")")
        statement.values = ids.map { .integer(Int($0)) }
        return statement
    }

    static func retry(id: Int64, at: Date, error: String, failed: Bool) -> ProviderStatement {
        ProviderStatement(
            "UPDATE event_deliveries SET next_attempt_at = $2, last_error = $3, failed_at = \(failed ? "$2" : "NULL") WHERE id = $1",
            .integer(Int(id)), .real(at.timeIntervalSince1970), .text(String(error.prefix(200)))
        )
    }

    static func list(limit: Int) -> ProviderStatement {
        ProviderStatement("SELECT \(columns) FROM event_deliveries ORDER BY id LIMIT $1", .integer(limit))
    }

    static func resend(id: Int64, at: Date) -> ProviderStatement {
        ProviderStatement(
            "UPDATE event_deliveries SET failed_at = NULL, attempts = 0, created_at = $2, next_attempt_at = $2 WHERE id = $1 AND failed_at IS NOT NULL RETURNING 1",
            .integer(Int(id)), .real(at.timeIntervalSince1970)
        )
    }

    static func delivery(_ row: some ProviderRow) throws -> EventDelivery {
        EventDelivery(
            id: try row.integer(0), webhook: try row.text(1), eventID: try row.text(2), type: try row.text(3), subject: try row.text(4), payload: try row.text(5),
            attempts: Int(try row.integer(6)), createdAt: Date(timeIntervalSince1970: try row.real(7)), nextAttemptAt: Date(timeIntervalSince1970: try row.real(8)),
            failedAt: try row.optionalReal(9).map { Date(timeIntervalSince1970: $0) }, lastError: try row.optionalText(10)
        )
    }
}

extension EventSQL {
    /// `2026-11-28T20:15:00.123Z`: Standard Webhooks' `timestamp` in a payload. A format style is a value, safe to use
    /// from every store task at once (a shared `ISO8601DateFormatter` is not promised to be).
    static func timestamp(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}

extension SQLiteStore {
    public func claimEventDeliveries(now: Date, limit: Int, leaseUntil: Date) async throws -> [EventDelivery] {
        try await pool.write { db in try db.rows(EventSQL.claim(now: now, limit: limit, leaseUntil: leaseUntil, lockRows: false)).map(EventSQL.delivery) }
    }

    public func finishEventDeliveries(ids: [Int64]) async throws {
        guard !ids.isEmpty else { return }
        try await pool.write { db in _ = try db.rows(EventSQL.finish(ids: ids)) }
    }

    public func retryEventDelivery(id: Int64, at: Date, error: String, failed: Bool) async throws {
        try await pool.write { db in _ = try db.rows(EventSQL.retry(id: id, at: at, error: error, failed: failed)) }
    }

    public func eventDeliveries(limit: Int) async throws -> [EventDelivery] {
        try await pool.read { db in try db.rows(EventSQL.list(limit: limit)).map(EventSQL.delivery) }
    }

    public func resendEventDelivery(id: Int64, at: Date) async throws -> Bool {
        try await pool.write { db in try !db.rows(EventSQL.resend(id: id, at: at)).isEmpty }
    }
}

extension PostgresStore {
    public func claimEventDeliveries(now: Date, limit: Int, leaseUntil: Date) async throws -> [EventDelivery] {
        try await single(EventSQL.claim(now: now, limit: limit, leaseUntil: leaseUntil, lockRows: true)).map(EventSQL.delivery)
    }

    public func finishEventDeliveries(ids: [Int64]) async throws {
        guard !ids.isEmpty else { return }
        _ = try await single(EventSQL.finish(ids: ids))
    }

    public func retryEventDelivery(id: Int64, at: Date, error: String, failed: Bool) async throws {
        _ = try await single(EventSQL.retry(id: id, at: at, error: error, failed: failed))
    }

    public func eventDeliveries(limit: Int) async throws -> [EventDelivery] {
        try await single(EventSQL.list(limit: limit)).map(EventSQL.delivery)
    }

    public func resendEventDelivery(id: Int64, at: Date) async throws -> Bool {
        try await !single(EventSQL.resend(id: id, at: at)).isEmpty
    }
}
