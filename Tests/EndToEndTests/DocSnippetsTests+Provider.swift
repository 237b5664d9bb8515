import Foundation
import TestSupport
import Testing

/// docs/provider.md's client registration, every command of its block run in order by the built `siwa` on this
/// test's store (`SIWA_DB`, as the page says the commands read it).
extension DocSnippetsTests {
    @Test("docs/provider.md's registration commands in order: siwa oidc add-client prints the client_id and a secret, list-clients shows the client with its redirect URI, remove-client takes it away, and list-clients run again no longer shows it")
    func providerRegistrationCommands() async throws {
        try await Self.withDirectory("provider-commands") { directory in
            let environment = ["SIWA_DB": directory.appendingPathComponent("siwa.sqlite").path]
            let commands = try DocSnippets.commands(in: try Self.providerRegistration.text()).map(Self.siwaArguments)
            #expect(
                commands.map { $0.prefix(2).joined(separator: " ") } == ["oidc add-client", "oidc list-clients", "oidc remove-client"],
                "the block's commands changed, and this test runs these three: \(commands)"
            )
            let (add, list, remove) = (try #require(commands.first), try #require(commands.dropFirst().first), try #require(commands.last))
            func run(_ arguments: [String]) async throws -> ChildProcess.Outcome {
                let outcome = try await ChildProcess.run(ChildProcess.siwaExecutable, arguments: arguments, environment: environment, timeLimit: .seconds(30))
                #expect(outcome.status == 0, "siwa \(arguments.joined(separator: " ")): \(outcome.stderr)")
                return outcome
            }
            let client = try #require(add.dropFirst(2).first, "\(add)")
            let redirect = try #require(add.firstIndex(of: "--redirect-uri").map { add[$0 + 1] }, "\(add)")

            let added = try await run(add)
            #expect(added.stdout.hasPrefix("client_id: \(client)\nclient_secret: "), "\(added.stdout)")
            let listed = try await run(list)
            let line = listed.stdout.split(separator: "\n").first { $0.hasPrefix(client + " ") }
            #expect(line?.contains("redirect: \(redirect)") == true, "list-clients after add-client:\n\(listed.stdout)")

            #expect(remove.dropFirst(2).first == client, "the block removes another client than it adds: \(remove)")
            _ = try await run(remove)
            let after = try await run(list)
            #expect(!after.stdout.split(separator: "\n").contains { $0.hasPrefix(client + " ") }, "list-clients after remove-client:\n\(after.stdout)")
        }
    }
}
