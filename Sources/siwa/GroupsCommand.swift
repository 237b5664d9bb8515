import ArgumentParser
import Foundation
import Logging
import SignInServer

/// `siwa groups`: the groups siwa keeps in the store of `--db` / `SIWA_DB`, shared by every instance (in force at
/// once with PostgreSQL, within `check_cache_seconds` with SQLite), beside those declared in `groups`.
struct GroupsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "groups",
        abstract: "Add, remove and list the members of the groups that access rules and apps read.",
        discussion: "Example: siwa groups add admins ada@example.com @example.com sub:001234.abcd.0123",
        subcommands: [Add.self, Remove.self, List.self, Delete.self]
    )

    /// Appends `event` to `audit_log` when the configuration names one (a change made here is audited once, here).
    static func audit(_ event: AuditEvent, _ plan: ServePlan) {
        guard let path = plan.settings.auditLogPath else { return }
        AuditTrail.appendNow(event, to: path, logger: CLIOutput.quietLogger)
    }

    /// Members as given on the command line, checked; the group's name checked.
    static func checked(_ group: String, _ members: [String]) throws -> [String] {
        do {
            try GroupName.check(group)
            return try members.map { text throws(AccessConfigurationError) in try GroupMember(parsing: text).description }
        } catch {
            throw ValidationError(error.description)
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add members to a group (made if new): emails, @domains, or sub:<Apple sub>.",
            discussion: "Example: siwa groups add finance grace@example.com"
        )
        @OptionGroup var options: KeysCommand.Options
        @Argument(help: "The group: lower-case letters, digits, _ . -") var group: String
        @Argument(help: "Members: ada@example.com, @example.com, sub:001234.abcd.0123") var members: [String]

        func run() async throws {
            guard !members.isEmpty else { throw ValidationError("name at least one member") }
            let members = try GroupsCommand.checked(group, members)
            try await KeysCommand.withStore(options) { store, plan in
                let added = try await store.addGroupMembers(members, to: group, at: Date())
                GroupsCommand.audit(AuditEvent("groups-changed", reason: "\(group) +" + members.joined(separator: " +"), actor: "cli"), plan)
                CLIOutput.stdout("\(group): \(added) added" + (added < members.count ? ", \(members.count - added) already in it" : ""))
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove members from a group (in the store; a member from the configuration stays until it is edited).",
            discussion: "Example: siwa groups remove admins ada@example.com"
        )
        @OptionGroup var options: KeysCommand.Options
        @Argument(help: "The group.") var group: String
        @Argument(help: "Members, as they were added.") var members: [String]

        func run() async throws {
            guard !members.isEmpty else { throw ValidationError("name at least one member") }
            let members = try GroupsCommand.checked(group, members)
            try await KeysCommand.withStore(options) { store, plan in
                let removed = try await store.removeGroupMembers(members, from: group)
                GroupsCommand.audit(AuditEvent("groups-changed", reason: "\(group) -" + members.joined(separator: " -"), actor: "cli"), plan)
                CLIOutput.stdout("\(group): \(removed) removed" + (removed < members.count ? ", \(members.count - removed) were not in it" : ""))
                let declared = Set((plan.settings.front.access.configuration.groups[group] ?? []).map(\.description))
                for member in members where declared.contains(member) {
                    CLIOutput.stderr("siwa: \(member) stays in \(group): the configuration's groups declare it")
                }
            }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove every member of a group from the store.", discussion: "Example: siwa groups delete contractors")
        @OptionGroup var options: KeysCommand.Options
        @Argument(help: "The group.") var group: String

        func run() async throws {
            _ = try GroupsCommand.checked(group, [])
            try await KeysCommand.withStore(options) { store, plan in
                let removed = try await store.deleteGroup(group)
                guard removed > 0 else {
                    CLIOutput.stderr("siwa: no group named \(group) is in the store")
                    throw ExitCode(1)
                }
                CLIOutput.stdout("\(group): deleted, \(removed) members removed")
                GroupsCommand.audit(AuditEvent("groups-changed", reason: "\(group) deleted", actor: "cli"), plan)
                if plan.settings.front.access.configuration.groups[group] != nil {
                    CLIOutput.stderr("siwa: \(group) is still declared in the configuration's groups")
                }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List groups and members, each with where it comes from (configuration, store).",
            discussion: "Example: siwa groups list admins"
        )
        @OptionGroup var options: KeysCommand.Options
        @Argument(help: "One group; all when omitted.") var group: String?

        func run() async throws {
            try await KeysCommand.withStore(options) { store, plan in
                let access = plan.settings.front.access
                await GroupsRefresher(store: store, access: access, interval: .seconds(1), logger: CLIOutput.quietLogger).refresh()
                let directory = access.directory
                let names = group.map { [$0] } ?? directory.groups.keys.sorted()
                for name in names {
                    guard let members = directory.groups[name] else {
                        CLIOutput.stderr("siwa: no group named \(name)")
                        throw ExitCode(1)
                    }
                    CLIOutput.stdout("\(name) (\(members.count) member\(members.count == 1 ? "" : "s"))")
                    for (member, sources) in members.sorted(by: { $0.key < $1.key }) {
                        CLIOutput.stdout("  \(member)  \(sources.sorted().map(\.rawValue).joined(separator: ", "))")
                    }
                }
            }
        }
    }
}
