import AppleSignIn
import AsyncHTTPClient
import Foundation
import JOSE
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// OpenID Connect Back-Channel Logout 1.0: when a siwa session ends for any reason but expiry, each client that
/// issued tokens in it is sent a Logout Token. The store queues a delivery in the very transaction that ends the
/// session (`LogoutSQL.enqueue`), so a delivery outlives a restart and the person's sign-out never waits for it; this
/// service claims due deliveries (one instance each, `LogoutQueue`), signs and posts them, and tries a client that
/// answers neither 200 nor 204, or cannot be reached, again with growing pauses for 24 hours.
public struct BackchannelLogout: Service, CustomStringConvertible {
    public var description: String { "BackchannelLogout" }

    /// How long a delivery is tried before it is given up (audited).
    static let giveUpAfter: TimeInterval = 86_400
    /// How long one POST may take.
    static let requestTimeoutSeconds: Double = 5
    static let requestTimeout = TimeAmount.seconds(Int64(requestTimeoutSeconds))
    /// Deliveries in flight at once, and how long a claim holds before another instance may take it back.
    static let inFlightLimit = 32
    static let lease: TimeInterval = 60

    let queue: any LogoutQueue
    let clients: ProviderClients
    let keys: ProviderKeys
    let issuer: String
    let httpClient: HTTPClient
    let audit: AuditTrail
    let metrics: ServerMetrics
    let logger: Logger
    /// How often the queue is looked at.
    var interval: Duration = .seconds(1)

    /// The pause before try `attempts + 1`: 5 s, doubling, at most an hour.
    static func pause(after attempts: Int) -> TimeInterval {
        min(3600, 5 * pow(2, Double(max(0, attempts - 1))))
    }

    /// The claims of a Logout Token (§2.4): no `nonce`, the back-channel logout event.
    struct LogoutClaims: Encodable {
        var iss: String
        var aud: String
        var iat: Int
        var exp: Int
        var jti: String
        var sub: String
        var sid: String
        var events: [String: [String: String]] = ["http://schemas.openid.net/event/backchannel-logout": [:]]
    }

    /// Claims what is due whenever there is room among the deliveries in flight (`inFlightLimit`), each delivered on
    /// its own: a client that cannot be reached holds up only its own deliveries, for their request timeout, never
    /// another client's; a mass sign-out is claimed again at once while room and deliveries remain.
    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await pumpOutbox(
                inFlightLimit: Self.inFlightLimit, interval: interval,
                claim: { room in
                    let now = Date()
                    return try await queue.claimLogoutDeliveries(now: now, limit: room, leaseUntil: now.addingTimeInterval(Self.lease))
                },
                deliver: { await deliver($0) },
                failed: { logger.warning("logout deliveries not read from the store", metadata: ["error": "\(String(describing: type(of: $0)))"]) }
            )
        }
    }

    private func deliver(_ delivery: LogoutDelivery) async {
        let outcome: String
        do {
            guard let client = try await clients.client(delivery.clientID), let uri = client.backchannelLogoutURI else {
                // A client without a back-channel logout URI (or one removed since) has nothing to be told.
                try await queue.finishLogoutDelivery(id: delivery.id)
                return
            }
            let now = Date()
            let issuedAt = Int(now.timeIntervalSince1970)
            let claims = LogoutClaims(
                iss: issuer, aud: client.clientID, iat: issuedAt, exp: issuedAt + 120, jti: RandomToken.generate(byteCount: 16),
                sub: try await keys.subject(delivery.subject, for: client), sid: ProviderKeys.sid(delivery.sessionID, for: client.clientID)
            )
            let token = try await keys.sign(claims, algorithm: client.idTokenAlgorithm, type: "logout+jwt", now: now)
            var request = HTTPClientRequest(url: uri)
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
            request.headers.add(name: "Cache-Control", value: "no-store")
            request.body = .bytes(ByteBuffer(string: FormEncoding.encode([("logout_token", token)])))
            let status: UInt
            do {
                let response = try await httpClient.execute(request, timeout: Self.requestTimeout)
                status = response.status.code
                _ = try? await response.body.collect(upTo: 64 * 1024)
            } catch {
                status = 0
            }
            if status == 200 || status == 204 {
                try await queue.finishLogoutDelivery(id: delivery.id)
                outcome = "delivered"
                audit.record(AuditEvent("logout-delivered", sub: delivery.subject, reason: "client \(client.clientID)", actor: "siwa"))
            } else if now.timeIntervalSince(delivery.createdAt) >= Self.giveUpAfter {
                try await queue.finishLogoutDelivery(id: delivery.id)
                outcome = "abandoned"
                logger.error("back-channel logout given up after 24 hours", metadata: ["client_id": "\(client.clientID)", "status": "\(status)"])
                audit.record(AuditEvent("logout-abandoned", sub: delivery.subject, reason: "client \(client.clientID) answered \(status == 0 ? "nothing" : String(status)) for 24 hours", actor: "siwa"))
            } else {
                try await queue.retryLogoutDelivery(id: delivery.id, at: now.addingTimeInterval(Self.pause(after: delivery.attempts)))
                outcome = "retried"
                logger.warning("back-channel logout not taken; tried again later", metadata: ["client_id": "\(client.clientID)", "status": "\(status)", "attempt": "\(delivery.attempts)"])
            }
        } catch {
            // The store or the keys failed: the claim's lease brings the delivery back.
            outcome = "failed"
            logger.error("back-channel logout not sent", metadata: ["client_id": "\(delivery.clientID)", "error": "\(String(describing: type(of: error)))"])
        }
        metrics.registry.makeCounter(name: "siwa_backchannel_logouts_total", labels: [("outcome", outcome)], help: "Logout Tokens sent to OpenID clients, by outcome.").increment()
    }
}
