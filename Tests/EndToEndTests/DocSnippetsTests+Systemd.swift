import AppleIDEmulator
import Foundation
import SignInServer
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The systemd unit docs/operations.md points to (`deploy/siwa.service`), run as systemd would run it here, where
/// systemd does not manage the machine: `systemd-analyze verify` reads it, then its `ExecStartPre` and `ExecStart`
/// run with the environment, working directory, state directory and credential the unit gives them (paths moved
/// into the test's directory), as an unprivileged user when the tests run as root (the unit's `DynamicUser`).
extension DocSnippetsTests {
    /// The unit's assignments, section by section, as systemd reads the ones the test uses: one `KEY=VALUE` per line,
    /// `#` and `;` lines ignored, a key given twice kept twice.
    struct SystemdUnit {
        var entries: [(section: String, key: String, value: String)] = []

        init(_ text: String) {
            var section = ""
            for line in text.split(separator: "\n").map({ $0.trimmingCharacters(in: .whitespaces) }) where !line.isEmpty && !line.hasPrefix("#") && !line.hasPrefix(";") {
                if line.hasPrefix("["), line.hasSuffix("]") {
                    section = String(line.dropFirst().dropLast())
                } else if let equals = line.firstIndex(of: "=") {
                    entries.append((section, String(line[..<equals]), String(line[line.index(after: equals)...])))
                }
            }
        }

        /// Every value of `key` in `[Service]`, in order.
        func service(_ key: String) -> [String] {
            entries.filter { $0.section == "Service" && $0.key == key }.map(\.value)
        }
    }

    /// A unit's command line (`ExecStart=`): its words (the unit's are plain words, no quotes).
    static func commandLine(_ value: String) throws -> [String] {
        let words = value.split(separator: " ").map(String.init)
        try #require(words.first?.hasPrefix("/") == true, "a command line systemd would take with a prefix or a relative path: \(value)")
        return words
    }

