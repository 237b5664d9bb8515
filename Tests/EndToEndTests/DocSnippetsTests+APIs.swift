import Foundation
import NIOCore
import TestSupport
import Testing

/// docs/apis.md, every block run as a reader runs it: its `siwa serve --config siwa.json` with its `siwa.json` in front
/// of the echo upstream, its `siwa oidc` commands by the built `siwa` on that site's store, its curl blocks by `sh`
/// with curl and jq (only the ports changed, and the secrets `add-client` printed given as the page says), the person
/// approving the device flow in siwa's `/auth/device` form; and its Swift type-checked against a stand-in for
/// AuthenticationServices, which Linux lacks.
extension DocSnippetsTests {
    static let apisConfiguration = Shown(page: "docs/apis.md", language: "json", after: "with this `siwa.json`")
    static let apisServe = Shown(page: "docs/apis.md", language: "sh", after: "with this `siwa.json`")
    static let apisSwift = Shown(page: "docs/apis.md", language: "swift", after: "## The site's iOS app")
    static let apisNative = Shown(page: "docs/apis.md", language: "sh", after: "The same requests with `curl`")
    static let apisDeviceRegistration = Shown(page: "docs/apis.md", language: "sh", after: "## A command line (the device flow)")
    static let apisDeviceScript = Shown(page: "docs/apis.md", language: "sh", after: "Then the command line (`sh reports-login.sh`)")
    static let apisServiceRegistration = Shown(page: "docs/apis.md", language: "sh", after: "## A service (client credentials)")
    static let apisServiceJob = Shown(page: "docs/apis.md", language: "sh", after: "The job asks for a token")
    static let apisRotation = Shown(page: "docs/apis.md", language: "sh", after: "To change the secret without stopping")
    static let apisIntrospectionRegistration = Shown(page: "docs/apis.md", language: "sh", after: "registers as a service (a confidential client)")
    static let apisIntrospection = Shown(page: "docs/apis.md", language: "sh", after: "registers as a service (a confidential client)", nth: 2)
    static let apisRefusals = Shown(page: "docs/apis.md", language: "sh", after: "## When the door says no")

    /// The page's command blocks, every one run by `apisWalkThrough`.
    static let apisCommands = [
        apisServe, apisNative, apisDeviceRegistration, apisDeviceScript, apisServiceRegistration, apisServiceJob, apisRotation, apisIntrospectionRegistration,
        apisIntrospection, apisRefusals,
    ]

    @Test("docs/apis.md's Swift for the iOS app type-checks as written against AuthenticationServices' two credential properties (a stand-in: Linux has no AuthenticationServices)")
    func apisSwiftTypeChecks() async throws {
        try await Self.withDirectory("apis-swift") { directory in
            let standIn = """
                @_exported import Foundation
                #if canImport(FoundationNetworking)
                @_exported import FoundationNetworking
                #endif
                /// What the page reads of the credential ASAuthorizationController hands the app.
                public class ASAuthorizationAppleIDCredential {
                    public var identityToken: Data? { nil }
                    public var authorizationCode: Data? { nil }
                }
                """
            let standInFile = directory.appendingPathComponent("AuthenticationServices.swift")
            let snippet = directory.appendingPathComponent("snippet.swift")
            try standIn.write(to: standInFile, atomically: true, encoding: .utf8)
            try Self.apisSwift.text().write(to: snippet, atomically: true, encoding: .utf8)
            let swiftc = try Self.swiftc()
            let module = try await ChildProcess.run(
                swiftc, arguments: ["-emit-module", "-module-name", "AuthenticationServices", "-emit-module-path", directory.appendingPathComponent("AuthenticationServices.swiftmodule").path, standInFile.path],
                environment: [:], timeLimit: .seconds(120)
            )
            #expect(module.status == 0, "\(module.stderr)")
            let checked = try await ChildProcess.run(
                swiftc, arguments: ["-typecheck", "-swift-version", "6", "-I", directory.path, snippet.path], environment: [:], timeLimit: .seconds(120)
            )
            #expect(checked.status == 0, "the page's Swift does not type-check:\n\(checked.stderr)")
        }
    }

