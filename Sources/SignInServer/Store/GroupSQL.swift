import Foundation
import Logging
import PostgresNIO

/// One membership kept in the store: `member` as written (`ada@example.com`, `@example.com`, `sub:…`).
public struct GroupMembershipRecord: Sendable, Equatable {
    public var group: String
    public var member: String
    public var addedAt: Date

    public init(group: String, member: String, addedAt: Date) {
        self.group = group
        self.member = member
        self.addedAt = addedAt
    }
}

/// The groups siwa keeps (`siwa groups`, the console), shared by every instance of a PostgreSQL store.
public protocol GroupStore: Sendable {
    /// Every membership, by group then member.
    func groupMemberships() async throws -> [GroupMembershipRecord]
    /// Adds `members` to `group`; how many were not in it already.
    func addGroupMembers(_ members: [String], to group: String, at: Date) async throws -> Int
    /// Removes `members` from `group`; how many were in it.
    func removeGroupMembers(_ members: [String], from group: String) async throws -> Int
    /// Removes every member of `group`; how many there were.
    func deleteGroup(_ group: String) async throws -> Int
    /// Calls `changed` whenever any instance changes the groups, until the store's connection ends (PostgreSQL);
    /// returns at once where the store cannot tell (SQLite).
    func listenForGroupChanges(_ changed: @escaping @Sendable () async -> Void) async throws
}

/// The groups' table and statements, written once for both stores (`ProviderStatement`'s `$n` parameters). With
/// PostgreSQL, each change also sends `NOTIFY siwa_groups` in its transaction, so every instance reloads at once.
enum GroupSQL {
    /// Migration v4 (issue 27): the memberships, and the groups an OpenID client is limited to (a JSON array).
    static let schema = [
        "CREATE TABLE group_members (group_name TEXT NOT NULL, member TEXT NOT NULL, added_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (group_name, member))",
        "ALTER TABLE provider_clients ADD COLUMN allowed_groups TEXT NOT NULL DEFAULT '[]'",
    ]

    static let channel = "siwa_groups"

    static let all = ProviderStatement("SELECT group_name, member, added_at FROM group_members ORDER BY group_name, member")

    static func add(_ member: String, to group: String, at: Date) -> ProviderStatement {
        ProviderStatement(
            "INSERT INTO group_members (group_name, member, added_at) VALUES ($1, $2, $3) ON CONFLICT (group_name, member) DO NOTHING RETURNING member",
            .text(group), .text(member), .real(at.timeIntervalSince1970)
        )
    }

    static func remove(_ member: String, from group: String) -> ProviderStatement {
        ProviderStatement("DELETE FROM group_members WHERE group_name = $1 AND member = $2 RETURNING member", .text(group), .text(member))
    }

    static func delete(_ group: String) -> ProviderStatement {
        ProviderStatement("DELETE FROM group_members WHERE group_name = $1 RETURNING member", .text(group))
    }

    /// The account events of a change to `group`: each member by subject among `members` whose row changed (`counts`,
    /// as `run` returned them) has their groups changed.
    static func events(_ members: [String], counts: [Int], group: String, adding: Bool, at: Date, routing: EventRouting) -> [ProviderStatement] {
        zip(members, counts).filter { $0.1 > 0 && $0.0.hasPrefix("sub:") }.flatMap { member, _ in
            EventSQL.groupsChanged(
                subject: String(member.dropFirst(4)), added: adding ? [group] : [], removed: adding ? [] : [group], via: "operator", at: at, routing: routing
            )
        }
    }

    static let notify = ProviderStatement("SELECT pg_notify('\(channel)', 'changed')")

    static func record(_ row: some ProviderRow) throws -> GroupMembershipRecord {
        GroupMembershipRecord(group: try row.text(0), member: try row.text(1), addedAt: Date(timeIntervalSince1970: try row.real(2)))
    }
}

