import AppleSignIn
import ArgumentParser
import Foundation
import SignInServer

/// `siwa oidc`: the clients of siwa's OpenID Provider kept in the store of `--db` / `SIWA_DB` (beside those of
/// `oidc_clients` in the configuration), shared by every instance.
struct OIDCCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "oidc",
        abstract: "Register, list and remove the apps that sign their users in through siwa's OpenID Provider.",
        discussion: "Example: siwa oidc add-client grafana --redirect-uri https://grafana.example.com/login/generic_oauth",
        subcommands: [AddClient.self, ListClients.self, RemoveClient.self, RotateSecret.self]
    )

    struct AddClient: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "add-client",
            abstract: "Register a client; prints its client_id and, for a confidential client, its client_secret (shown once, stored hashed).",
            discussion: "Example: siwa oidc add-client wiki --redirect-uri https://wiki.example.com/cb --allowed-group staff --backchannel-logout-uri https://wiki.example.com/logout"
        )
        @OptionGroup var options: KeysCommand.Options
        @Argument(help: "The client_id (printable ASCII, no spaces).") var name: String
        @Option(name: .customLong("redirect-uri"), help: "A redirect URI, compared exactly (repeat for more).") var redirectURIs: [String] = []
        @Option(name: .customLong("post-logout-redirect-uri"), help: "Where the end-session endpoint may send the browser (repeat for more).") var postLogoutRedirectURIs: [String] = []
        @Flag(name: .customLong("public"), help: "A public client (a browser or native app): no secret, PKCE required.") var isPublic = false
        @Option(name: .customLong("scope"), help: "A scope the client may be granted (repeat; default openid email profile offline_access).") var scopes: [String] = []
        @Option(help: "How its id_tokens are signed: RS256 or ES256.") var idTokenAlg: String = "RS256"
        @Flag(help: "Give it pairwise subjects (its own sub for each person, unlinkable to other clients'); every redirect URI on one host.") var pairwise = false
        @Option(name: .customLong("allowed-group"), help: "Sign in members of this group only (repeat for more); others get access_denied.") var allowedGroups: [String] = []
        @Option(name: .customLong("backchannel-logout-uri"), help: "Where siwa posts a Logout Token when a session the client has tokens of ends.") var backchannelLogoutURI: String?
        @Flag(help: "A service: it gets client_credentials tokens naming itself (service:NAME), never a person; no redirect URI needed.") var service = false
        @Option(name: .customLong("group"), help: "With --service: a group the service is a member of (repeat for more), for rules that name groups.") var groups: [String] = []
        @Flag(help: "Let it start the device flow (a command line: it shows a code the person enters at /auth/device); no redirect URI needed.") var device = false
        @Flag(name: .customLong("no-iss-in-errors"), help: "Send the authorization endpoint's errors without iss (mod_auth_openidc needs it; RFC 9207 asks for iss).") var noIssInErrors = false

        func run() async throws {
            let secret = isPublic ? nil : RandomToken.generate()
            var client: ProviderClientRecord
            do {
                client = try ProviderClientRecord.validated(
                    clientID: name, secretHash: secret.map(ProviderSettings.hash), redirectURIs: redirectURIs, postLogoutRedirectURIs: postLogoutRedirectURIs,
                    scopes: scopes, isPublic: isPublic, idTokenAlgorithm: idTokenAlg, pairwiseSubject: pairwise, createdAt: Date(),
                    allowedGroups: allowedGroups, backchannelLogoutURI: backchannelLogoutURI, deviceFlow: device, isService: service
                )
            } catch {
                throw ValidationError(error.description)
            }
            client.issInErrors = !noIssInErrors
            guard groups.isEmpty || service else { throw ValidationError("--group is for a service (--service); --allowed-group limits who a client signs in") }
            let members = try groups.map { try GroupsCommand.checked($0, ["sub:" + client.serviceSubject]) }
            let registered = client
            try await KeysCommand.withStore(options) { store, plan in
                guard try await store.addProviderClient(registered) else {
                    CLIOutput.stderr("siwa: a client named \(name) is already registered; remove it first to register it again")
                    throw ExitCode(1)
                }
                GroupsCommand.audit(AuditEvent("client-added", reason: name, actor: "cli"), plan)
                // A service's groups are memberships of its subject, as a person's are: rules and the console see them alike.
                for (group, member) in zip(groups, members) {
                    _ = try await store.addGroupMembers(member, to: group, at: Date())
                    GroupsCommand.audit(AuditEvent("groups-changed", reason: "\(group) +" + member.joined(separator: " +"), actor: "cli"), plan)
                }
                CLIOutput.stdout("client_id: \(name)" + (secret.map { "\nclient_secret: \($0)" } ?? ""))
            }
        }
    }

    struct ListClients: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list-clients", abstract: "One line per client registered in the store (never its secret).", discussion: "Example: siwa oidc list-clients --db ./siwa.sqlite"
        )
        @OptionGroup var options: KeysCommand.Options

        func run() async throws {
            try await KeysCommand.withStore(options) { store in
                for client in try await store.providerClients().sorted(by: { $0.clientID < $1.clientID }) {
                    CLIOutput.stdout(
                        "\(client.clientID)  \(client.isService ? "service" : client.isPublic ? "public" : "confidential")  \(client.idTokenAlgorithm)  redirect: \(client.redirectURIs.joined(separator: " "))"
                            + (client.postLogoutRedirectURIs.isEmpty ? "" : "  post-logout: \(client.postLogoutRedirectURIs.joined(separator: " "))")
                            + (client.allowedGroups.isEmpty ? "" : "  groups: \(client.allowedGroups.joined(separator: " "))")
                            + (client.backchannelLogoutURI.map { "  backchannel-logout: \($0)" } ?? "")
                            + (client.deviceFlow ? "  device" : "") + (client.issInErrors ? "" : "  no-iss-in-errors")
                    )
                }
            }
        }
    }

    struct RemoveClient: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "remove-client", abstract: "Remove a client and revoke every token issued to it.", discussion: "Example: siwa oidc remove-client wiki"
        )
        @OptionGroup var options: KeysCommand.Options
        @Argument(help: "The client_id.") var name: String

        func run() async throws {
            try await KeysCommand.withStore(options) { store, plan in
                guard try await store.removeProviderClient(clientID: name) else {
                    CLIOutput.stderr("siwa: no client named \(name) is registered in the store")
                    throw ExitCode(1)
                }
                GroupsCommand.audit(AuditEvent("client-removed", reason: name, actor: "cli"), plan)
                CLIOutput.stdout("removed \(name); its tokens are revoked")
            }
        }
    }

    struct RotateSecret: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate-secret",
            abstract: "Give a confidential client (a service above all) a new secret; the old one stays valid for --overlap hours, so its deployments can move over.",
            discussion: "Example: siwa oidc rotate-secret billing --overlap 24"
        )
        @OptionGroup var options: KeysCommand.Options
        @Argument(help: "The client_id.") var name: String
        @Option(help: "Hours the replaced secret stays valid (0 ends it now).") var overlap: Double = 24

        func run() async throws {
            guard overlap >= 0, overlap <= 24 * 90 else { throw ValidationError("--overlap is hours, from 0 to 2160") }
            let secret = RandomToken.generate()
            let until = Date().addingTimeInterval(overlap * 3600)
            try await KeysCommand.withStore(options) { store, plan in
                guard try await store.rotateProviderSecret(clientID: name, secretHash: ProviderSettings.hash(secret), until: until) else {
                    CLIOutput.stderr("siwa: no confidential client named \(name) is registered in the store")
                    throw ExitCode(1)
                }
                GroupsCommand.audit(AuditEvent("client-secret-rotated", reason: name, actor: "cli"), plan)
                CLIOutput.stdout("client_id: \(name)\nclient_secret: \(secret)\nthe previous secret is accepted until \(ISO8601DateFormatter().string(from: until))")
            }
        }
    }
}