    /// The `swiftc` beside the `swift` that runs these tests.
    static func swiftc() throws -> URL {
        let path = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map { URL(fileURLWithPath: String($0)).appendingPathComponent("swiftc") }
        guard let found = path.first(where: { FileManager.default.isExecutableFile(atPath: $0.path) }) else { throw EndToEndError("no swiftc on PATH") }
        return found
    }

    @Test("docs/apis.md run as written: siwa serve with its siwa.json in front of the API; the iOS app's curl requests reach /api/ios/ as Ada and the app; the device flow's script, approved in /auth/device, reaches /api/reports as Ada and reports-cli; the service's token reaches /api/exports/ as service:nightly-export in exporters, introspects as active, and still comes after rotate-secret with the new secret and the old; the refusals say what the page says")
    func apisWalkThrough() async throws {
        try await withEchoUpstream { api in
            try await Self.withDirectory("apis") { directory in
                let configuration = directory.appendingPathComponent("siwa.json")
                try DocSnippets.substituting(try Self.apisConfiguration.text(), ["http://127.0.0.1:3000": "http://127.0.0.1:\(api)"])
                    .write(to: configuration, atomically: true, encoding: .utf8)
                let serve = try Self.siwaArguments(try DocSnippets.command(in: try Self.apisServe.text(), starting: "siwa serve"))
                #expect(serve == ["serve", "--config", "siwa.json"], "the block's command changed: \(serve)")
                let arguments = serve.map { $0 == "siwa.json" ? configuration.path : $0 }
                try await Self.withSiwaServe(arguments) { site, _ in
                    try await Visit.withClient { visit in
                        try await Self.apisSteps(site, visit)
                    }
                }
            }
        }
    }

