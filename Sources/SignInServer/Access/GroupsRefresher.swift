import Foundation
import Logging
import ServiceLifecycle

/// Keeps the store's groups in force in this instance (`AccessControl.setStoreMembers`): read at start, again every
/// `interval` (`check_cache_seconds`, at least a second), and with PostgreSQL at once whenever any instance changes
/// them (`LISTEN siwa_groups`). A read that fails keeps the groups in force and is logged; a member the store holds
/// that no longer reads is left out, logged.
public struct GroupsRefresher: Service, CustomStringConvertible {
    public var description: String { "GroupsRefresher" }

    let store: any GroupStore
    let access: AccessControl
    let interval: Duration
    let logger: Logger

    /// The change itself is an audit event where it is made (`siwa groups`, the console), once, not here in every
    /// instance that hears of it.
    public init(store: any GroupStore, access: AccessControl, interval: Duration, logger: Logger) {
        self.store = store
        self.access = access
        self.interval = interval
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: interval)
                        await refresh()
                    }
                }
                group.addTask {
                    var failures = 0
                    while !Task.isCancelled {
                        do {
                            try await store.listenForGroupChanges { await refresh() }
                            failures = 0
                        } catch {
                            if Task.isCancelled { break }
                            failures += 1
                            logger.warning("not hearing other instances' group changes; groups are read again every interval meanwhile", metadata: ["error": "\(String(describing: type(of: error)))"])
                        }
                        // SQLite returns at once: nothing to listen to.
                        if failures == 0 { return }
                        try? await Task.sleep(for: .milliseconds(min(5_000, 250 * (1 << min(failures, 5)))))
                    }
                }
            }
        }
    }

    /// Reads the store's groups and puts them in force.
    public func refresh() async {
        let records: [GroupMembershipRecord]
        do {
            records = try await store.groupMemberships()
        } catch {
            if Task.isCancelled || error is CancellationError { return }
            logger.warning("groups not read from the store; those in force are kept", metadata: ["error": "\(String(describing: type(of: error)))"])
            return
        }
        var members: [(group: String, member: GroupMember)] = []
        for record in records {
            do {
                members.append((record.group, try GroupMember(parsing: record.member)))
            } catch {
                logger.error("a stored group member does not read; left out", metadata: ["group": "\(record.group)", "error": "\(error)"])
            }
        }
        if access.setStoreMembers(members) { logger.info("groups from the store changed", metadata: ["memberships": "\(members.count)"]) }
    }
}