    @Test("deploy/siwa.service (docs/operations.md): systemd-analyze verify finds nothing to say; siwa doctor (ExecStartPre) passes and siwa serve (ExecStart) answers /readyz in Apple mode against the emulator, with the unit's environment, working directory, state directory and credential, as an unprivileged user")
    func systemdUnit() async throws {
        let operations = try DocSnippets.text(of: "docs/operations.md")
        #expect(operations.contains("`deploy/siwa.service` is a hardened systemd unit"))
        let written = try DocSnippets.text(of: "deploy/siwa.service")

        let root = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-unit-\(UUID().uuidString)", isDirectory: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let share = root.appendingPathComponent("usr/share/siwa", isDirectory: true)
        let state = root.appendingPathComponent("var/lib/siwa", isDirectory: true)
        let etc = root.appendingPathComponent("etc/siwa", isDirectory: true)
        let credentials = root.appendingPathComponent("run/credentials/siwa.service", isDirectory: true)
        for directory in [share, state, etc, credentials] {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        }
        // What the operations page says to do: copy Templates/ and Public/ to /usr/share/siwa (a link to them is read
        // where it leads too, LinkedResourcesTests).
        for name in ["Templates", "Public"] {
            try FileManager.default.copyItem(at: DocSnippets.packageDirectory.appendingPathComponent(name), to: share.appendingPathComponent(name))
        }
        // The key and siwa.env are root's alone, as the unit's comment and the page say.
        try EmulatorConfiguration.testPrivateKeyPEM.write(to: etc.appendingPathComponent("AuthKey.p8"), atomically: true, encoding: .utf8)
        #expect(chmod(etc.appendingPathComponent("AuthKey.p8").path, 0o600) == 0)

        let unitText = try DocSnippets.substituting(written, [
            "/usr/local/bin/siwa": ChildProcess.siwaExecutable.path,
            "/usr/share/siwa": share.path,
            "/var/lib/siwa": state.path,
            "/etc/siwa": etc.path,
        ])
        let unitFile = root.appendingPathComponent("siwa.service")
        try unitText.write(to: unitFile, atomically: true, encoding: .utf8)
        // As a package installs it, whatever the umask of the moment (another test of the same process sets it to 0
        // for a while, and systemd-analyze warns of a world-writable unit).
        #expect(chmod(unitFile.path, 0o644) == 0)
        let analyze = URL(fileURLWithPath: "/usr/bin/systemd-analyze")
        if FileManager.default.isExecutableFile(atPath: analyze.path) {
            let verified = try await ChildProcess.run(analyze, arguments: ["verify", "--man=no", unitFile.path], environment: [:], timeLimit: .seconds(30))
            #expect(verified.status == 0, "\(verified.stderr)")
            // An unknown or misspelt key is only a warning: none may be printed.
            #expect(verified.stderr.split(separator: "\n").filter { $0.contains(unitFile.lastPathComponent) }.isEmpty, "\(verified.stderr)")
        }

        let unit = SystemdUnit(unitText)
        #expect(unit.service("DynamicUser") == ["yes"])
        #expect(unit.service("StateDirectory") == ["siwa"], "the state directory is the one SIWA_DB names")
        let workingDirectory = try #require(unit.service("WorkingDirectory").first)
        // LoadCredential=NAME:PATH puts a copy of PATH at $CREDENTIALS_DIRECTORY/NAME, readable by the service's user.
        for credential in unit.service("LoadCredential") {
            let parts = credential.split(separator: ":", maxSplits: 1).map(String.init)
            try #require(parts.count == 2)
            try FileManager.default.copyItem(atPath: parts[1], toPath: credentials.appendingPathComponent(parts[0]).path)
        }

        try await ChildProcess.withSiwaEmulator { emulator in
            try await withFreePort { siwaPort in
                // /etc/siwa/siwa.env as an operator writes it for Apple mode (here Apple is the emulator).
                let environmentFile = """
                    SIWA_TEAM_ID=\(EmulatorConfiguration.testTeamID)
                    SIWA_KEY_ID=\(EmulatorConfiguration.testKeyID)
                    SIWA_SERVICES_ID=\(EmulatorConfiguration.testServicesID)
                    SIWA_RETURN_URL=https://auth.example.com/auth/apple/callback
                    SIWA_DATA_KEY=\(TokenCipher.generateKey())
                    SIWA_APPLE_BASE_URL=\(emulator)
                    SIWA_PORT=\(siwaPort)

                    """
                try environmentFile.write(to: etc.appendingPathComponent("siwa.env"), atomically: true, encoding: .utf8)
            #expect(chmod(etc.appendingPathComponent("siwa.env").path, 0o600) == 0)
                // Environment= first; EnvironmentFile= overrides it (systemd.exec); %d is the credentials directory.
                var environment: [String: String] = [:]
                for assignment in unit.service("Environment") {
                    let parts = assignment.replacingOccurrences(of: "%d", with: credentials.path).split(separator: "=", maxSplits: 1).map(String.init)
                    environment[parts[0]] = parts.count == 2 ? parts[1] : ""
                }
                for file in unit.service("EnvironmentFile") {
                    for line in try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n") where !line.hasPrefix("#") {
                        let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
                        if parts.count == 2 { environment[parts[0]] = parts[1] }
                    }
                }
                #expect(environment["SIWA_KEY_FILE"] == credentials.appendingPathComponent("apple-key.p8").path, "the key comes from the credential")

                // As root, the unit's DynamicUser: nobody, owning the state directory and the credential only.
                var asServiceUser: [String] = []
                if geteuid() == 0 {
                    asServiceUser = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
                    for path in [state.path, credentials.path] + ((try? FileManager.default.contentsOfDirectory(atPath: credentials.path)) ?? []).map({ credentials.appendingPathComponent($0).path }) {
                        #expect(chown(path, 65534, 65534) == 0)
                    }
                    #expect(chmod(root.path, 0o755) == 0)
                }
                func launch(_ line: String) throws -> (URL, [String]) {
                    let words = asServiceUser + ["/usr/bin/env", "-C", workingDirectory] + (try Self.commandLine(line))
                    return (URL(fileURLWithPath: words[0]), Array(words.dropFirst()))
                }

                for line in unit.service("ExecStartPre") {
                    let (executable, arguments) = try launch(line)
                    let checked = try await ChildProcess.run(executable, arguments: arguments, environment: environment, timeLimit: .seconds(60))
                    #expect(checked.status == 0, "\(line):\n\(checked.stdout)\(checked.stderr)")
                }
                let start = try #require(unit.service("ExecStart").first)
                let (executable, arguments) = try launch(start)
                let log = root.appendingPathComponent("siwa.log")
                try await ChildProcess.withRunning(
                    executable, arguments: arguments, environment: environment, output: log,
                    diagnostics: { (try? String(contentsOf: log, encoding: .utf8)) ?? "" },
                    ready: { (try? await HTTPProbe.status("http://127.0.0.1:\(siwaPort)/readyz")) == 200 }
                ) { _ in
                    let origin = "http://127.0.0.1:\(siwaPort)"
                    let (ready, stylesheet, signIn) = (try await HTTPProbe.status(origin + "/readyz"), try await HTTPProbe.status(origin + "/siwa.css"), try await HTTPProbe.status(origin + "/"))
                    #expect(ready == 200)
                    // The pages come from the working directory's Templates/ and Public/.
                    #expect(stylesheet == 200)
                    #expect(signIn == 200)
                    #expect(FileManager.default.fileExists(atPath: state.appendingPathComponent("siwa.sqlite").path), "the store is in the state directory")
                }
            }
        }
    }

    /// A free loopback port for `body` (siwa's); when it was taken meanwhile, a new one (three tries).
    private func withFreePort(_ body: (Int) async throws -> Void) async throws {
        for attempt in 1...3 {
            let port = try await FreePorts.reserve(1)[0]
            do {
                return try await body(port)
            } catch where attempt < 3 && LocalSite.isAddressInUse(error) {
                continue
            }
        }
    }
}