    /// The page's blocks after `siwa serve`, in its order.
    static func apisSteps(_ site: LocalSite, _ visit: Visit) async throws {
        let ada = site.user("Ada")
        let (siwaHost, emulatorHost) = (String(site.origin.dropFirst("http://".count)), String(site.emulatorOrigin.dropFirst("http://".count)))
        // A block with siwa's port (and the emulator's) made this site's.
        func block(_ shown: Shown, emulator: Bool = false) throws -> String {
            emulator
                ? try DocSnippets.substituting(try shown.text(), ["127.0.0.1:8080": siwaHost, "127.0.0.1:9090": emulatorHost])
                : try DocSnippets.substituting(try shown.text(), ["127.0.0.1:8080": siwaHost])
        }
        func siwaCommand(_ shown: Shown, starting prefix: String) async throws -> ChildProcess.Outcome {
            let arguments = try Self.siwaArguments(try DocSnippets.command(in: try shown.text(), starting: prefix))
            let outcome = try await ChildProcess.run(ChildProcess.siwaExecutable, arguments: arguments, environment: ["SIWA_DB": site.databasePath], timeLimit: .seconds(30))
            #expect(outcome.status == 0, "siwa \(arguments.joined(separator: " ")): \(outcome.stderr)")
            return outcome
        }
        func secret(_ outcome: ChildProcess.Outcome) throws -> String {
            try #require(outcome.stdout.firstMatch(of: /client_secret: (\S+)/).map { String($0.output.1) }, "\(outcome.stdout)")
        }

        // The iOS app, by curl: the emulator's credential for Ada, siwa's session token, the API.
        let native = try await Self.sh(try block(Self.apisNative, emulator: true))
        let iosCall = try Self.echoed(native, "the iOS app's call")
        #expect(iosCall.path == "/api/ios/me")
        #expect(iosCall.values("x-auth-request-user") == [ada.sub])
        #expect(iosCall.values("x-auth-request-client") == ["com.example.siwa.app"])
        #expect(iosCall.values("authorization").isEmpty, "the token stays with siwa")

        // The command line: registered, then its script, with Ada approving in siwa's page while it polls.
        let cli = try await siwaCommand(Self.apisDeviceRegistration, starting: "siwa oidc add-client")
        #expect(cli.stdout == "client_id: reports-cli\n", "a public client has no secret: \(cli.stdout)")
        let adaSession = try await visit.signIn(site, user: ada).session
        let deviceOutput = try await Self.shRunning(try block(Self.apisDeviceScript), until: { $0.contains("\n{") }) { printed in
            let url = try #require(printed.firstMatch(of: /Open (\S+) and approve the code (\S+)/), "the script printed: \(printed)")
            let verification = String(url.output.1)
            #expect(verification.hasPrefix(site.url("/auth/device?user_code=")))
            try await Self.approve(site, visit, session: adaSession, verification: verification, userCode: String(url.output.2))
        }
        let reportsCall = try Self.echoed(deviceOutput.components(separatedBy: "\n").filter { $0.hasPrefix("{") }.joined(), "the command line's call")
        #expect(reportsCall.path == "/api/reports")
        #expect(reportsCall.values("x-auth-request-user") == [ada.sub])
        #expect(reportsCall.values("x-auth-request-client") == ["reports-cli"])

        // The service: registered in its group, its job's token, the API.
        let service = try await siwaCommand(Self.apisServiceRegistration, starting: "siwa oidc add-client")
        let firstSecret = try secret(service)
        let job = try block(Self.apisServiceJob)
        // Running instances see a new client and group within 5 s (SQLite).
        let exportCall = try await Self.eventually("the service's call") { try Self.echoed(try await Self.sh(job, ["CLIENT_SECRET": firstSecret]), "the service's call") }
        #expect(exportCall.path == "/api/exports/today")
        #expect(exportCall.values("x-auth-request-user") == ["service:nightly-export"])
        #expect(exportCall.values("x-auth-request-groups") == ["exporters"])
        #expect(exportCall.values("x-auth-request-client") == ["nightly-export"])

        // Introspection by the API registered as a service, of the job's token and of one siwa never issued.
        let apiSecret = try secret(try await siwaCommand(Self.apisIntrospectionRegistration, starting: "siwa oidc add-client"))
        let serviceToken = try await Self.sh(
            #"curl -s -u "nightly-export:$CLIENT_SECRET" http://\#(siwaHost)/oauth2/token -d grant_type=client_credentials | jq -r .access_token"#,
            ["CLIENT_SECRET": firstSecret]
        ).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(serviceToken.hasPrefix("siwa_at_"))
        // Each command of the block on its own (curl prints the answers without a newline between them).
        let asks = DocSnippets.commandLines(in: try block(Self.apisIntrospection))
        #expect(asks.count == 2, "\(asks)")
        var answers: [[String: Any]] = []
        for ask in asks {
            let printed = try await Self.eventually("introspection") {
                let printed = try await Self.sh(ask, ["API_SECRET": apiSecret, "access_token": serviceToken])
                guard !printed.contains("invalid_client") else { throw EndToEndError("reports-api not known yet: \(printed)") }
                return printed
            }
            answers.append(try #require(try JSONSerialization.jsonObject(with: Data(printed.utf8)) as? [String: Any], "\(printed)"))
        }
        guard answers.count == 2 else { return }
        let active = answers[0]
        #expect(active["active"] as? Bool == true)
        #expect(active["sub"] as? String == "service:nightly-export")
        #expect(active["client_id"] as? String == "nightly-export")
        #expect(active["groups"] as? [String] == ["exporters"])
        #expect(active["iss"] as? String == site.origin)
        let shownKeys = Set(["active", "client_id", "exp", "groups", "iat", "iss", "sub", "token_type"])
        #expect(Set(active.keys) == shownKeys, "the page shows the answer's fields: \(active.keys.sorted())")
        #expect(answers[1].count == 1 && answers[1]["active"] as? Bool == false, "\(answers[1])")

        // The rotation: the new secret works at once, the old one for the overlap.
        let rotated = try await siwaCommand(Self.apisRotation, starting: "siwa oidc rotate-secret")
        let newSecret = try secret(rotated)
        #expect(rotated.stdout.contains("the previous secret is accepted until "), "\(rotated.stdout)")
        let withNew = try await Self.eventually("the rotated secret") { try Self.echoed(try await Self.sh(job, ["CLIENT_SECRET": newSecret]), "with the new secret") }
        #expect(withNew.values("x-auth-request-user") == ["service:nightly-export"])
        let withOld = try Self.echoed(try await Self.sh(job, ["CLIENT_SECRET": firstSecret]), "with the old secret, within the overlap")
        #expect(withOld.values("x-auth-request-user") == ["service:nightly-export"])

        // The refusals, each command of the block on its own, with the command line's token (Ada's, of reports-cli).
        let deviceToken = try #require(
            try await siwaTokenOfReportsCLI(site, visit, session: adaSession), "a second device token for the refusals"
        )
        let refusals = Self.commandsWithOutput(try block(Self.apisRefusals))
        #expect(refusals.count == 5, "\(refusals)")
        var printed: [String] = []
        for (command, shown) in refusals {
            let answer = try await Self.sh(command, ["access_token": deviceToken])
            printed.append(answer)
            let (head, body) = Self.headAndBody(answer)
            // Each line the page shows under the command: the status line, fields as curl prints them, the body.
            for line in shown {
                if line.hasPrefix("HTTP/1.1 ") {
                    #expect(head.first == line, "\(command)\n\(answer)")
                } else if line.hasPrefix("{") {
                    #expect(body == line, "\(command)\n\(answer)")
                } else if line.wholeMatch(of: /[A-Za-z-]+: .*/) != nil {
                    #expect(head.contains(line), "\(command): no \(line)\n\(answer)")
                }
            }
        }
        guard printed.count == 5 else { return }
        #expect(printed.map { Self.headAndBody($0).head.first ?? "" } == ["HTTP/1.1 403 Forbidden", "HTTP/1.1 401 Unauthorized", "HTTP/1.1 400 Bad Request", "HTTP/1.1 401 Unauthorized", "HTTP/1.1 200 OK"])
        let preflight = try Self.echoed(Self.headAndBody(printed[4]).body, "the preflight")
        #expect(preflight.method == "OPTIONS")
        #expect(preflight.values("x-auth-request-user").isEmpty, "a preflight names no person")
    }

