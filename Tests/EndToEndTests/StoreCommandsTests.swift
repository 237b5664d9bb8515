import AppleSignIn
import ArgumentParser
import Foundation
@testable import SignInServer
@testable import siwa
import Testing

/// The commands that change what the store holds, run as the CLI runs them: `siwa keys rotate` and `siwa oidc`.
@Suite("siwa keys and siwa oidc")
struct StoreCommandsTests {
    /// A throwaway SQLite file, its data key, and the store as `siwa serve` would open it.
    private static func withDatabase(_ body: (String, String, SQLiteStore) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("siwa.sqlite").path
        let key = TokenCipher.generateKey()
        let store = try SQLiteStore(path: path, cipher: try TokenCipher(base64Keys: [key]))
        try await store.migrate()
        try await body(path, key, store)
    }

    /// Parses `arguments` as the command line of `command` and runs what they name.
    private static func run<Command: AsyncParsableCommand>(_ command: Command.Type, _ arguments: [String]) async throws {
        var parsed = try #require(try command.parseAsRoot(arguments) as? any AsyncParsableCommand)
        try await parsed.run()
    }

    @Test("keys rotate: a new key of each algorithm is published at once and signs after the lead time; the keys of its algorithm it replaces retire after the grace period")
    func keysRotate() async throws {
        try await Self.withDatabase { path, key, store in
            let assertions = IdentityAssertions(store: store, issuer: "http://127.0.0.1:8080", logger: .init(label: "test"))
            try await assertions.prepare()
            try await ProviderKeys(store: store, logger: .init(label: "test")).prepare()
            let firstRSA = try #require(try await store.signingKeys().first { $0.algorithm == "RS256" })
            let first = try #require(try await store.signingKeys().first { $0.algorithm == "ES256" })
            let before = Date()
            try await Self.run(KeysCommand.self, ["rotate", "--db", path, "--data-key", key, "--activate-after", "600", "--retire-after", "3600"])
            let keys = try await store.signingKeys().filter { $0.algorithm == "ES256" }
            #expect(keys.count == 2)
            let new = try #require(keys.first { $0.kid != first.kid })
            let old = try #require(keys.first { $0.kid == first.kid })
            #expect(new.isPublished(at: Date()) && !new.canSign(at: Date()))
            #expect(new.activatesAt.timeIntervalSince(new.createdAt) == 600)
            #expect(new.createdAt >= before.addingTimeInterval(-1))
            #expect(new.canSign(at: new.activatesAt))
            #expect(old.canSign(at: Date()))
            #expect(old.retiresAt == new.activatesAt.addingTimeInterval(3600))
            // Both are in the key set upstreams fetch (as a server started now reads it; a running one within 30 s).
            let fresh = IdentityAssertions(store: store, issuer: "http://127.0.0.1:8080", logger: .init(label: "test"))
            let published = try await fresh.publishedKeySet()["keys"]?.compactMap { $0["kid"] } ?? []
            #expect(Set(published) == [new.kid, old.kid])
            // The RS256 keys rotated beside them, each algorithm retiring only its own.
            let rsa = try await store.signingKeys().filter { $0.algorithm == "RS256" }
            #expect(rsa.count == 2)
            #expect(rsa.first { $0.kid == firstRSA.kid }?.retiresAt != nil)
            #expect(rsa.first { $0.kid != firstRSA.kid }?.retiresAt == nil)
            let providerKeySet = try await ProviderKeys(store: store, logger: .init(label: "test")).keySet()["keys"] ?? []
            #expect(Set(providerKeySet.compactMap { $0["kid"] }) == Set((keys + rsa).map(\.kid)))
            await #expect(throws: (any Error).self) {
                try await Self.run(KeysCommand.self, ["rotate", "--db", path, "--data-key", key, "--retire-after", "300"])
            }
        }
    }

    @Test("oidc add-client stores the client with its secret hashed (the secret is printed once), list-clients shows it, remove-client removes it; bad input is refused")
    func oidcClients() async throws {
        try await Self.withDatabase { path, key, store in
            let common = ["--db", path, "--data-key", key]
            try await Self.run(OIDCCommand.self, ["add-client", "grafana", "--redirect-uri", "https://grafana.example.com/login/generic_oauth", "--post-logout-redirect-uri", "https://grafana.example.com/login"] + common)
            let clients = try await store.providerClients()
            #expect(clients.map(\.clientID) == ["grafana"])
            let grafana = try #require(clients.first)
            #expect(grafana.redirectURIs == ["https://grafana.example.com/login/generic_oauth"])
            #expect(grafana.postLogoutRedirectURIs == ["https://grafana.example.com/login"])
            #expect(grafana.secretHash?.count == 64)
            #expect(!grafana.isPublic)

            try await Self.run(OIDCCommand.self, ["add-client", "spa", "--public", "--redirect-uri", "http://localhost:5173/cb", "--id-token-alg", "ES256"] + common)
            let spa = try #require(try await store.providerClients().first { $0.clientID == "spa" })
            #expect(spa.isPublic && spa.secretHash == nil && spa.idTokenAlgorithm == "ES256")

            // Refused: a second client of the same name, no redirect URI, a plain-http remote redirect, a wildcard scope.
            await #expect(throws: (any Error).self) {
                try await Self.run(OIDCCommand.self, ["add-client", "grafana", "--redirect-uri", "https://other.example.com/cb"] + common)
            }
            for bad in [["add-client", "x"], ["add-client", "x", "--redirect-uri", "http://app.example.com/cb"], ["add-client", "x", "--redirect-uri", "https://a.example/cb", "--scope", "admin"]] {
                await #expect(throws: (any Error).self, "\(bad)") { try await Self.run(OIDCCommand.self, bad + common) }
            }
            #expect(try await store.providerClients().count == 2)

            try await Self.run(OIDCCommand.self, ["remove-client", "grafana"] + common)
            #expect(try await store.providerClients().map(\.clientID) == ["spa"])
            await #expect(throws: (any Error).self) { try await Self.run(OIDCCommand.self, ["remove-client", "grafana"] + common) }
        }
    }

    @Test("oidc_clients in the config file (JSON) and the environment (JSON text): parsed, secrets hashed and redacted; a bad client stops serve naming the key")
    func configuredClients() async throws {
        let json = #"[{"client_id": "app", "client_secret": "s3cret", "redirect_uris": ["https://app.example.com/cb"], "post_logout_redirect_uris": ["https://app.example.com/"]}]"#
        let directory = try ConfigurationLayersTests.directory(["c.json": #"{"oidc_clients": \#(json), "port": 8181}"#])
        defer { try? FileManager.default.removeItem(at: directory) }
        let values = try await LayeredValues(arguments: [], configFile: directory.appendingPathComponent("c.json").path, environment: [:], dotEnvPath: nil)
        let settings = try ServePlan(values: values, creatingLocalKey: false).settings
        #expect(settings.port == 8181)
        let client = try #require(settings.provider.clients.first)
        #expect(client.clientID == "app")
        #expect(client.secretHash == ProviderSettings.hash("s3cret"))
        #expect(settings.provider.issuer == "http://127.0.0.1:8181")
        #expect(values.printed().contains("oidc_clients = <redacted>  (config file)"))
        #expect(!values.printed().contains("s3cret"))

        let fromEnvironment = try await LayeredValues(arguments: [], environment: ["SIWA_OIDC_CLIENTS": json], dotEnvPath: nil)
        #expect(try ServePlan(values: fromEnvironment, creatingLocalKey: false).settings.provider.clients.map(\.clientID) == ["app"])
        // On the command line (where swift-configuration splits values at commas), over the environment's.
        let two = #"[{"client_id": "cli", "client_secret": "a,b", "redirect_uris": ["https://cli.example.com/cb", "https://cli.example.com/cb2"]}]"#
        let fromCommandLine = try await LayeredValues(arguments: ["--oidc-clients", two], environment: ["SIWA_OIDC_CLIENTS": json], dotEnvPath: nil)
        let cli = try #require(try ServePlan(values: fromCommandLine, creatingLocalKey: false).settings.provider.clients.first)
        #expect(cli.clientID == "cli")
        #expect(cli.secretHash == ProviderSettings.hash("a,b"))
        #expect(cli.redirectURIs.count == 2)
        #expect(fromCommandLine.printed().contains("oidc_clients = <redacted>  (command line)"))
        for bad in [#"{"client_id": "a"}"#, #"[{"client_id": "a", "redirect_uris": ["https://a.example/cb"]}]"#, #"[{"client_id": "a", "client_secret": "x", "redirect_uris": ["https://a.example/cb#frag"]}]"#] {
            let values = try await LayeredValues(arguments: [], environment: ["SIWA_OIDC_CLIENTS": bad], dotEnvPath: nil)
            #expect(throws: (any Error).self, "\(bad)") { _ = try ServePlan(values: values, creatingLocalKey: false) }
            #expect { _ = try ServePlan(values: values, creatingLocalKey: false) } throws: { ($0 as? ConfigurationError)?.field == "oidc_clients" }
        }
    }
}
