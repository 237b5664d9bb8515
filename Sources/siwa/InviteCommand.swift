import ArgumentParser
import Foundation
import SignInServer

/// `siwa invite`: invitations that make whoever signs in with Apple through their link a member of groups, by their
/// Apple `sub` (issue 47, part A), in the store of `--db` / `SIWA_DB`, shared by every instance.
struct InviteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "invite",
        abstract: "Make, list and revoke invitations: links that let a person in by their Apple Account, even with a hidden email.",
        discussion: "Example: siwa invite create --group finance --uses 1 --expires 7d --note \"Grace invites you to the books\"",
        subcommands: [Create.self, List.self, Revoke.self]
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make an invitation and print its link, this once (the store keeps only its hash).",
            discussion: "The link is public_url + /auth/invite/…; whoever signs in with Apple from it joins the groups, and it has one use fewer. Example: siwa invite create --group finance --uses 3 --expires 2d"
        )
        @OptionGroup var options: KeysCommand.Options
        @Option(name: .customLong("group"), help: "A group the invited person joins (repeat for more).") var groups: [String] = []
        @Option(help: "How many people may use it (1 to 10000).") var uses: Int = 1
        @Option(help: "How long it lasts: seconds, or 90s, 15m, 12h, 7d (at most a year).") var expires: String = "7d"
        @Option(help: "A line the invited person reads on the invitation's page (who invites, to what).") var note: String?

        func run() async throws {
            let drafted: (invitation: InvitationRecord, token: String)
            do {
                drafted = try Invitations.draft(groups: groups, uses: uses, lifetime: try Invitations.lifetime(expires), note: note, createdBy: "cli")
            } catch {
                throw ValidationError(error.description)
            }
            try await KeysCommand.withStore(options) { store, plan in
                try await store.saveInvitation(drafted.invitation)
                GroupsCommand.audit(Invitations.createdEvent(drafted.invitation), plan)
                CLIOutput.stdout(Invitations.link(origin: plan.settings.front.publicOrigin, token: drafted.token))
                CLIOutput.stderr(
                    "siwa: \(drafted.invitation.id): \(drafted.invitation.groups.joined(separator: ", ")), \(uses) use\(uses == 1 ? "" : "s"), until "
                        + ISO8601DateFormatter().string(from: drafted.invitation.expiresAt) + "; the link is shown this once"
                )
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List invitations, newest first: id, state, uses taken, groups, expiry, note.", discussion: "Example: siwa invite list")
        @OptionGroup var options: KeysCommand.Options

        func run() async throws {
            try await KeysCommand.withStore(options) { store in
                let now = Date()
                let format = ISO8601DateFormatter()
                for invitation in try await store.invitations() {
                    let state = invitation.closed(at: now)?.rawValue ?? "open"
                    let note = invitation.note.map { "  \"\($0)\"" } ?? ""
                    CLIOutput.stdout(
                        "\(invitation.id)  \(state)  \(invitation.uses - invitation.usesLeft)/\(invitation.uses)  \(invitation.groups.joined(separator: ","))  until \(format.string(from: invitation.expiresAt))  by \(invitation.createdBy)\(note)"
                    )
                }
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Close an invitation: its link shows that it was withdrawn and changes nothing.", discussion: "Example: siwa invite revoke inv_3f2a9c01b7de")
        @OptionGroup var options: KeysCommand.Options
        @Argument(help: "The invitation's id, as siwa invite list shows it.") var id: String

        func run() async throws {
            try await KeysCommand.withStore(options) { store, plan in
                guard try await store.revokeInvitation(id: id, at: Date()) else {
                    CLIOutput.stderr("siwa: no open invitation has the id \(id)")
                    throw ExitCode(1)
                }
                GroupsCommand.audit(Invitations.revokedEvent(id: id, actor: "cli"), plan)
                CLIOutput.stdout("\(id): revoked")
            }
        }
    }
}