extension SQLiteStore {
    public func groupMemberships() async throws -> [GroupMembershipRecord] {
        try await pool.read { db in try db.rows(GroupSQL.all).map(GroupSQL.record) }
    }

    public func addGroupMembers(_ members: [String], to group: String, at: Date) async throws -> Int {
        try await changeGroup(group, members, statements: members.map { GroupSQL.add($0, to: group, at: at) }, adding: true, at: at)
    }

    public func removeGroupMembers(_ members: [String], from group: String) async throws -> Int {
        try await changeGroup(group, members, statements: members.map { GroupSQL.remove($0, from: group) }, adding: false, at: Date())
    }

    public func deleteGroup(_ group: String) async throws -> Int {
        try await pool.write { db in
            let removed = try db.rows(GroupSQL.delete(group)).map { try $0.text(0) }
            _ = try db.run(GroupSQL.events(removed, counts: removed.map { _ in 1 }, group: group, adding: false, at: Date(), routing: self.events))
            return removed.count
        }
    }

    /// Runs one statement per member and, in the same transaction, the account events of the members changed.
    private func changeGroup(_ group: String, _ members: [String], statements: [ProviderStatement], adding: Bool, at: Date) async throws -> Int {
        try await pool.write { db in
            let counts = try db.run(statements)
            _ = try db.run(GroupSQL.events(members, counts: counts, group: group, adding: adding, at: at, routing: self.events))
            return counts.reduce(0, +)
        }
    }
}

extension PostgresStore {
    public func groupMemberships() async throws -> [GroupMembershipRecord] {
        try await single(GroupSQL.all).map(GroupSQL.record)
    }

    public func addGroupMembers(_ members: [String], to group: String, at: Date) async throws -> Int {
        try await changeGroups(group, members, statements: members.map { GroupSQL.add($0, to: group, at: at) }, adding: true, at: at)
    }

    public func removeGroupMembers(_ members: [String], from group: String) async throws -> Int {
        try await changeGroups(group, members, statements: members.map { GroupSQL.remove($0, from: group) }, adding: false, at: Date())
    }

    public func deleteGroup(_ group: String) async throws -> Int {
        let events = events
        return try await transaction { connection, logger in
            let removed = try await connection.rows(GroupSQL.delete(group), logger: logger).map { try $0.text(0) }
            _ = try await connection.run(GroupSQL.events(removed, counts: removed.map { _ in 1 }, group: group, adding: false, at: Date(), routing: events), logger: logger)
            if !removed.isEmpty { _ = try await connection.rows(GroupSQL.notify, logger: logger) }
            return removed.count
        }
    }

    /// Runs `statements` (one per member) with the account events of the members changed, and tells every instance
    /// when they commit; how many rows they returned together.
    private func changeGroups(_ group: String, _ members: [String], statements: [ProviderStatement], adding: Bool, at: Date) async throws -> Int {
        let events = events
        return try await transaction { connection, logger in
            let counts = try await connection.run(statements, logger: logger)
            _ = try await connection.run(GroupSQL.events(members, counts: counts, group: group, adding: adding, at: at, routing: events), logger: logger)
            let changed = counts.reduce(0, +)
            if changed > 0 { _ = try await connection.rows(GroupSQL.notify, logger: logger) }
            return changed
        }
    }
}

extension SQLiteStore {
    /// SQLite has no notifications: `GroupsRefresher` reads the groups again every `check_cache_seconds`.
    public func listenForGroupChanges(_ changed: @escaping @Sendable () async -> Void) async throws {}
}

extension PostgresStore {
    /// Calls `changed` for each group change any instance commits (`NOTIFY siwa_groups`), until the connection ends.
    public func listenForGroupChanges(_ changed: @escaping @Sendable () async -> Void) async throws {
        try await client.withConnection { connection in
            try await connection.listen(on: GroupSQL.channel) { notifications in
                await changed()
                for try await _ in notifications { await changed() }
            }
        }
    }
}