    /// The commands of `block` (sh, lines ending in `\` joined), each with the lines the page shows under it as
    /// `# …` comments, without the `# `.
    static func commandsWithOutput(_ block: String) -> [(command: String, shown: [String])] {
        var result: [(command: String, shown: [String])] = []
        for line in block.replacingOccurrences(of: "\\\n", with: " ").split(separator: "\n").map(String.init) where !line.trimmingCharacters(in: .whitespaces).isEmpty {
            if line.hasPrefix("# ") {
                if !result.isEmpty { result[result.count - 1].shown.append(String(line.dropFirst(2))) }
            } else {
                result.append((line, []))
            }
        }
        return result
    }

    /// What `curl -si` printed: the head's lines (without their CRLF) and the body.
    static func headAndBody(_ printed: String) -> (head: [String], body: String) {
        let parts = printed.components(separatedBy: "\r\n\r\n")
        return (parts[0].components(separatedBy: "\r\n"), parts.dropFirst().joined(separator: "\r\n\r\n"))
    }

    /// Another device-flow token of the page's `reports-cli` for Ada, got as the page's script gets one (for the
    /// refusals, whose commands use the script's `$access_token`).
    static func siwaTokenOfReportsCLI(_ site: LocalSite, _ visit: Visit, session: String) async throws -> String? {
        let started = try await visit.send(site.url("/oauth2/device_authorization"), method: .POST, headers: [("Content-Type", "application/x-www-form-urlencoded")], body: "client_id=reports-cli&scope=openid")
        let answer = try #require(try JSONSerialization.jsonObject(with: Data(started.body.readableBytesView)) as? [String: Any], "\(started.text)")
        try await Self.approve(
            site, visit, session: session, verification: try #require(answer["verification_uri_complete"] as? String), userCode: try #require(answer["user_code"] as? String)
        )
        let tokens = try await visit.send(
            site.url("/oauth2/token"), method: .POST, headers: [("Content-Type", "application/x-www-form-urlencoded")],
            body: "client_id=reports-cli&grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code&device_code=\(Visit.formEncode(try #require(answer["device_code"] as? String)))"
        )
        return (try JSONSerialization.jsonObject(with: Data(tokens.body.readableBytesView)) as? [String: Any])?["access_token"] as? String
    }

