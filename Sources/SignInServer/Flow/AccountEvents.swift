import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// Delivers the account events of the outbox (issue 47, part B) to the apps of `event_webhooks`, signed by the
/// Standard Webhooks convention: `webhook-id` (the event's `msg_…`), `webhook-timestamp` (seconds) and
/// `webhook-signature` (`v1,` and the base64 HMAC-SHA256, with the webhook's secret, of `id.timestamp.body`). The
/// store writes each delivery in the transaction of the change it reports; this service claims due ones (one instance
/// each, the oldest open one of each person and webhook, so a person's events arrive in order), posts them, and tries
/// an app that answers no 2xx, or cannot be reached, again with growing pauses (5 s doubling, at most an hour) for a
/// day; then the delivery is kept as failed, for the console to send again.
public struct AccountEvents: Service, CustomStringConvertible {
    public var description: String { "AccountEvents" }

    static let giveUpAfter: TimeInterval = 86_400
    static let requestTimeout = TimeAmount.seconds(10)
    static let inFlightLimit = 64
    static let lease: TimeInterval = 60

    let outbox: any EventOutbox
    let webhooks: [EventWebhook]
    let httpClient: HTTPClient
    let metrics: ServerMetrics
    let logger: Logger
    /// How often the outbox is looked at when nothing was due.
    var interval: Duration = .milliseconds(500)

    public init(outbox: any EventOutbox, webhooks: [EventWebhook], httpClient: HTTPClient, metrics: ServerMetrics, logger: Logger) {
        self.outbox = outbox
        self.webhooks = webhooks
        self.httpClient = httpClient
        self.metrics = metrics
        self.logger = logger
    }

    /// The pause before try `attempts + 1`.
    static func pause(after attempts: Int) -> TimeInterval {
        min(3600, 5 * pow(2, Double(max(0, min(attempts, 20) - 1))))
    }

    /// `webhook-signature`'s value for `body` sent as `id` at `timestamp` (seconds) with `secret`.
    public static func signature(id: String, timestamp: Int, body: String, secret: [UInt8]) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Data("\(id).\(timestamp).\(body)".utf8), using: SymmetricKey(data: secret))
        return "v1," + Data(mac).base64EncodedString()
    }

    public func run() async throws {
        guard !webhooks.isEmpty else {
            // Nothing to tell anyone: no delivery is ever written.
            try? await gracefulShutdown()
            return
        }
        let delivered = Delivered()
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                // Delivered ones are removed together, every 20 ms: one statement (one commit) for many, where one each
                // held the rate to the database's commits. A person's next event waits for it; a crash before it
                // sends them again (at least once).
                group.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: .milliseconds(20))
                        await finish(delivered)
                    }
                }
                group.addTask {
                    await pumpOutbox(
                        inFlightLimit: Self.inFlightLimit, interval: interval,
                        claim: { room in
                            let now = Date()
                            return try await outbox.claimEventDeliveries(now: now, limit: room, leaseUntil: now.addingTimeInterval(Self.lease))
                        },
                        deliver: { await deliver($0, delivered: delivered) },
                        failed: { logger.warning("account events not read from the store", metadata: ["error": "\(String(describing: type(of: $0)))"]) }
                    )
                }
            }
        }
        await finish(delivered)
    }

    /// The deliveries taken by their app, not yet removed from the outbox.
    final class Delivered: Sendable {
        let ids = Mutex<[Int64]>([])
    }

    /// Removes what was delivered since the last time; kept for the next time when the store fails (the lease holds
    /// them meanwhile).
    private func finish(_ delivered: Delivered) async {
        let ids = delivered.ids.withLock { ids in
            defer { ids.removeAll(keepingCapacity: true) }
            return ids
        }
        guard !ids.isEmpty else { return }
        do {
            for chunk in stride(from: 0, to: ids.count, by: 500).map({ Array(ids[$0..<min($0 + 500, ids.count)]) }) {
                try await outbox.finishEventDeliveries(ids: chunk)
            }
        } catch {
            delivered.ids.withLock { $0.append(contentsOf: ids) }
            logger.warning("delivered account events not removed from the outbox yet", metadata: ["error": "\(String(describing: type(of: error)))"])
        }
    }

    private func deliver(_ delivery: EventDelivery, delivered: Delivered) async {
        let outcome: String
        do {
            guard let webhook = webhooks.first(where: { $0.name == delivery.webhook }) else {
                // A webhook no longer configured: kept as failed, for the operator to see.
                try await outbox.retryEventDelivery(id: delivery.id, at: Date(), error: "no webhook named \(delivery.webhook) is configured", failed: true)
                metrics.eventDelivered("failed")
                return
            }
            let now = Date()
            let timestamp = Int(now.timeIntervalSince1970)
            var request = HTTPClientRequest(url: webhook.url)
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.headers.add(name: "webhook-id", value: delivery.eventID)
            request.headers.add(name: "webhook-timestamp", value: String(timestamp))
            request.headers.add(name: "webhook-signature", value: Self.signature(id: delivery.eventID, timestamp: timestamp, body: delivery.payload, secret: webhook.secret))
            request.headers.add(name: "User-Agent", value: "siwa-webhooks")
            request.body = .bytes(ByteBuffer(string: delivery.payload))
            let status: UInt
            var problem = ""
            do {
                let response = try await httpClient.execute(request, timeout: Self.requestTimeout)
                status = response.status.code
                _ = try? await response.body.collect(upTo: 64 * 1024)
                problem = "answered \(status)"
            } catch {
                status = 0
                problem = "not reached (\(String(describing: type(of: error))))"
            }
            if (200..<300).contains(status) {
                delivered.ids.withLock { $0.append(delivery.id) }
                outcome = "delivered"
            } else if now.timeIntervalSince(delivery.createdAt) >= Self.giveUpAfter {
                try await outbox.retryEventDelivery(id: delivery.id, at: now, error: problem, failed: true)
                outcome = "failed"
                logger.error("account event given up after a day", metadata: ["webhook": "\(webhook.name)", "type": "\(delivery.type)", "sub": "\(delivery.subject)", "last": "\(problem)"])
            } else {
                try await outbox.retryEventDelivery(id: delivery.id, at: now.addingTimeInterval(Self.pause(after: delivery.attempts)), error: problem, failed: false)
                outcome = "retried"
                logger.notice("account event not taken; tried again later", metadata: ["webhook": "\(webhook.name)", "type": "\(delivery.type)", "attempt": "\(delivery.attempts)", "last": "\(problem)"])
            }
        } catch {
            // The store failed: the claim's lease brings the delivery back.
            outcome = "store_failed"
            logger.error("account event not sent", metadata: ["webhook": "\(delivery.webhook)", "error": "\(String(describing: type(of: error)))"])
        }
        metrics.eventDelivered(outcome)
    }
}

extension ServerMetrics {
    /// One delivery of an account event ended with `outcome` (`delivered`, `retried`, `failed`, `store_failed`).
    func eventDelivered(_ outcome: String) {
        registry.makeCounter(name: "siwa_account_event_deliveries_total", labels: [("outcome", outcome)], help: "Deliveries of account events to the apps of event_webhooks, by outcome.").increment()
    }
}
