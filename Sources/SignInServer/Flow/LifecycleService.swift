import Foundation
import Logging
import ServiceLifecycle

/// The background service that runs refresh checks and queued revocations every `interval`, until shutdown.
public struct LifecycleService: Service {
    let lifecycle: AccountLifecycle
    let maintenance: any StoreMaintenance
    let interval: Duration
    let logger: Logger

    /// Creates the service.
    public init(lifecycle: AccountLifecycle, maintenance: any StoreMaintenance, interval: Duration, logger: Logger) {
        self.lifecycle = lifecycle
        self.maintenance = maintenance
        self.interval = interval
        self.logger = logger
    }

    public func run() async throws {
        // The schema first: on a fresh PostgreSQL database this service can start before the application's own
        // migration (beforeServerStarts) has run. Migrations are idempotent and serialised by an advisory lock.
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                try await maintenance.migrate()
                break
            } catch {
                logger.warning("store not ready for background work; will try again", metadata: ["error": "\(error)"])
                try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(5)) }
            }
        }
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                let swept = try await maintenance.sweepExpired(now: Date(), limit: 1000)
                if swept > 0 { logger.debug("expired rows removed", metadata: ["count": "\(swept)"]) }
                try await lifecycle.runRevocationQueue(logger: logger)
                try await lifecycle.runRefreshChecks(logger: logger)
            } catch {
                logger.error("lifecycle run failed; will try again", metadata: ["error": "\(error)"])
            }
            // Jitter so that several instances do not all wake at once.
            let jitter = Duration.milliseconds(Int64.random(in: 0...max(1, interval.components.seconds * 100)))
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval + jitter) }
        }
    }
}
