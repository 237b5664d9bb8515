import AppleIDEmulator
import Foundation
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
}
