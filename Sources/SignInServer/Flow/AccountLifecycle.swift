import AppleSignIn
import Foundation
import Logging

/// What happens after the first sign-in: account deletion with revocation at Apple, daily refresh checks,
/// and the queue of revocations Apple could not be told about yet.
public struct AccountLifecycle: Sendable {
    let store: any LifecycleQueue
    let client: AppleIDClient
    let audit: AuditTrail?

    /// Creates the lifecycle operations.
    public init(store: any LifecycleQueue, client: AppleIDClient, audit: AuditTrail? = nil) {
        self.store = store
        self.client = client
        self.audit = audit
    }

    /// How a deletion went at Apple's end.
    public enum DeletionOutcome: Sendable, Equatable {
        /// The refresh token was revoked at Apple.
        case revoked
        /// Apple could not be reached: data is deleted, the revocation is queued and will be retried.
        case revocationQueued
        /// There was no token to revoke.
        case nothingToRevoke
    }

    /// Deletes the user's data, then tells Apple (revoke); if Apple is unreachable the revocation is queued.
    public func deleteAccount(subject: String, logger: Logger, now: Date = Date()) async throws -> DeletionOutcome {
        guard let token = try await store.deleteUser(subject: subject, tombstone: false, at: now) else {
            logger.info("account deleted", metadata: ["sub": "\(subject)", "revocation": "none"])
            return .nothingToRevoke
        }
        guard let clientID = try? ClientID(token.clientID, field: "client_id") else {
            return .nothingToRevoke
        }
        do {
            try await client.revoke(token: token.token, hint: .refreshToken, clientID: clientID, logger: logger)
            logger.info("account deleted", metadata: ["sub": "\(subject)", "revocation": "done"])
            return .revoked
        } catch {
            try await store.enqueueRevocation(clientID: token.clientID, token: token.token, at: now)
            logger.warning("account deleted; Apple unreachable, revocation queued", metadata: ["sub": "\(subject)", "error": "\(error)"])
            return .revocationQueued
        }
    }

    /// Checks due refresh tokens (each at most once a day, claimed atomically so no two instances check the
    /// same one), `concurrency` at a time. `invalid_grant` ends the user's sessions and marks the link revoked;
    /// transient failures leave the token for its next daily check. Returns how many were checked.
    @discardableResult
    public func runRefreshChecks(now: Date = Date(), batch: Int = 100, concurrency: Int = 4, logger: Logger) async throws -> Int {
        let due = try await store.claimRefreshChecks(now: now, limit: batch) {
            now.addingTimeInterval(86_400 + Double.random(in: 0..<3_600))
        }
        await withTaskGroup(of: Void.self) { group in
            var running = 0
            for check in due {
                if running >= concurrency {
                    await group.next()
                    running -= 1
                }
                running += 1
                group.addTask { await self.check(check, now: now, logger: logger) }
            }
        }
        return due.count
    }

    private func check(_ check: RefreshCheck, now: Date, logger: Logger) async {
        guard let clientID = try? ClientID(check.clientID, field: "client_id") else { return }
        do {
            _ = try await client.refresh(refreshToken: check.token, clientID: clientID, logger: logger)
            logger.debug("refresh check passed", metadata: ["sub": "\(check.subject)"])
        } catch where error.kind == .invalidGrant {
            logger.info("refresh token no longer valid: signing the user out", metadata: ["sub": "\(check.subject)"])
            audit?.record(AuditEvent("sessions-ended", sub: check.subject, reason: "refresh-refused"))
            try? await store.revokeLink(subject: check.subject, at: now)
        } catch {
            logger.warning("refresh check failed; will retry at the next daily check", metadata: ["sub": "\(check.subject)", "error": "\(error)"])
        }
    }

    /// Retries queued revocations (backing off by attempt). Returns how many Apple accepted.
    @discardableResult
    public func runRevocationQueue(now: Date = Date(), batch: Int = 50, logger: Logger) async throws -> Int {
        let due = try await store.claimRevocations(now: now, limit: batch, retryAt: now.addingTimeInterval(300))
        var done = 0
        for revocation in due {
            guard let clientID = try? ClientID(revocation.clientID, field: "client_id") else {
                try await store.finishRevocation(id: revocation.id)
                continue
            }
            do {
                try await client.revoke(token: revocation.token, hint: .refreshToken, clientID: clientID, logger: logger)
                try await store.finishRevocation(id: revocation.id)
                done += 1
            } catch {
                logger.warning("queued revocation failed again", metadata: ["attempt": "\(revocation.attempts)", "error": "\(error)"])
            }
        }
        return done
    }
}
