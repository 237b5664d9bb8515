import AppleIDEmulator
import Foundation
import NIOCore
import Testing
import TestSupport

/// Issue 36 in a real browser: Chromium, trusting pebble's CA, signs in over siwa's own HTTPS and HTTP/2.
extension BrowserSignInTests {
    /// The base64 SHA-256 of the public key of the PEM certificate at `path`: what Chromium's
    /// `--ignore-certificate-errors-spki-list` names, so that it trusts a chain holding that key (pebble's CA).
    static func spkiHash(_ path: String) async throws -> String {
        let outcome = try await ChildProcess.run(
            URL(fileURLWithPath: "/bin/sh"),
            arguments: ["-c", "openssl x509 -in \"$0\" -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64", path],
            environment: [:]
        )
        let hash = outcome.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        try #require(outcome.status == 0 && hash.count == 44, "\(outcome.stderr)")
        return hash
    }

    @Test("siwa alone at the edge in Chromium trusting pebble's CA: the sign-in page over HTTPS and HTTP/2, the emulator's consent, Apple's form_post back to the HTTPS return URL, the session page with a __Host- cookie; every navigation over h2")
    func signInOverHTTPSAndHTTP2() async throws {
        let e2e = try EndToEnd.current()
        let ports = try await FreePorts.reserve(2)
        let (http, https) = (ports[0], ports[1])
        try await withPebble(httpPort: http, tlsPort: https) { pebble in
            try await LocalSite.run(settings: [
                "port": String(http), "https_port": String(https), "tls_domains": "auth.localhost", "acme_directory": pebble.directoryURL, "acme_ca_file": pebble.caFile,
            ]) { site in
                let root = try await pebble.rootFile()
                try await EdgeTests.waitForCertificate(site, root: root, pebble: pebble)
                // The chain siwa serves holds pebble's intermediate: its key is the one Chromium is told to trust.
                let intermediate = try await ChildProcess.run(
                    URL(fileURLWithPath: "/usr/bin/curl"), arguments: ["-sS", "--cacert", pebble.caFile, "https://127.0.0.1:\(pebble.managementPort)/intermediates/0"], environment: [:]
                )
                let intermediateFile = pebble.directory.appendingPathComponent("intermediate.pem").path
                try intermediate.stdout.write(toFile: intermediateFile, atomically: true, encoding: .utf8)
                let trusted = "--ignore-certificate-errors-spki-list=" + (try await Self.spkiHash(intermediateFile))
                try await e2e.sessions.with(language: "en-US", extra: [trusted]) { browser in
                    #expect(site.origin == "https://auth.localhost:\(https)")
                    try await browser.open(site.url("/"))
                    #expect(try await browser.execute("return performance.getEntriesByType('navigation')[0].nextHopProtocol").string == "h2")
                    try await browser.element("#siwa-button").click()
                    try await browser.waitForPage(site.emulatorOrigin + "/auth/authorize")
                    let ada = site.user("Ada")
                    try await browser.element("input[name=emulator_user][value=\"\(ada.sub)\"]").click()
                    try await browser.element("#continue").click()
                    try await browser.waitForPage(site.url("/session"))
                    #expect(try await browser.execute("return performance.getEntriesByType('navigation')[0].nextHopProtocol").string == "h2")
                    #expect(try await browser.element("#email").text() == ada.email)
                    #expect(try await browser.element("#sub").text() == ada.sub)
                    // siwa's own HTTPS makes the cookies Secure with the __Host- prefix, without a setting.
                    let cookies = try await browser.cookieAttributes()
                    let session = cookies.first { $0.name == "__Host-siwa_session" }
                    #expect(session?.secure == true && session?.httpOnly == true, "\(cookies)")
                }
            }
        }
    }

    @Test("a WebSocket from Chromium over siwa's HTTP/2 (RFC 8441): signed in through the gate, the upstream's page opens wss:// on the same HTTP/2 connection; the upstream's handshake carries the person; messages go both ways; Chromium opened no HTTP/1.1 connection")
    func webSocketOverHTTP2InChromium() async throws {
        let e2e = try EndToEnd.current()
        try await TestCertificate.withSelfSigned { cert, key in
            let https = try await FreePorts.reserve(1)[0]
            try await withWebSocketEchoUpstream { port, tally in
                let settings: [String: String?] = ["tls_cert_file": cert, "tls_key_file": key, "tls_domains": "auth.localhost", "https_port": String(https)]
                try await UpstreamProxyTests.withSite(upstream: "http://127.0.0.1:\(port)", settings) { site, _ in
                    let trusted = "--ignore-certificate-errors-spki-list=" + (try await Self.spkiHash(cert))
                    try await e2e.sessions.with(language: "en-US", extra: [trusted]) { browser in
                        let page = site.url("/app/start")
                        #expect(page.hasPrefix("https://auth.localhost:\(https)/"))
                        try await browser.open(page)
                        try await browser.waitForPage(site.emulatorOrigin + "/auth/authorize")
                        let ada = site.user("Ada")
                        try await browser.element("input[name=emulator_user][value=\"\(ada.sub)\"]").click()
                        try await browser.element("#continue").click()
                        try await browser.waitForPage(page)
                        #expect(try await browser.execute("return performance.getEntriesByType('navigation')[0].nextHopProtocol").string == "h2")
                        try await browser.execute(
                            """
                            window.got = [];
                            const ws = new WebSocket('wss://' + location.host + '/ws/chat?from=chromium');
                            ws.onmessage = (event) => { window.got.push(event.data); if (window.got.length === 1) ws.send('hello over h2'); };
                            ws.onclose = (event) => { window.closedWith = event.code; };
                            window.ws = ws;
                            """
                        )
                        try await browser.waitUntil("the handshake's message and the echo") {
                            (try await browser.execute("return window.got.length >= 2").bool) ?? false
                        }
                        let got = try await browser.execute("return window.got").array?.compactMap(\.string) ?? []
                        let handshake = try EchoedRequest(json: ByteBuffer(string: got.first ?? ""))
                        #expect(handshake.path == "/ws/chat?from=chromium")
                        #expect(handshake.values("x-auth-request-user") == [ada.sub])
                        #expect(got.dropFirst().first == "hello over h2")
                        try await browser.execute("window.ws.send('close:4002')")
                        try await browser.waitUntil("the upstream's close") { (try await browser.execute("return window.closedWith === 4002").bool) ?? false }
                        #expect(tally.requests >= 1)
                    }
                    // Every connection Chromium made was HTTP/2: the WebSocket went on one of them.
                    let metrics = try await ChildProcess.run(
                        URL(fileURLWithPath: "/usr/bin/curl"),
                        arguments: ["-sS", "--http2", "--cacert", cert, "--connect-to", "auth.localhost:\(https):127.0.0.1:\(https)", "https://auth.localhost:\(https)/metrics"],
                        environment: [:]
                    )
                    let lines = metrics.stdout.split(separator: "\n").filter { $0.hasPrefix("siwa_tls_connections_total") }
                    // Chromium's connection and curl's own.
                    let h2 = lines.first { $0.contains("protocol=\"h2\"") }.flatMap { $0.split(separator: " ").last }.flatMap { Double($0) } ?? 0
                    #expect(h2 >= 2, "\(lines)")
                    #expect(!lines.contains { $0.contains("protocol=\"http/1.1\"") && !$0.hasSuffix(" 0") }, "an HTTP/1.1 connection was opened: \(lines)")
                }
            }
        }
    }
}
