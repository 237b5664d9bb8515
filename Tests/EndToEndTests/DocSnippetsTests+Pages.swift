import Foundation
import JWTKit
import TestSupport
import Testing

/// docs/access.md's `siwa groups` commands and docs/getting-started.md's two ways of starting siwa, each block's every
/// command run by the built `siwa` as a reader types it: only the ports (`SIWA_PORT`, `SIWA_EMULATOR_PORT`, or the
/// free one for `--port 8080`), the store (`SIWA_DB`, or the working directory's) and the path of Apple's key (a P-256
/// key made here for `/etc/siwa/AuthKey_….p8`) are this test's own.
extension DocSnippetsTests {
    @Test("docs/access.md's siwa groups commands in order, with admins also declared in configuration: add puts the members in the store, list shows each member with where it comes from (configuration, store, or both), remove takes the member away, delete removes the group from the store")
    func accessGroupsCommands() async throws {
        try await Self.withDirectory("groups-commands") { directory in
            let commands = try DocSnippets.commands(in: try Self.groupsCommands.text()).map(Self.siwaArguments)
            #expect(
                commands.map { $0.prefix(2).joined(separator: " ") } == ["groups add", "groups remove", "groups list", "groups delete"],
                "the block's commands changed, and this test runs these four: \(commands)"
            )
            let (add, remove, list, delete) = (commands[0], commands[1], commands[2], commands[3])
            let group = try #require(add.dropFirst(2).first, "\(add)")
            let added = Array(add.dropFirst(3))
            let subject = try #require(added.first { $0.hasPrefix("sub:") }, "the add command names no Apple subject: \(add)")
            #expect(remove.dropFirst(2).first == group, "the block removes from another group than it adds to: \(remove)")
            let removed = Array(remove.dropFirst(3))
            #expect(!removed.isEmpty && Set(removed).isSubset(of: added), "the block removes a member it never added: \(remove)")
            let deleted = try #require(delete.dropFirst(2).first, "\(delete)")

            // The reader's group is also declared in configuration (a member of its own, and the subject the block adds),
            // and the group the block deletes is one their store holds.
            let declared = "grace@example.com"
            let configuration = String(decoding: try JSONSerialization.data(withJSONObject: [group: [declared, subject]]), as: UTF8.self)
            let environment = ["SIWA_DB": directory.appendingPathComponent("siwa.sqlite").path, "SIWA_GROUPS": configuration]
            func run(_ arguments: [String]) async throws -> String {
                let outcome = try await ChildProcess.run(ChildProcess.siwaExecutable, arguments: arguments, environment: environment, timeLimit: .seconds(30))
                #expect(outcome.status == 0, "siwa \(arguments.joined(separator: " ")): \(outcome.stderr)")
                return outcome.stdout
            }
            _ = try await run(["groups", "add", deleted, "bob@contractors.example"])

            #expect(try await run(add) == "\(group): \(added.count) added\n")
            let listed = try Self.groupsListed(try await run(list))
            var expected = Dictionary(uniqueKeysWithValues: added.map { ($0, "store") })
            expected[declared] = "configuration"
            expected[subject] = "configuration, store"
            #expect(listed[group] == expected, "siwa groups list after the add:\n\(listed)")
            #expect(listed[deleted] == ["bob@contractors.example": "store"], "\(listed)")

            #expect(try await run(remove) == "\(group): \(removed.count) removed\n")
            let afterRemove = try Self.groupsListed(try await run(list))
            for member in removed { expected[member] = member == subject ? "configuration" : nil }
            #expect(afterRemove[group] == expected, "siwa groups list after the remove:\n\(afterRemove)")

            #expect(try await run(delete) == "\(deleted): deleted, 1 members removed\n")
            let afterDelete = try Self.groupsListed(try await run(list))
            #expect(afterDelete[deleted] == nil, "siwa groups list after the delete:\n\(afterDelete)")
            #expect(afterDelete[group] == expected, "the delete touched another group:\n\(afterDelete)")
        }
    }

    /// What `siwa groups list` prints, read back: each group's members, each with where it comes from.
    static func groupsListed(_ printed: String) throws -> [String: [String: String]] {
        var groups: [String: [String: String]] = [:]
        var current: String?
        for line in printed.split(separator: "\n").map(String.init) {
            if let member = line.wholeMatch(of: /\ {2}(\S+) {2}(.+)/) {
                let group = try #require(current, "a member before any group: \(printed)")
                groups[group, default: [:]][String(member.output.1)] = String(member.output.2)
            } else {
                let group = try #require(line.wholeMatch(of: /(\S+) \(\d+ members?\)/), "not a line of siwa groups list: \(line)")
                current = String(group.output.1)
                groups[String(group.output.1)] = [:]
            }
        }
        return groups
    }

    @Test("docs/getting-started.md's local-mode session: swift run siwa serve prints the lines the page shows (with this test's ports), the emulator answers at the URL it names, and the URL it tells the person to open shows the Sign in with Apple button")
    func gettingStartedLocalMode() async throws {
        let session = DocSnippets.session(in: try Self.localModeSession.text())
        #expect(session.count == 1, "the session's commands changed, and this test runs one: \(session.map(\.command))")
        let shown = try #require(session.first)
        #expect(try DocSnippets.words(of: shown.command) == ["swift", "run", "siwa", "serve"], "\(shown.command)")
        try await Self.withSiwaServe(try Self.siwaArguments(try DocSnippets.words(of: shown.command))) { site, siwa in
            _ = try await Self.printedURL(siwa)
            let expected = try DocSnippets.substituting(shown.output.joined(separator: "\n"), [
                "http://127.0.0.1:9090": site.emulatorOrigin, "http://127.0.0.1:8080": site.origin,
            ]).split(separator: "\n").map(String.init)
            // What siwa says in its own voice (its log lines start with a time).
            let said = siwa.logText.split(separator: "\n").map(String.init).filter { $0.hasPrefix("siwa: ") }
            #expect(said == expected, "siwa serve printed:\n\(siwa.logText)")
            try await Visit.withClient { visit in
                let emulator = try #require(expected.first?.firstMatch(of: /emulated at (\S+)/).map { String($0.output.1) })
                #expect(try await visit.send(emulator + "/healthz").status == 200)
                let open = try #require(expected.last?.firstMatch(of: /open (\S+) in a browser/).map { String($0.output.1) })
                let page = try await visit.send(open, headers: [("Accept", "text/html")])
                #expect(page.status == 200 && page.text.contains(#"id="siwa-button""#), "\(page.status) \(page.text)")
            }
        }
    }

    @Test("docs/getting-started.md's Apple-mode block as written (a P-256 key made here for the .p8, a free port for 8080): the data key goes in .env, siwa starts in Apple mode and says so, and the sign-in sends a browser to Apple's authorize with the Services ID and the return URL, with a Secure __Host- cookie and no HSTS unasked (hsts_max_age is 0); an invalid team_id stops it with the page's message and exit code")
    func gettingStartedAppleMode() async throws {
        let page = try DocSnippets.text(of: Self.appleMode.page)
        let quoted = try #require(page.firstMatch(of: /`(siwa: invalid configuration: team_id: [^`]*?) …`/).map { String($0.output.1) }, "the page no longer quotes the team_id message")
        let exitCode = try #require(page.firstMatch(of: /\(exit code (\d+)\)/).flatMap { Int32($0.output.1) }, "the page no longer gives the exit code")

        try await LocalSite.startingAgain(tries: 5) { started in
            try await Self.withDirectory("apple-mode") { directory in
                let keyFile = directory.appendingPathComponent("AuthKey.p8")
                try ES256PrivateKey().pemRepresentation.write(to: keyFile, atomically: true, encoding: .utf8)
                let port = try await FreePorts.reserve(1)[0]
                let block = try DocSnippets.substituting(try Self.appleMode.text(), [
                    "/etc/siwa/AuthKey_ABC123DEFG.p8": keyFile.path, "--port 8080": "--port \(port)",
                ])
                let lines = DocSnippets.commandLines(in: block)
                // Required, not expected: the first is handed to sh, which must not be given another command.
                try #require(lines.count == 2 && lines[0].hasPrefix("echo \"SIWA_DATA_KEY="), "the block's commands changed, and this test runs these two: \(lines)")

                // The data key, made by sh as the reader's shell makes it, in the directory siwa then runs in.
                let made = try await ChildProcess.run(URL(fileURLWithPath: "/usr/bin/env"), arguments: ["-C", directory.path, "/bin/sh", "-c", lines[0]], environment: [:], timeLimit: .seconds(30))
                #expect(made.status == 0, "\(lines[0]): \(made.stderr)")
                let dotEnv = try String(contentsOf: directory.appendingPathComponent(".env"), encoding: .utf8)
                let dataKey = dotEnv.wholeMatch(of: /SIWA_DATA_KEY=(\S+)\n/).flatMap { Data(base64Encoded: String($0.output.1)) }
                #expect(dataKey?.count == 32, ".env is not one data key of 32 bytes: \(dotEnv.count) characters")

                let (environment, command) = DocSnippets.environmentAndCommand(try DocSnippets.words(of: lines[1]))
                #expect(Set(environment.keys) == ["SIWA_TEAM_ID", "SIWA_KEY_ID", "SIWA_KEY_FILE", "SIWA_SERVICES_ID", "SIWA_RETURN_URL"], "\(environment)")
                let arguments = try Self.siwaArguments(command)
                #expect(arguments.first == "serve", "\(command)")
                let (servicesID, returnURL) = (try #require(environment["SIWA_SERVICES_ID"]), try #require(environment["SIWA_RETURN_URL"]))
                let siwa = ["-C", directory.path, ChildProcess.siwaExecutable.path] + arguments
                let log = directory.appendingPathComponent("siwa.log")

                try await ChildProcess.withRunning(
                    URL(fileURLWithPath: "/usr/bin/env"), arguments: siwa, environment: environment, output: log,
                    ready: { (try? await HTTPProbe.status("http://127.0.0.1:\(port)/healthz")) == 200 }
                ) { _ in
                    started()
                    let said = "siwa: Apple mode — Services ID \(servicesID), return URL \(returnURL); listening on 127.0.0.1:\(port)."
                    let deadline = ContinuousClock.now + .seconds(10)
                    var printed = ""
                    while ContinuousClock.now < deadline, !printed.split(separator: "\n").contains(Substring(said)) {
                        try await Task.sleep(for: .milliseconds(50))
                        printed = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
                    }
                    #expect(printed.split(separator: "\n").contains(Substring(said)), "siwa serve did not say it is in Apple mode:\n\(printed)")

                    // No request to Apple is needed to start a sign-in: the browser is sent there.
                    try await Visit.withClient { visit in
                        let start = try await visit.send("http://127.0.0.1:\(port)/auth/apple", headers: [("Accept", "text/html")])
                        #expect(start.status == 302, "\(start.status) \(start.text)\n\(printed)")
                        let authorize = try #require(start.location.flatMap(URLComponents.init(string:)), "\(start.headers)")
                        #expect(authorize.scheme == "https" && authorize.host == "appleid.apple.com" && authorize.path == "/auth/authorize", "\(start.location ?? "")")
                        let query = Dictionary(authorize.queryItems?.map { ($0.name, $0.value ?? "") } ?? [], uniquingKeysWith: { first, _ in first })
                        #expect(query["client_id"] == servicesID && query["redirect_uri"] == returnURL, "\(query)")
                        // "In Apple mode cookies are `Secure` with the `__Host-` prefix; responses carry HSTS once `hsts_max_age` says
                        // for how long" (the block sets none).
                        let cookies = start.headers["set-cookie"]
                        #expect(!cookies.isEmpty && cookies.allSatisfy { $0.hasPrefix("__Host-") && $0.contains("; Secure") }, "\(cookies)")
                        #expect(start.headers.first(name: "strict-transport-security") == nil, "\(start.headers)")
                    }
                }

                // The page's failure: an invalid team_id, the rest as written.
                var invalid = environment
                invalid["SIWA_TEAM_ID"] = "A1B2C3D4E"
                let refused = try await ChildProcess.run(URL(fileURLWithPath: "/usr/bin/env"), arguments: siwa, environment: invalid, timeLimit: .seconds(30))
                #expect(refused.status == exitCode, "siwa serve with team_id A1B2C3D4E exited \(refused.status): \(refused.stderr)")
                #expect(refused.stderr.hasPrefix(quoted), "\(refused.stderr)")
            }
        }
    }
}