    /// The person of `session` approves `userCode` as in a browser: the page `verification` names (the client shown,
    /// with the form's CSRF token), then the form with `decision=approve`.
    static func approve(_ site: LocalSite, _ visit: Visit, session: String, verification: String, userCode: String) async throws {
        let page = try await visit.send(verification, cookies: ["siwa_session": session])
        #expect(page.status == 200 && page.text.contains("reports-cli"), "\(page.status) \(page.text)")
        let csrf = try #require(page.text.firstMatch(of: /name="csrf_token" value="([^"]+)"/).map { String($0.output.1) }, "\(page.text)")
        let decided = try await visit.send(
            site.url("/auth/device"), method: .POST, headers: [("Content-Type", "application/x-www-form-urlencoded")], cookies: ["siwa_session": session],
            body: "csrf_token=\(Visit.formEncode(csrf))&user_code=\(Visit.formEncode(userCode))&decision=approve"
        )
        #expect(decided.status == 200, "\(decided.text)")
    }

    /// What the echo upstream says it received, from the body a curl printed.
    static func echoed(_ printed: String, _ what: String) throws -> EchoedRequest {
        do {
            return try EchoedRequest(json: ByteBuffer(string: printed))
        } catch {
            throw EndToEndError("\(what) did not reach the API; curl printed: \(printed)")
        }
    }

    /// `text` run by `sh` to its end, with `environment` added; what it printed (its errors in the failure).
    static func sh(_ text: String, _ environment: [String: String] = [:]) async throws -> String {
        let outcome = try await ChildProcess.run(URL(fileURLWithPath: "/bin/sh"), arguments: ["-c", text], environment: environment, timeLimit: .seconds(60))
        guard outcome.status == 0 else { throw EndToEndError("sh exited \(outcome.status): \(outcome.stderr)\n\(outcome.stdout)\nrunning:\n\(text)") }
        return outcome.stdout
    }

    /// `text` run by `sh` while `body` runs, once it has printed something; then waited for until its output passes
    /// `until` (at most 60 s). Its output.
    static func shRunning(_ text: String, until done: (String) -> Bool, _ body: (String) async throws -> Void) async throws -> String {
        try await Self.withDirectory("apis-sh") { directory in
            let output = directory.appendingPathComponent("output")
            func printed() -> String { (try? String(contentsOf: output, encoding: .utf8)) ?? "" }
            return try await ChildProcess.withRunning(
                URL(fileURLWithPath: "/bin/sh"), arguments: ["-c", text], output: output, ready: { printed().contains("\n") }
            ) { _ in
                try await body(printed())
                let deadline = ContinuousClock.now + .seconds(60)
                while !done(printed()), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(200)) }
                return printed()
            }
        }
    }

    /// `attempt`'s value once it stops throwing, trying for 15 s (what siwa's other instances and caches take to see a
    /// change made in the store is 5 s).
    static func eventually<T>(_ what: String, _ attempt: () async throws -> T) async throws -> T {
        let deadline = ContinuousClock.now + .seconds(15)
        while true {
            do {
                return try await attempt()
            } catch where ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(500))
            }
        }
    }
}
