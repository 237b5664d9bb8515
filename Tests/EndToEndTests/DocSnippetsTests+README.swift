import AppleIDEmulator
import Foundation
import TestSupport
import Testing

/// The README's commands as a newcomer types them, taken from its ```sh blocks and run by the built `siwa` (for
/// `swift run siwa`): only what must be this test's own is changed, the ports (a free one for the app's 3000, and
/// siwa's and the emulator's through `SIWA_PORT` and `SIWA_EMULATOR_PORT`, the command naming neither) and the store
/// (`SIWA_DB`, which every command reads, as the provider page says). Each test reads its block's whole command list
/// (`DocSnippets.commands(in:)`), so a command added to a block fails it until the test runs that command too.
extension DocSnippetsTests {
    @Test("the README's opening commands: swift run siwa serve prints a URL that shows the Sign in with Apple button, and a person signed in through the emulator lands on the session page with their name, email and Apple user id; ./scripts/test is the package's executable script that ends in swift test")
    func readmeLocalMode() async throws {
        let commands = try DocSnippets.commands(in: try Self.readmeOpening.text())
        #expect(commands == [["swift", "run", "siwa", "serve"], ["./scripts/test"]], "the block's commands changed, and this test runs these two: \(commands)")
        // ./scripts/test is what runs this test, so it is not run again here: it is there for `./` to run, and runs swift test.
        let script = DocSnippets.packageDirectory.appendingPathComponent("scripts/test").path
        #expect(FileManager.default.isExecutableFile(atPath: script), "\(script) is not an executable file")
        let lastLine = try String(contentsOfFile: script, encoding: .utf8).split(separator: "\n").last { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
        #expect(lastLine?.hasPrefix("swift test") == true, "scripts/test no longer ends by running swift test: \(lastLine ?? "")")

        let arguments = try Self.siwaArguments(try #require(commands.first))
        try await Self.withSiwaServe(arguments) { site, siwa in
            let printed = try await Self.printedURL(siwa)
            #expect(printed == site.url("/"))
            try await Visit.withClient { visit in
                let start = try await visit.send(printed, headers: [("Accept", "text/html")])
                #expect(start.status == 200)
                #expect(start.text.contains(#"id="siwa-button""#), "\(start.text)")
                let ada = site.user("Ada")
                let signedIn = try await visit.signIn(site, user: ada)
                let landing = try #require(signedIn.returnedTo)
                let session = try await visit.send(landing.hasPrefix("/") ? site.url(landing) : landing, headers: [("Accept", "text/html")], cookies: ["siwa_session": signedIn.session])
                #expect(session.status == 200, "\(landing): \(session.text)")
                #expect(session.text.contains(#"<dd id="name">\#(ada.firstName) \#(ada.lastName)</dd>"#), "\(session.text)")
                #expect(session.text.contains(#"<dd id="email">\#(ada.email)"#))
                #expect(session.text.contains("<code>\(ada.sub)</code>"))
                #expect(session.text.contains(#"id="signed-in-at""#))
            }
        }
    }

    @Test("the README's quick start in front of an app: /health reaches the app without a sign-in and without an identity; any other path sends a browser to the sign-in (a client that is not a browser gets 401) and reaches the app only once the person signed in, with who they are")
    func readmeUpstream() async throws {
        try await withEchoUpstream { app in
            let block = try DocSnippets.substituting(try Self.readmeUpstream.text(), ["http://127.0.0.1:3000": "http://127.0.0.1:\(app)"])
            let commands = try DocSnippets.commands(in: block).map(Self.siwaArguments)
            #expect(commands.map { $0.first } == ["serve"], "the block's commands changed, and this test runs one siwa serve: \(commands)")
            try await Self.withSiwaServe(try #require(commands.first)) { site, siwa in
                try await Visit.withClient { visit in
                    let health = try await visit.send(site.url("/health"))
                    #expect(health.status == 200, "\(health.text)\n\(siwa.logText)")
                    #expect(try health.echoed().path == "/health")
                    #expect(try health.echoed().values("x-auth-request-user") == [])

                    // Not forwarded: siwa answers, and nothing of the app's answer (its cookie, its JSON) comes back.
                    let page = site.url("/reports?year=2026")
                    let anonymous = try await visit.send(page, headers: [("Accept", "text/html")])
                    #expect(anonymous.status == 302)
                    let signIn = try #require(anonymous.location)
                    #expect(signIn.hasPrefix(site.url("/auth/apple?")), "\(signIn)")
                    #expect(anonymous.setCookie("upstream") == nil)
                    #expect((try? anonymous.echoed()) == nil)
                    let script = try await visit.send(site.url("/api/reports"), headers: [("Accept", "application/json")])
                    #expect(script.status == 401)
                    #expect((try? script.echoed()) == nil)
                    #expect(try await visit.send(site.url("/health"), method: .POST).status == 401, "the route is GET's alone")

                    let ada = site.user("Ada")
                    let signedIn = try await visit.signIn(site, user: ada, start: signIn)
                    #expect(signedIn.returnedTo == page)
                    let shown = try await visit.send(page, headers: [("Accept", "text/html")], cookies: ["siwa_session": signedIn.session])
                    #expect(shown.status == 200)
                    #expect(try shown.echoed().path == "/reports?year=2026")
                    #expect(try shown.echoed().values("x-auth-request-user") == [ada.sub])
                    #expect(try shown.echoed().values("x-auth-request-email") == [ada.email])
                }
            }
        }
    }

    @Test("the README's quick start as the OpenID provider, every command of its block: siwa oidc add-client prints the client_id and a client_secret; siwa oidc list-clients on the same store then lists the client with its redirect URI; the discovery URL of the comment is siwa's")
    func readmeOIDC() async throws {
        try await Self.withDirectory("readme-oidc") { directory in
            let database = directory.appendingPathComponent("siwa.sqlite").path
            let block = try Self.readmeOIDC.text()
            let commands = try DocSnippets.commands(in: block).map(Self.siwaArguments)
            #expect(commands.map { $0.prefix(2).joined(separator: " ") } == ["oidc add-client"], "the block's commands changed, and this test runs one add-client: \(commands)")
            let arguments = try #require(commands.first)
            let redirect = try #require(arguments.firstIndex(of: "--redirect-uri").map { arguments[$0 + 1] }, "\(arguments)")

            // As written, the store named by SIWA_DB (as the provider page says the commands read it).
            let added = try await ChildProcess.run(ChildProcess.siwaExecutable, arguments: arguments, environment: ["SIWA_DB": database], timeLimit: .seconds(30))
            #expect(added.status == 0, "\(added.stderr)")
            let printed = added.stdout.split(separator: "\n").map(String.init)
            #expect(printed.first == "client_id: grafana", "\(added.stdout)")
            let secret = try #require(printed.dropFirst().first?.firstMatch(of: /^client_secret: ([A-Za-z0-9_-]{32,})$/).map { String($0.output.1) }, "\(added.stdout)")

            let listed = try await ChildProcess.run(ChildProcess.siwaExecutable, arguments: ["oidc", "list-clients", "--db", database], environment: [:], timeLimit: .seconds(30))
            #expect(listed.status == 0, "\(listed.stderr)")
            let lines = listed.stdout.split(separator: "\n").map(String.init)
            #expect(lines.count == 1, "\(listed.stdout)")
            #expect(lines.first?.hasPrefix("grafana  confidential") == true, "\(listed.stdout)")
            #expect(lines.first?.contains("redirect: \(redirect)") == true, "\(listed.stdout)")
            #expect(!listed.stdout.contains(secret), "list-clients shows a secret")

            // What the comment says the app reads, with siwa at this test's origin.
            let discoveryURL = try #require(block.firstMatch(of: /the app reads (\S+)/).map { String($0.output.1) }, "\(block)")
            try await LocalSite.run(settings: ["db": database]) { site in
                try await Visit.withClient { visit in
                    let discovery = try await visit.send(try DocSnippets.substituting(discoveryURL, ["https://auth.example.com": site.origin]))
                    #expect(discovery.status == 200)
                    let document = try JSONSerialization.jsonObject(with: Data(discovery.body.readableBytesView)) as? [String: Any] ?? [:]
                    #expect(document["issuer"] as? String == site.origin, "\(document)")
                    #expect(document["authorization_endpoint"] as? String == site.url("/oauth2/authorize"), "\(document)")
                }
            }
        }
    }

    /// Runs the built `siwa` with `arguments` (`serve …`) in a process of its own, on free ports and a throwaway store
    /// given through the environment, until `ready` says it answers (by default `/healthz` on its port; over the socket
    /// for `--socket`) and its emulator does; `body` gets the site as `LocalSite` describes it and the process.
    /// Stopped by SIGTERM at the end; started again on new ports when one was taken meanwhile.
    static func withSiwaServe(
        _ arguments: [String],
        ready: (LocalSite) async -> Bool = { (try? await HTTPProbe.status($0.url("/healthz"))) == 200 },
        _ body: (LocalSite, SiwaProcess) async throws -> Void
    ) async throws {
        try await LocalSite.startingAgain(tries: 5) { started in
            let ports = try await FreePorts.reserve(2)
            try await Self.withDirectory("readme") { directory in
                // Where the process will be, as the plan of the same ports and store describes it (origins, the emulator's users).
                let site = try await LocalSite.planned([:], ports: ports, directory: directory).site
                let log = directory.appendingPathComponent("siwa.log")
                let environment = ["SIWA_PORT": String(site.port), "SIWA_EMULATOR_PORT": String(site.emulatorPort), "SIWA_DB": site.databasePath]
                try await ChildProcess.withRunning(
                    ChildProcess.siwaExecutable, arguments: arguments, environment: environment, output: log,
                    ready: {
                        guard await ready(site) else { return false }
                        return (try? await HTTPProbe.status(site.emulatorOrigin + "/healthz")) == 200
                    }
                ) { pid in
                    started()
                    try await body(site, SiwaProcess(pid: pid, log: log))
                }
            }
        }
    }

    /// The URL `siwa serve` tells the person to open ("siwa: open URL in a browser …"), once it has said it.
    static func printedURL(_ siwa: SiwaProcess) async throws -> String {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if let url = siwa.logText.firstMatch(of: /siwa: open (\S+) in a browser/) { return String(url.output.1) }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw EndToEndError("siwa serve printed no URL to open:\n\(siwa.logText)")
    }
}
