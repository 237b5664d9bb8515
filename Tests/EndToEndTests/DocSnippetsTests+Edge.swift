import Foundation
import Testing
import TestSupport

/// docs/edge.md's commands, run with the built siwa: the one command against Debian's pebble (standing in for Let's
/// Encrypt), and the operator's own certificate files.
extension DocSnippetsTests {
    /// Run by `edgeOneCommand`.
    static let edgeOneCommand = Shown(page: "docs/edge.md", language: "sh", after: "## One command")
    /// Run by `edgeOwnCertificate`.
    static let edgeOwnCertificate = Shown(page: "docs/edge.md", language: "sh", after: "## Your own certificate")

    /// `block`'s one `siwa serve`, its domain and app made this test's, and the ports, store and ACME server added.
    static func edgeServe(_ shown: Shown, _ substitutions: KeyValuePairs<String, String>, extra: [String]) throws -> [String] {
        let block = try DocSnippets.substituting(try shown.text(), substitutions)
        let commands = try DocSnippets.commands(in: block).map(Self.siwaArguments)
        try #require(commands.count == 1 && commands.first?.first == "serve", "the block's commands changed, and this test runs one siwa serve: \(commands)")
        return (commands.first ?? []) + extra
    }

    /// Runs `arguments` with the built siwa until `https://auth.localhost:<https>/healthz` answers through `root`.
    static func withEdgeProcess(
        _ arguments: [String], https: Int, root: String, _ body: (SiwaProcess) async throws -> Void
    ) async throws {
        try await Self.withDirectory("edge") { directory in
            let log = directory.appendingPathComponent("siwa.log")
            let emulator = try await FreePorts.reserve(1)[0]
            try await ChildProcess.withRunning(
                ChildProcess.siwaExecutable, arguments: arguments + ["--emulator-port", String(emulator), "--db", directory.appendingPathComponent("siwa.sqlite").path],
                environment: [:], output: log, startupTimeLimit: .seconds(60),
                ready: { (try? await Curl.fetch("https://auth.localhost:\(https)/healthz", caFile: root).status) == 200 }
            ) { pid in
                try await body(SiwaProcess(pid: pid, log: log))
            }
        }
    }

    @Test("docs/edge.md's one command, with pebble for Let's Encrypt: the certificate obtained and trusted through pebble's root, a browser sent to the sign-in over HTTP/2 and an API client told 401 (the app behind never asked), the plain port redirecting to HTTPS and answering /healthz")
    func edgeOneCommand() async throws {
        try await withEchoUpstream { app in
            let ports = try await FreePorts.reserve(2)
            let (http, https) = (ports[0], ports[1])
            try await withPebble(httpPort: http, tlsPort: https) { pebble in
                let arguments = try Self.edgeServe(
                    Self.edgeOneCommand, ["auth.example.com": "auth.localhost", "http://127.0.0.1:3000": "http://127.0.0.1:\(app)"],
                    extra: ["--acme-directory", pebble.directoryURL, "--acme-ca-file", pebble.caFile, "--https-port", String(https), "--port", String(http)]
                )
                // pebble's root changes at each start, and siwa's certificate is issued under it: read it once pebble runs.
                let root = try await pebble.rootFile()
                try await Self.withEdgeProcess(arguments, https: https, root: root) { siwa in
                    let page = "https://auth.localhost:\(https)/reports?year=2026"
                    let anonymous = try await Curl.fetch(page, http2: true, caFile: root, headers: ["Accept: text/html"])
                    #expect(anonymous.version == "2")
                    #expect(anonymous.status == 302, "\(anonymous)\n\(siwa.logText)")
                    #expect(anonymous.header("location")?.hasPrefix("https://auth.localhost:\(https)/auth/apple?") == true, "\(anonymous)")
                    let api = try await Curl.fetch("https://auth.localhost:\(https)/api/x", http2: true, caFile: root, headers: ["Accept: application/json"])
                    #expect(api.status == 401)
                    let plain = try await Curl.fetch("http://127.0.0.1:\(http)/reports?year=2026", http2: false, headers: ["Host: auth.localhost"])
                    #expect(plain.status == 301)
                    #expect(plain.header("location") == page)
                    #expect(try await Curl.fetch("http://127.0.0.1:\(http)/healthz", http2: false).status == 200)
                }
            }
        }
    }

    @Test("docs/edge.md's own-certificate command: the operator's files served over HTTP/2 and HTTP/1.1, the plain port redirecting; a SIGHUP with the files unchanged keeps the TLS sessions taken before it resuming (TLS 1.2 and 1.3)")
    func edgeOwnCertificate() async throws {
        try await withEchoUpstream { app in
            try await TestCertificate.withSelfSigned { cert, key in
                let ports = try await FreePorts.reserve(2)
                let arguments = try Self.edgeServe(
                    Self.edgeOwnCertificate,
                    ["auth.example.com": "auth.localhost", "http://127.0.0.1:3000": "http://127.0.0.1:\(app)", "/etc/siwa/fullchain.pem": cert, "/etc/siwa/privkey.pem": key],
                    extra: ["--https-port", String(ports[1]), "--port", String(ports[0])]
                )
                try await Self.withEdgeProcess(arguments, https: ports[1], root: cert) { siwa in
                    for http2 in [true, false] {
                        let health = try await Curl.fetch("https://auth.localhost:\(ports[1])/healthz", http2: http2, caFile: cert)
                        #expect(health.status == 200 && health.version == (http2 ? "2" : "1.1"), "\(health)\n\(siwa.logText)")
                    }
                    let plain = try await Curl.fetch("http://127.0.0.1:\(ports[0])/", http2: false)
                    #expect(plain.header("location") == "https://auth.localhost:\(ports[1])/")
                    // SIGHUP with the files unchanged: the pair in service stays, and sessions taken before resume.
                    let resumed = try await EdgeTests.resumptions(port: ports[1], root: cert, signalling: (siwa.pid, siwa.log, "TLS certificate"))
                    #expect(siwa.logText.contains("TLS certificate files unchanged"), "\(siwa.logText)")
                    #expect(resumed.contains("TLSv1_2 reused") && resumed.contains("TLSv1_3 reused"), "\(resumed)\n\(siwa.logText)")
                }
            }
        }
    }
}
