import AsyncHTTPClient
import Crypto
import Foundation
import JOSE
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
@testable import SignInServer
import Testing
#if canImport(Glibc)
import Glibc
#endif
import TestSupport

/// siwa alone at the edge (issue 36): certificates from Debian's pebble by TLS-ALPN-01 and HTTP-01 against siwa's own
/// listeners, HTTPS as a careful server does it, the redirect port, HTTP/2 and HTTP/1.1 answering alike, renewal, two
/// instances ordering once, and the operator's own files. Every HTTPS request is made by curl, which resolves names
/// under `.localhost` to loopback as browsers do.
@Suite("siwa alone at the edge: ACME from pebble, HTTPS, HTTP/2")
struct EdgeTests {
    /// A site on its own HTTPS, certificates from a pebble started for it; `body` gets the site, pebble, the file of
    /// pebble's root (what clients trust) and the HTTPS port.
    static func withEdgeSite(
        domains: String = "auth.localhost", challenges: String? = nil, validitySeconds: Int? = nil, settings: [String: String?] = [:],
        database: String? = nil, _ body: (LocalSite, Pebble, _ root: String, _ httpsPort: Int) async throws -> Void
    ) async throws {
        let ports = try await FreePorts.reserve(2)
        let (http, https) = (ports[0], ports[1])
        try await withPebble(httpPort: http, tlsPort: https, validitySeconds: validitySeconds) { pebble in
            var all: [String: String?] = [
                "port": String(http), "https_port": String(https), "tls_domains": domains, "acme_directory": pebble.directoryURL, "acme_ca_file": pebble.caFile,
            ]
            if let challenges { all["acme_challenges"] = challenges }
            if let database { all["db"] = database }
            all.merge(settings) { $1 }
            try await LocalSite.run(settings: all) { site in
                let root = try await pebble.rootFile()
                try await Self.waitForCertificate(site, root: root, pebble: pebble)
                try await body(site, pebble, root, https)
            }
        }
    }

    /// Until the site answers over HTTPS trusted through pebble's root (the first order), for at most 60 s.
    static func waitForCertificate(_ site: LocalSite, root: String, pebble: Pebble) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while true {
            if let answer = try? await Curl.fetch(site.url("/healthz"), caFile: root), answer.status == 200 { return }
            guard ContinuousClock.now < deadline else {
                throw EndToEndError("no certificate within 60 s; pebble's log:\n\(pebble.logText.suffix(3000))")
            }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    /// The `siwa_acme_orders_total` line for `challenge` and `outcome`, read over HTTPS.
    static func orders(_ site: LocalSite, root: String, challenge: String, outcome: String, insecure: Bool = false) async throws -> Int {
        let metrics = try await Curl.fetch(site.url("/metrics"), caFile: root, extra: insecure ? ["--insecure"] : []).body
        let prefix = "siwa_acme_orders_total{outcome=\"\(outcome)\",challenge=\"\(challenge)\"}"
        return metrics.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0
    }

    /// Whether a connection with an earlier connection's session is resumed, in TLS 1.2 and then 1.3 (Python's ssl):
    /// a line `TLSv1_2 reused` (or `new`) for each. With `signalling`, the sessions are taken first, SIGHUP is sent to
    /// that process, and they are offered once its log has a line with `reloaded` in it.
    static func resumptions(port: Int, root: String, signalling: (pid: pid_t, log: URL, reloaded: String)? = nil) async throws -> String {
        let script = """
            import os, signal, socket, ssl, sys, time
            port, root = int(sys.argv[1]), sys.argv[2]
            def visit(context, session):
                with socket.create_connection(("127.0.0.1", port)) as raw:
                    with context.wrap_socket(raw, server_hostname="auth.localhost", session=session) as tls:
                        tls.sendall(b"GET /healthz HTTP/1.1\\r\\nHost: auth.localhost\\r\\nConnection: close\\r\\n\\r\\n")
                        while tls.recv(4096): pass
                        return tls.session, tls.session_reused
            taken = []
            for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
                context = ssl.create_default_context(cafile=root)
                context.minimum_version = context.maximum_version = version
                session, _ = visit(context, None)
                taken.append((version, context, session))
            if len(sys.argv) > 3:
                os.kill(int(sys.argv[3]), signal.SIGHUP)
                deadline = time.time() + 60
                while sys.argv[5] not in open(sys.argv[4]).read() and time.time() < deadline: time.sleep(0.05)
            for version, context, session in taken:
                print(version.name, "reused" if visit(context, session)[1] else "new")
            """
        var arguments = ["python3", "-c", script, String(port), root]
        if let signalling { arguments += [String(signalling.pid), signalling.log.path, signalling.reloaded] }
        let run = try await ChildProcess.run(URL(fileURLWithPath: "/usr/bin/env"), arguments: arguments, environment: [:])
        return run.stdout + run.stderr
    }

    /// The serial number of the certificate a hello naming `name` (nil: no SNI) gets, from `openssl s_client`.
    static func servedSerial(port: Int, name: String?) async throws -> String {
        var arguments = ["s_client", "-connect", "127.0.0.1:\(port)"]
        if let name { arguments += ["-servername", name] } else { arguments += ["-noservername"] }
        let shown = try await ChildProcess.run(URL(fileURLWithPath: "/usr/bin/openssl"), arguments: arguments, environment: [:], timeLimit: .seconds(30))
        let pem = shown.stdout.components(separatedBy: "-----BEGIN CERTIFICATE-----").dropFirst().first.map { "-----BEGIN CERTIFICATE-----" + $0 } ?? ""
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("served-\(UUID().uuidString).pem")
        defer { try? FileManager.default.removeItem(at: file) }
        try pem.write(to: file, atomically: true, encoding: .utf8)
        let serial = try await ChildProcess.run(
            URL(fileURLWithPath: "/usr/bin/openssl"), arguments: ["x509", "-noout", "-serial", "-subject", "-ext", "subjectAltName", "-in", file.path], environment: [:]
        )
        guard serial.status == 0 else { throw EndToEndError("no certificate in s_client's output: \(shown.stdout.prefix(500)) \(shown.stderr.prefix(500))") }
        return serial.stdout
    }

    @Test("a certificate from pebble by each challenge alone: TLS-ALPN-01 on the HTTPS port, HTTP-01 on the redirect port; HTTPS then trusted through pebble's root, and the metric names the challenge")
    func eachChallenge() async throws {
        for challenge in ["tls-alpn-01", "http-01"] {
            try await Self.withEdgeSite(challenges: challenge) { site, _, root, _ in
                let health = try await Curl.fetch(site.url("/healthz"), caFile: root)
                #expect(health.status == 200 && health.body.hasPrefix("ok"), "\(challenge): \(health)")
                #expect(try await Self.orders(site, root: root, challenge: challenge, outcome: "issued") == 1, "\(challenge)")
                let expiry = try await Curl.fetch(site.url("/metrics"), caFile: root).body
                #expect(expiry.contains("siwa_tls_certificate_expiry_seconds{domain=\"auth.localhost\"}"), "\(challenge)")
            }
        }
    }

    @Test("tls-alpn-01 first: with both allowed, the first order is validated on the HTTPS port; two domains in one certificate, each hello named gets it, a hello without SNI gets the first's, any other name an unrecognized_name alert")
    func namesAndAlerts() async throws {
        try await Self.withEdgeSite(domains: "auth.localhost,www.localhost") { site, _, root, https in
            #expect(try await Self.orders(site, root: root, challenge: "tls-alpn-01", outcome: "issued") == 1)
            let www = try await Curl.fetch("https://www.localhost:\(https)/healthz", caFile: root)
            #expect(www.status == 200)
            let named = try await Self.servedSerial(port: https, name: "www.localhost")
            let unnamed = try await Self.servedSerial(port: https, name: nil)
            #expect(named.contains("DNS:auth.localhost") && named.contains("DNS:www.localhost"), "\(named)")
            #expect(unnamed == named)
            // Another name: an alert, never the certificate of these.
            let other = try await ChildProcess.run(
                URL(fileURLWithPath: "/usr/bin/openssl"), arguments: ["s_client", "-connect", "127.0.0.1:\(https)", "-servername", "other.localhost"], environment: [:]
            )
            #expect(other.stderr.contains("unrecognized name") || other.stderr.contains("alert number 112"), "\(other.stderr)")
            #expect(!other.stdout.contains("BEGIN CERTIFICATE"))
            do {
                _ = try await Curl.fetch("https://other.localhost:\(https)/", caFile: root)
                Issue.record("a hello for other.localhost was answered")
            } catch let failure as Curl.Failure {
                #expect(failure.exitCode == 35, "\(failure)")
            }
        }
    }

    @Test("HTTPS as a careful server does it: TLS 1.2 and 1.3 only, ECDHE AEAD suites only, sessions resumed; plain HTTP on the HTTPS port told to use https; Secure __Host- cookies; HSTS only when hsts_max_age says")
    func carefulServer() async throws {
        try await Self.withEdgeSite(settings: ["hsts_max_age": "31536000"]) { site, _, root, https in
            let url = site.url("/healthz")
            for refused in [["--tlsv1.1", "--tls-max", "1.1"], ["--tlsv1.2", "--tls-max", "1.2", "--ciphers", "ECDHE-ECDSA-AES128-SHA"], ["--tlsv1.2", "--tls-max", "1.2", "--ciphers", "AES128-GCM-SHA256"]] {
                do {
                    _ = try await Curl.fetch(url, caFile: root, extra: refused)
                    Issue.record("curl \(refused) was answered")
                } catch let failure as Curl.Failure {
                    #expect([35, 59].contains(failure.exitCode), "\(refused): \(failure)")
                }
            }
            for accepted in [["--tlsv1.2", "--tls-max", "1.2", "--ciphers", "ECDHE-ECDSA-AES128-GCM-SHA256"], ["--tlsv1.2", "--tls-max", "1.2", "--ciphers", "ECDHE-ECDSA-CHACHA20-POLY1305"], ["--tlsv1.3"]] {
                #expect(try await Curl.fetch(url, caFile: root, extra: accepted).status == 200, "\(accepted)")
            }
            // Every TLS 1.2 suite this openssl knows, one at a time: accepted exactly when it is ECDHE (with the
            // certificate's ECDSA) with AES-GCM or ChaCha20-Poly1305 (not ARIA-GCM, not CCM, not CBC).
            let listed = try await ChildProcess.run(URL(fileURLWithPath: "/usr/bin/openssl"), arguments: ["ciphers", "-s", "-tls1_2", "ALL:COMPLEMENTOFALL"], environment: [:])
            let suites = listed.stdout.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ":").map(String.init).filter { !$0.hasPrefix("TLS_") }
            #expect(suites.count > 20, "\(listed.stdout)")
            for suite in suites {
                let expected = suite.hasPrefix("ECDHE-ECDSA-") && ((suite.contains("-AES") && suite.contains("-GCM-")) || suite.contains("CHACHA20-POLY1305"))
                let answered = (try? await Curl.fetch(url, caFile: root, extra: ["--tlsv1.2", "--tls-max", "1.2", "--ciphers", suite]))?.status == 200
                #expect(answered == expected, "\(suite): \(answered ? "accepted" : "refused")")
            }
            // Resumption: a second connection with the first's session is resumed, in TLS 1.2 and 1.3 (Python's ssl).
            let resumed = try await Self.resumptions(port: https, root: root)
            #expect(resumed.contains("TLSv1_2 reused") && resumed.contains("TLSv1_3 reused"), "\(resumed)")
            // Plain HTTP to the HTTPS port.
            let plain = try await ChildProcess.run(URL(fileURLWithPath: "/usr/bin/curl"), arguments: ["-sS", "http://127.0.0.1:\(https)/"], environment: [:])
            #expect(plain.stdout.contains("use https://"), "\(plain)")
            let start = try await Curl.fetch(site.url("/auth/apple"), caFile: root)
            #expect(start.status == 302)
            let binding = start.headers("set-cookie").first { $0.hasPrefix("__Host-siwa_binding=") }
            #expect(binding?.contains("Secure") == true && binding?.contains("SameSite=None") == true, "\(start.headers("set-cookie"))")
            #expect(start.header("strict-transport-security") == "max-age=31536000")
        }
    }

    @Test("the plain port: 301 to the same path and query on HTTPS for GET and HEAD, 308 for a POST (its method kept), the first domain for a Host siwa does not serve; /healthz and /readyz answered there; an unknown ACME token 404")
    func redirectPort() async throws {
        try await Self.withEdgeSite(domains: "auth.localhost,www.localhost") { site, _, _, https in
            let plain = "http://127.0.0.1:\(site.port)"
            let get = try await Curl.fetch(plain + "/some/path?x=1&y=%2F", http2: false, headers: ["Host: www.localhost"])
            #expect(get.status == 301)
            #expect(get.header("location") == "https://www.localhost:\(https)/some/path?x=1&y=%2F")
            let post = try await Curl.fetch(plain + "/auth/signout", http2: false, method: "POST", headers: ["Host: auth.localhost:\(site.port)"], body: "a=b")
            #expect(post.status == 308)
            #expect(post.header("location") == "https://auth.localhost:\(https)/auth/signout")
            let made = try await Curl.fetch(plain + "/", http2: false, headers: ["Host: evil.example"])
            #expect(made.header("location") == "https://auth.localhost:\(https)/")
            #expect(try await Curl.fetch(plain + "/healthz", http2: false).status == 200)
            #expect(try await Curl.fetch(plain + "/readyz", http2: false).status == 200)
            #expect(try await Curl.fetch(plain + "/.well-known/acme-challenge/unknown", http2: false).status == 404)
        }
    }

    /// Long random values (state, nonce, CSRF tokens, ids) and dates replaced, so two answers to one URL compare.
    static func normalized(_ text: String) -> String {
        var text = text.replacingOccurrences(of: #"[A-Za-z0-9_\-]{22,}"#, with: "…", options: .regularExpression)
        text = text.replacingOccurrences(of: #"\b\d{2}:\d{2}:\d{2}\b"#, with: "…", options: .regularExpression)
        return text
    }

    @Test("curl --http2 and curl --http1.1 against the same URLs (pages, the checks, the provider, siwa's own errors, an odd target): the same status, the same fields but for the connection's own, the same body")
    func http2AnswersAsHTTP1() async throws {
        try await Self.withEdgeSite(settings: ["oidc_clients": #"[{"client_id": "app", "client_secret": "s3cret-s3cret-s3cret", "redirect_uris": ["https://app.localhost/cb"]}]"#]) { site, _, root, _ in
            let cases: [(String, String, [String], String?)] = [
                ("GET", "/", [], nil), ("GET", "/auth/apple", [], nil), ("GET", "/auth/check", [], nil), ("GET", "/auth/check", ["Authorization: Bearer nope"], nil),
                ("GET", "/auth/check", ["Accept: text/html", "Sec-Fetch-Mode: navigate"], nil), ("GET", "/auth/forward", ["Accept: text/html"], nil),
                ("GET", "/.well-known/openid-configuration", [], nil), ("GET", "/oauth2/keys", [], nil), ("GET", "/auth/session", [], nil),
                ("POST", "/oauth2/token", ["Content-Type: application/x-www-form-urlencoded"], "grant_type=authorization_code&code=x"),
                ("POST", "/auth/apple/callback", ["Content-Type: application/x-www-form-urlencoded"], "state=x&code=y"),
                ("GET", "/nope", [], nil), ("GET", "/a/../auth/session", [], nil), ("GET", "/auth/check?access_token=x", [], nil), ("HEAD", "/", [], nil),
                ("GET", "/healthz", [], nil), ("GET", "/siwa.css", [], nil),
            ]
            let ignored: Set<String> = ["date", "connection", "keep-alive", "transfer-encoding", "set-cookie", "content-length"]
            for (method, path, headers, body) in cases {
                let extra = method == "HEAD" ? ["-I"] : []
                let two = try await Curl.fetch(site.url(path), http2: true, caFile: root, method: method, headers: headers, body: body, extra: extra)
                let one = try await Curl.fetch(site.url(path), http2: false, caFile: root, method: method, headers: headers, body: body, extra: extra)
                #expect(two.version == "2" && one.version == "1.1", "\(method) \(path)")
                #expect(two.status == one.status, "\(method) \(path): \(two.status) over HTTP/2, \(one.status) over HTTP/1.1")
                let fieldsTwo = two.fields.filter { !ignored.contains($0.name) }.map { "\($0.name): \(Self.normalized($0.value))" }.sorted()
                let fieldsOne = one.fields.filter { !ignored.contains($0.name) }.map { "\($0.name): \(Self.normalized($0.value))" }.sorted()
                #expect(fieldsTwo == fieldsOne, "\(method) \(path)")
                #expect(Self.normalized(two.body) == Self.normalized(one.body), "\(method) \(path)")
                // Set-Cookie: the same cookies by name and attributes (in any order: Hummingbird writes them from a dictionary).
                let cookies = { (answer: CurlAnswer) in
                    answer.headers("set-cookie").map { cookie in
                        let parts = Self.normalized(cookie).components(separatedBy: "; ")
                        return ([parts[0]] + parts.dropFirst().sorted()).joined(separator: "; ")
                    }.sorted()
                }
                #expect(cookies(two) == cookies(one), "\(method) \(path)")
            }
        }
    }

    @Test("renewal: a certificate pebble issues for 20 s is renewed before it lapses (a new serial, the metric counts two)")
    func renewal() async throws {
        let ports = try await FreePorts.reserve(2)
        let (http, https) = (ports[0], ports[1])
        try await withPebble(httpPort: http, tlsPort: https, validitySeconds: 20) { pebble in
            try await LocalSite.run(settings: [
                "port": String(http), "https_port": String(https), "tls_domains": "auth.localhost", "acme_directory": pebble.directoryURL, "acme_ca_file": pebble.caFile,
                "log_level": "info",
            ]) { site in
                let root = try await pebble.rootFile()
                try await Self.waitForCertificate(site, root: root, pebble: pebble)
                let first = try await Self.servedSerial(port: https, name: "auth.localhost")
                // Renewal from two thirds of 20 s (about 13 s).
                let deadline = ContinuousClock.now + .seconds(40)
                var now = first
                while now == first, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(500))
                    now = try await Self.servedSerial(port: https, name: "auth.localhost")
                }
                #expect(now != first, "the certificate was not renewed within 40 s")
                #expect(try await Self.orders(site, root: root, challenge: "tls-alpn-01", outcome: "issued") >= 2)
            }
        }
    }

    @Test("a failed renewal leaves the certificate in service: pebble stopped after the first order, the renewal fails (logged, counted, backed off) and the same certificate is still served")
    func failedRenewalKeepsTheCertificate() async throws {
        let ports = try await FreePorts.reserve(2)
        let (http, https) = (ports[0], ports[1])
        try await withPebble(httpPort: http, tlsPort: https, validitySeconds: 20) { pebble in
            // pebble's root and listener CA outlive it here: the test keeps reading siwa's HTTPS after pebble stops.
            let root = try await pebble.rootFile()
            let kept = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-pebble-root-\(UUID().uuidString).pem")
            defer { try? FileManager.default.removeItem(at: kept) }
            try FileManager.default.copyItem(atPath: root, toPath: kept.path)
            try await LocalSite.run(settings: [
                "port": String(http), "https_port": String(https), "tls_domains": "auth.localhost", "acme_directory": pebble.directoryURL, "acme_ca_file": pebble.caFile,
            ]) { site in
                try await Self.waitForCertificate(site, root: kept.path, pebble: pebble)
                let first = try await Self.servedSerial(port: https, name: "auth.localhost")
                try await pebble.stop()
                // Past the renewal point (about 13 s): the order fails and the certificate stays.
                let deadline = ContinuousClock.now + .seconds(40)
                var failed = 0
                while failed == 0, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(500))
                    // Read without checking the certificate's dates: pebble's lives 20 s, and may lapse meanwhile.
                    failed = try await Self.orders(site, root: kept.path, challenge: "none", outcome: "failed", insecure: true)
                }
                #expect(failed >= 1, "no failed order counted within 40 s")
                #expect(try await Self.servedSerial(port: https, name: "auth.localhost") == first)
                #expect(try await Curl.fetch(site.url("/healthz"), caFile: kept.path, extra: ["--insecure"]).status == 200)
                #expect(site.port > 0)
            }
        }
    }

    @Test("two instances on one PostgreSQL database, started together, order once: one holds the ordering lock and orders (the CA's validation answered by whichever instance it reaches, from the store when the other ordered), the other serves what it stored; both present the same certificate")
    func twoInstancesOrderOnce() async throws {
        try await AccessRulesEndToEndTests.withFreshPostgresDatabase { url in
            let ports = try await FreePorts.reserve(4)
            let key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
            try await withPebble(httpPort: ports[0], tlsPort: ports[1]) { pebble in
                func settings(_ http: Int, _ https: Int) -> [String: String?] {
                    ["port": String(http), "https_port": String(https), "tls_domains": "auth.localhost", "acme_directory": pebble.directoryURL,
                     "acme_ca_file": pebble.caFile, "db": url, "data_key": key]
                }
                try await LocalSite.run(settings: settings(ports[0], ports[1])) { first in
                    try await LocalSite.run(settings: settings(ports[2], ports[3])) { second in
                        let root = try await pebble.rootFile()
                        let deadline = ContinuousClock.now + .seconds(60)
                        var served: [String?] = [nil, nil]
                        while served.contains(nil), ContinuousClock.now < deadline {
                            try await Task.sleep(for: .milliseconds(300))
                            served = [try? await Self.servedSerial(port: ports[1], name: "auth.localhost"), try? await Self.servedSerial(port: ports[3], name: "auth.localhost")]
                        }
                        #expect(served[0] != nil && served[0] == served[1], "\(served)")
                        var issued = 0
                        for site in [first, second] {
                            for challenge in ["tls-alpn-01", "http-01"] { issued += try await Self.orders(site, root: root, challenge: challenge, outcome: "issued") }
                        }
                        #expect(issued == 1, "orders issued by the two instances: \(issued)")
                    }
                }
            }
        }
    }

    @Test("the CA's validation reaching an instance that did not order (a load balancer in front of two) is answered from the store: the instance pebble validates against cannot order itself (it does not trust pebble's HTTPS), the other orders; then both serve the certificate, the first from the store within seconds; the renewal's validation, reaching the same instance, is answered with the new order's digest, not the first's")
    func validationAnsweredByAnotherInstance() async throws {
        try await AccessRulesEndToEndTests.withFreshPostgresDatabase { url in
            let ports = try await FreePorts.reserve(4)
            let key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
            try await withScratchDirectory("siwa-other-ca") { directory in
                // A CA that did not sign pebble's HTTPS: an instance trusting it alone cannot reach the ACME server.
                let otherCA = directory.appendingPathComponent("other.pem").path
                try await TestCertificate.make(certificate: otherCA, key: directory.appendingPathComponent("other.key").path, subject: "other", names: ["DNS:other"], authority: true)
                // Certificates of 20 s, renewed from about 13 s: the renewal's validation reaches the same instance.
                try await withPebble(httpPort: ports[0], tlsPort: ports[1], validitySeconds: 20) { pebble in
                    func settings(_ http: Int, _ https: Int, trusting ca: String) -> [String: String?] {
                        ["port": String(http), "https_port": String(https), "tls_domains": "auth.localhost", "acme_directory": pebble.directoryURL,
                         "acme_ca_file": ca, "db": url, "data_key": key, "acme_challenges": "tls-alpn-01"]
                    }
                    // The validated one: its own orders fail before any challenge.
                    try await LocalSite.run(settings: settings(ports[0], ports[1], trusting: otherCA)) { validated in
                        try await LocalSite.run(settings: settings(ports[2], ports[3], trusting: pebble.caFile)) { ordering in
                            let root = try await pebble.rootFile()
                            // The ordering instance may wait out the other's failed attempt (it holds the lock meanwhile).
                            try await Self.waitForCertificate(ordering, root: root, pebble: pebble)
                            #expect(try await Self.orders(ordering, root: root, challenge: "tls-alpn-01", outcome: "issued") == 1)
                            let deadline = ContinuousClock.now + .seconds(60)
                            var served: String?
                            while served == nil, ContinuousClock.now < deadline {
                                try await Task.sleep(for: .milliseconds(300))
                                served = try? await Self.servedSerial(port: ports[1], name: "auth.localhost")
                            }
                            #expect(try served == (await Self.servedSerial(port: ports[3], name: "auth.localhost")))
                            #expect(try await Curl.fetch(validated.url("/healthz"), caFile: root).status == 200)
                            #expect(try await Self.orders(validated, root: root, challenge: "none", outcome: "failed") >= 1)
                            #expect(try await Self.orders(validated, root: root, challenge: "tls-alpn-01", outcome: "issued") == 0)
                            // The renewal, validated by the same instance with the new order's digest. Before, it kept the
                            // first order's answer and presented it again: the renewal failed, and with TLS-ALPN-01 alone
                            // it never succeeded.
                            let renewed = ContinuousClock.now + .seconds(60)
                            var issued = 1
                            while issued < 2, ContinuousClock.now < renewed {
                                try await Task.sleep(for: .milliseconds(500))
                                // Read over HTTPS: while the first certificate has lapsed and none replaced it, not at all.
                                issued = (try? await Self.orders(ordering, root: root, challenge: "tls-alpn-01", outcome: "issued")) ?? issued
                            }
                            #expect(issued >= 2, "the renewal validated by the other instance was not issued within 60 s")
                        }
                    }
                }
            }
        }
    }

    @Test("the operator's own certificate files: served, then replaced on disk and served anew without a restart; a half-written pair leaves the one in service")
    func operatorFiles() async throws {
        try await withScratchDirectory("siwa-own-tls") { directory in
            let cert = directory.appendingPathComponent("cert.pem").path
            let key = directory.appendingPathComponent("key.pem").path
            func make(_ subject: String) async throws {
                try await TestCertificate.make(certificate: cert + ".new", key: key + ".new", subject: subject, names: ["DNS:auth.localhost"])
                // Each file replaced at once (rename), the key first, as an operator's deploy script would.
                #expect(rename(key + ".new", key) == 0 && rename(cert + ".new", cert) == 0)
            }
            try await make("first")
            let https = try await FreePorts.reserve(1)[0]
            try await LocalSite.run(settings: ["tls_cert_file": cert, "tls_key_file": key, "tls_domains": "auth.localhost", "https_port": String(https)]) { site in
                #expect(try await Curl.fetch(site.url("/healthz"), caFile: cert).status == 200)
                #expect(try await Self.servedSerial(port: https, name: "auth.localhost").contains("first"))
                try await make("second")
                let deadline = ContinuousClock.now + .seconds(20)
                var served = ""
                while !(served.contains("second")), ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(300))
                    served = try await Self.servedSerial(port: https, name: "auth.localhost")
                }
                #expect(served.contains("second"), "\(served)")
                #expect(try await Curl.fetch(site.url("/healthz"), caFile: cert).status == 200)
                // A key that does not go with the certificate: refused, the second stays.
                try "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n".write(toFile: key, atomically: true, encoding: .utf8)
                try await Task.sleep(for: .seconds(5))
                #expect(try await Self.servedSerial(port: https, name: "auth.localhost").contains("second"))
            }
        }
    }

    @Test("the operator's certificate files as a Kubernetes secret mounts them (links into a directory swapped whole): a new certificate is served without a restart or SIGHUP")
    func operatorFilesBehindLinks() async throws {
        try await withScratchDirectory("siwa-linked-tls") { directory in
            func path(_ name: String) -> String { directory.appendingPathComponent(name).path }
            // ..data -> ..first/; cert.pem -> ..data/cert.pem, key.pem -> ..data/key.pem, as the kubelet lays them out.
            func make(_ version: String) async throws {
                try FileManager.default.createDirectory(atPath: path(version), withIntermediateDirectories: true)
                try await TestCertificate.make(certificate: path(version + "/cert.pem"), key: path(version + "/key.pem"), subject: version, names: ["DNS:auth.localhost"])
                // The swap: a new link, renamed over the old one.
                try? FileManager.default.removeItem(atPath: path("..data_tmp"))
                try FileManager.default.createSymbolicLink(atPath: path("..data_tmp"), withDestinationPath: version)
                #expect(rename(path("..data_tmp"), path("..data")) == 0)
            }
            try await make("..first")
            try FileManager.default.createSymbolicLink(atPath: path("cert.pem"), withDestinationPath: "..data/cert.pem")
            try FileManager.default.createSymbolicLink(atPath: path("key.pem"), withDestinationPath: "..data/key.pem")
            let https = try await FreePorts.reserve(1)[0]
            let settings = ["tls_cert_file": path("cert.pem"), "tls_key_file": path("key.pem"), "tls_domains": "auth.localhost", "https_port": String(https)]
            try await LocalSite.run(settings: settings) { _ in
                #expect(try await Self.servedSerial(port: https, name: "auth.localhost").contains("first"))
                try await make("..second")
                let deadline = ContinuousClock.now + .seconds(20)
                var served = ""
                while !served.contains("second"), ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(300))
                    served = try await Self.servedSerial(port: https, name: "auth.localhost")
                }
                // Before, the watch looked at the links, which do not change.
                #expect(served.contains("second"), "\(served)")
            }
        }
    }

    @Test("the plain port beside the operator's certificate files and public_url, without tls_domains: redirects to a host the certificate names, else to public_url's, never to one a client made up; and it has the HTTPS port's limits on a client's time (a head that does not arrive whole gets 408, an idle connection ends, a silent one too)")
    func plainPortWithoutDomains() async throws {
        try await withScratchDirectory("siwa-plain-port") { directory in
            let cert = directory.appendingPathComponent("cert.pem").path
            let key = directory.appendingPathComponent("key.pem").path
            try await TestCertificate.make(certificate: cert, key: key, subject: "plain", names: ["DNS:auth.localhost", "DNS:*.apps.localhost"])
            let https = try await FreePorts.reserve(1)[0]
            let settings: [String: String?] = [
                "tls_cert_file": cert, "tls_key_file": key, "https_port": String(https), "public_url": "https://auth.localhost:\(https)",
                // Limits a loaded run does not trip by accident: a connection curl opened but had not yet written on,
                // its process starved for 600 ms, was once ended as idle (curl: connection reset), the 301 unseen; and
                // again at a 1 s header limit (a run of the edge suites beside the floods').
                "client_header_timeout_ms": "3000", "client_idle_timeout_ms": "4000",
            ]
            try await LocalSite.run(settings: settings) { site in
                let plain = "http://127.0.0.1:\(site.port)"
                // Before, with no tls_domains, every redirect went to https://localhost.
                for (host, location) in [
                    ("auth.localhost", "https://auth.localhost:\(https)/a?b=1"), ("one.apps.localhost:\(site.port)", "https://one.apps.localhost:\(https)/a?b=1"),
                    ("evil.example", "https://auth.localhost:\(https)/a?b=1"), ("apps.localhost", "https://auth.localhost:\(https)/a?b=1"),
                ] {
                    let answer = try await Curl.fetch(plain + "/a?b=1", http2: false, headers: ["Host: \(host)"])
                    #expect(answer.status == 301 && answer.header("location") == location, "Host: \(host): \(answer.status) \(answer.header("location") ?? "-")")
                }
                #expect(try await Curl.fetch(plain + "/healthz", http2: false).status == 200)
                // Before, the plain port had no limit on a client's time: each of these was held for ever.
                let started = ContinuousClock.now
                let trickled = try await RawSocket.exchange(port: site.port, "GET /healthz HT", then: ["T"])
                #expect(trickled.hasPrefix("HTTP/1.1 408 Request Timeout\r\n"), "\(trickled)")
                #expect(ContinuousClock.now - started < .seconds(15), "ended by the reader's own limit, not siwa")
                let idleStart = ContinuousClock.now
                let answered = try await RawSocket.exchange(port: site.port, "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
                #expect(answered.hasPrefix("HTTP/1.1 200 OK") && answered.components(separatedBy: "HTTP/1.1 ").count == 2, "\(answered)")
                #expect(ContinuousClock.now - idleStart >= .milliseconds(3950), "ended before client_idle_timeout_ms")
                #expect(ContinuousClock.now - idleStart < .seconds(15), "ended by the reader's own limit, not siwa")
                let silentStart = ContinuousClock.now
                let silent = try await RawSocket.exchange(port: site.port, "")
                #expect(silent.isEmpty, "\(silent)")
                #expect(ContinuousClock.now - silentStart < .seconds(15), "ended by the reader's own limit, not siwa")
            }
        }
    }

    @Test("a CA that opens accounts only with an external account binding (pebble requiring one): with acme_eab_kid and acme_eab_hmac_key siwa obtains its certificate; without them it does not ask and says what to set, as siwa doctor --online does beforehand; with a wrong HMAC key the CA refuses and the key is not in the error")
    func externalAccountBinding() async throws {
        let ports = try await FreePorts.reserve(2)
        let (http, https) = (ports[0], ports[1])
        let macKey = Base64URL.encode((0..<32).map { _ in UInt8.random(in: 0...255) })
        let wrongKey = Base64URL.encode((0..<32).map { _ in UInt8.random(in: 0...255) })
        try await withPebble(httpPort: http, tlsPort: https, externalAccountKeys: ["kid-siwa": macKey]) { pebble in
            let root = try await pebble.rootFile()
            // The client's steps, against pebble itself: without a binding, and with a wrong key.
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(pebble.caFile))
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: HTTPClient.Configuration(tlsConfiguration: tls))
            do {
                let logger = Logger(label: "siwa.test")
                let unbound = ACMEClient(directoryURL: pebble.directoryURL, http: client, key: P256.Signing.PrivateKey(), accountURL: nil, logger: logger)
                let directory = try await unbound.directory()
                #expect(directory.externalAccountRequired)
                await #expect { _ = try await unbound.account(directory, email: nil) } throws: { error in
                    "\(error)".contains("acme_eab_kid") && "\(error)".contains("acme_eab_hmac_key")
                }
                let wrong = ACMESettings.ExternalAccount(keyID: "kid-siwa", macKey: ACMESettings.ExternalAccount.macKey(base64URL: wrongKey) ?? [])
                await #expect { _ = try await unbound.account(directory, email: nil, externalAccount: wrong) } throws: { error in
                    (error as? ACMEClient.Failure)?.step == "newAccount" && !"\(error)".contains(wrongKey) && !"\(error)".contains(macKey)
                }
                try await client.shutdown()
            } catch {
                try? await client.shutdown()
                throw error
            }
            // `siwa doctor --online` says so before siwa starts: what to set, then that it is set; and a CA it cannot
            // trust (pebble without acme_ca_file) is said too.
            let asked = ["tls_domains": "auth.localhost", "acme_directory": pebble.directoryURL, "acme_ca_file": pebble.caFile]
            let unset = await ConfigurationDoctor(values: asked, httpClient: .shared).acmeDirectoryCheck()
            #expect(unset?.passed == false && unset?.message.contains("acme_eab_kid") == true, "\(unset?.line ?? "no check")")
            let set = await ConfigurationDoctor(values: asked.merging(["acme_eab_kid": "kid-siwa", "acme_eab_hmac_key": macKey]) { $1 }, httpClient: .shared).acmeDirectoryCheck()
            #expect(set?.passed == true && set?.message.contains("external account binding") == true, "\(set?.line ?? "no check")")
            #expect(set.map { !$0.line.contains(macKey) } == true)
            let untrusted = await ConfigurationDoctor(values: ["tls_domains": "auth.localhost", "acme_directory": pebble.directoryURL], httpClient: .shared).acmeDirectoryCheck()
            #expect(untrusted?.passed == false && untrusted?.message.contains("acme_ca_file") == true, "\(untrusted?.line ?? "no check")")
            try await LocalSite.run(settings: [
                "port": String(http), "https_port": String(https), "tls_domains": "auth.localhost", "acme_directory": pebble.directoryURL, "acme_ca_file": pebble.caFile,
                "acme_eab_kid": "kid-siwa", "acme_eab_hmac_key": macKey,
            ]) { site in
                try await Self.waitForCertificate(site, root: root, pebble: pebble)
                #expect(try await Self.orders(site, root: root, challenge: "tls-alpn-01", outcome: "issued") == 1)
            }
        }
    }

    @Test(
        "a failed order is not asked for again before its wait, by this instance or another, or after a restart on the same store: a CA's rate limit (rateLimited, its Retry-After; not tried again with the other challenge, which would be refused too and count against the limit), or a CA's error (500, the backoff; the other challenge tried); siwa keeps answering meanwhile",
        arguments: [Refusal.rateLimited, .serverInternal]
    )
    func failedOrderWaits(_ refusal: Refusal) async throws {
        let ports = try await FreePorts.reserve(2)
        let (http, https) = (ports[0], ports[1])
        let orders = Collected(0)
        // A rate limit refuses one order; an error is met by each challenge's order.
        let expected = refusal == .rateLimited ? 1 : 2
        try await Self.withACMEStandIn(StandIn.refusingOrders(refusal, orders: orders)) { acmePort, directory, cert in
            let settings: [String: String?] = [
                "port": String(http), "https_port": String(https), "tls_domains": "auth.localhost", "acme_directory": "https://127.0.0.1:\(acmePort)/directory",
                "acme_ca_file": cert, "db": directory.appendingPathComponent("siwa.sqlite").path,
            ]
            try await LocalSite.run(settings: settings) { site in
                let deadline = ContinuousClock.now + .seconds(30)
                while orders.value < expected, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(100)) }
                #expect(orders.value == expected, "siwa asked for \(orders.value) orders within 30 s")
                // Before, the refusal of the TLS-ALPN-01 order for the CA's rate limit was followed at once by an
                // HTTP-01 order.
                try await Task.sleep(for: .seconds(3))
                #expect(orders.value == expected, "an order was asked for again before its wait")
                #expect(try await Curl.fetch("http://127.0.0.1:\(http)/healthz").status == 200)
                #expect(site.port == http)
            }
            // Restarted on the same store (as another instance would start): the wait is in the store, and siwa does
            // not ask again before it ends. Before, a restart ordered at once (and, for an error, so did another
            // instance).
            try await LocalSite.run(settings: settings) { _ in
                try await Task.sleep(for: .seconds(4))
                #expect(orders.value == expected, "a restarted siwa asked again before the wait")
                #expect(try await Curl.fetch("http://127.0.0.1:\(http)/healthz").status == 200)
            }
        }
    }

    @Test("an order that fails once its names are validated (finalizing refused by the CA) is not ordered again with the other challenge, which would be validated at once and issued a duplicate certificate against the CA's limit; it waits its backoff")
    func noOtherChallengeAfterValidation() async throws {
        let ports = try await FreePorts.reserve(2)
        let (http, https) = (ports[0], ports[1])
        let (orders, finalized) = (Collected(0), Collected(0))
        try await Self.withACMEStandIn(StandIn.refusingFinalize(orders: orders, finalized: finalized)) { acmePort, directory, cert in
            let settings: [String: String?] = [
                "port": String(http), "https_port": String(https), "tls_domains": "auth.localhost", "acme_directory": "https://127.0.0.1:\(acmePort)/directory",
                "acme_ca_file": cert, "db": directory.appendingPathComponent("siwa.sqlite").path,
            ]
            try await LocalSite.run(settings: settings) { _ in
                let deadline = ContinuousClock.now + .seconds(30)
                while finalized.value < 1, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(100)) }
                #expect(finalized.value == 1, "siwa finalized \(finalized.value) orders within 30 s")
                // Before, the refusal was followed at once by an HTTP-01 order, finalized in turn.
                try await Task.sleep(for: .seconds(3))
                #expect(orders.value == 1 && finalized.value == 1, "\(orders.value) orders and \(finalized.value) finalizations: asked again before the backoff")
                #expect(try await Curl.fetch("http://127.0.0.1:\(http)/healthz").status == 200)
            }
        }
    }

    @Test("an ACME server that no longer knows siwa's account (its store reset, as a restarted pebble's is): the key is registered again, the new account stored, and the order asked for again with it, once; before, every order was refused for ever")
    func accountRegisteredAgain() async throws {
        let ports = try await FreePorts.reserve(2)
        let (http, https) = (ports[0], ports[1])
        let (accounts, orderedBy) = (Collected(0), Collected<[String]>([]))
        try await Self.withACMEStandIn(StandIn.forgettingFirstAccount(accounts: accounts, orderedBy: orderedBy)) { acmePort, directory, cert in
            let base = "https://127.0.0.1:\(acmePort)"
            let settings: [String: String?] = [
                "port": String(http), "https_port": String(https), "tls_domains": "auth.localhost", "acme_directory": base + "/directory",
                "acme_ca_file": cert, "db": directory.appendingPathComponent("siwa.sqlite").path,
            ]
            try await LocalSite.run(settings: settings) { _ in
                // The first account's order refused; the key registered again; its order (500) and the other
                // challenge's, with the second account.
                let deadline = ContinuousClock.now + .seconds(30)
                while orderedBy.value.count < 3, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(100)) }
                try await Task.sleep(for: .seconds(2))
                #expect(accounts.value == 2)
                #expect(orderedBy.value == [base + "/account/1", base + "/account/2", base + "/account/2"], "\(orderedBy.value)")
            }
        }
    }

    @Test("each signed request to the ACME server has a nonce of its own, also when an answer carried none (a nonce taken from newNonce is not kept for the next request)")
    func nonceUsedOnce() async throws {
        let ports = try await FreePorts.reserve(2)
        let used = Collected<[String]>([])
        try await Self.withACMEStandIn(StandIn.answeringWithoutNonces(used: used)) { acmePort, directory, cert in
            let settings: [String: String?] = [
                "port": String(ports[0]), "https_port": String(ports[1]), "tls_domains": "auth.localhost",
                "acme_directory": "https://127.0.0.1:\(acmePort)/directory", "acme_ca_file": cert, "db": directory.appendingPathComponent("siwa.sqlite").path,
            ]
            try await LocalSite.run(settings: settings) { _ in
                // The account, then an order with each challenge.
                let deadline = ContinuousClock.now + .seconds(30)
                while used.value.count < 3, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(100)) }
                #expect(used.value.count == 3 && Set(used.value).count == used.value.count, "\(used.value)")
            }
        }
    }

    @Test("an order the CA is processing is looked at again no sooner than its Retry-After says (RFC 8555 7.4), not every half second")
    func pollsHonourRetryAfter() async throws {
        let ports = try await FreePorts.reserve(2)
        let finalizedAt = Collected<ContinuousClock.Instant?>(nil)
        let looked = Collected<[ContinuousClock.Instant]>([])
        try await Self.withACMEStandIn(StandIn.processingWithRetryAfter(finalizedAt: finalizedAt, looked: looked)) { acmePort, directory, cert in
            let settings: [String: String?] = [
                "port": String(ports[0]), "https_port": String(ports[1]), "tls_domains": "auth.localhost", "acme_challenges": "tls-alpn-01",
                "acme_directory": "https://127.0.0.1:\(acmePort)/directory", "acme_ca_file": cert, "db": directory.appendingPathComponent("siwa.sqlite").path,
            ]
            try await LocalSite.run(settings: settings) { _ in
                let deadline = ContinuousClock.now + .seconds(30)
                while looked.value.count < 2, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(100)) }
                let times = [finalizedAt.value].compactMap { $0 } + looked.value
                #expect(times.count == 3, "finalized and looked at twice within 30 s: \(times.count)")
                // Before, the order was looked at 0.5 and 1.5 s after.
                for (before, after) in zip(times, times.dropFirst()) {
                    #expect(after - before >= .milliseconds(2_900), "looked at again after \(after - before)")
                }
            }
        }
    }

    @Test(
        "an order names the certificate it replaces (RFC 9773 5) to a CA that serves renewal information, and only to one; a CA that refuses the order for that certificate (alreadyReplaced, unauthorized, notFound, malformed) is asked again once without it; a rate limit is not asked again",
        arguments: [("alreadyReplaced", 409), ("unauthorized", 403), ("notFound", 404), ("malformed", 400), ("rateLimited", 429), ("", 0)]
    )
    func ordersNameWhatTheyReplace(_ refusal: String, _ status: Int) async throws {
        let named = Collected<[String?]>([])
        let refusing = refusal.isEmpty ? nil : (HTTPResponseStatus(statusCode: status), refusal)
        for renewalInfo in [true, false] {
            named.withLock { $0 = [] }
            try await Self.withACMEStandIn(StandIn.ordering(renewalInfo: renewalInfo, refusal: refusing, replaces: named)) { port, _, cert in
                let http = try EdgeCertificateService.httpClient(caFile: cert)
                let client = ACMEClient(
                    directoryURL: "https://127.0.0.1:\(port)/directory", http: http, key: P256.Signing.PrivateKey(), accountURL: nil, logger: Logger(label: "test")
                )
                let outcome: Result<ACMEClient.Order, any Error>
                do {
                    let directory = try await client.directory()
                    _ = try await client.account(directory, email: nil)
                    outcome = .success(try await client.newOrder(directory, domains: ["auth.localhost"], replaces: "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE"))
                } catch {
                    outcome = .failure(error)
                }
                try await http.shutdown()
                guard renewalInfo else {
                    // A CA without renewal information is not told: one order, naming nothing.
                    #expect(named.value == [nil])
                    #expect((try? outcome.get()) != nil)
                    return
                }
                switch refusal {
                case "":
                    #expect(named.value == ["aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE"])
                    #expect((try? outcome.get())?.url.hasSuffix("/order/1") == true)
                case "rateLimited":
                    #expect(named.value == ["aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE"], "a rate limit was asked again")
                    #expect((try? outcome.get()) == nil)
                default:
                    #expect(named.value == ["aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE", nil], "\(refusal): \(named.value)")
                    #expect((try? outcome.get()) != nil, "\(refusal): the order without replaces failed")
                }
            }
        }
    }

    /// How `StandIn.refusingOrders` refuses.
    enum Refusal: String, CustomTestStringConvertible, Sendable {
        case rateLimited, serverInternal
        var testDescription: String { rawValue }
    }
}

extension EdgeTests {
    @Test("the CA's renewal information (RFC 9773): siwa asks for it as soon as a certificate is served, by the identifier openssl's reading of that certificate gives; a suggested window already over renews the certificate at once, long before two thirds of its life, and the new certificate is asked about in turn and kept while its window is far off; siwa doctor --online says whether a CA serves renewal information")
    func renewalInformation() async throws {
        let ports = try await FreePorts.reserve(2)
        let (http, https) = (ports[0], ports[1])
        // Certificates for an hour: two thirds of their life is 40 minutes away, so only the CA's word renews one here.
        try await withPebble(httpPort: http, tlsPort: https, validitySeconds: 3600) { pebble in
            // Pebble 2.4 serves no renewal information: a server of the test's own serves pebble's directory with
            // `renewalInfo` added, and the renewal information; everything else goes to pebble itself.
            let pebbleDirectory = try await Curl.fetch(pebble.directoryURL, caFile: pebble.caFile).body
            let asked = Collected<[String]>([])
            try await Self.withACMEStandIn(StandIn.renewalInformation(pebbleDirectory: pebbleDirectory, asked: asked)) { shimPort, directory, cert in
                let trusted = directory.appendingPathComponent("trusted.pem").path
                try (String(contentsOfFile: pebble.caFile, encoding: .utf8) + "\n" + String(contentsOfFile: cert, encoding: .utf8)).write(toFile: trusted, atomically: true, encoding: .utf8)
                try await LocalSite.run(settings: [
                    "port": String(http), "https_port": String(https), "tls_domains": "auth.localhost", "acme_directory": "https://127.0.0.1:\(shimPort)/directory",
                    "acme_ca_file": trusted,
                ]) { site in
                    let root = try await pebble.rootFile()
                    try await Self.waitForCertificate(site, root: root, pebble: pebble)
                    let first = try await Self.servedPEM(port: https)
                    let firstID = try await Self.certID(of: first)
                    // Renewed at once: the window of the first certificate is already over.
                    let deadline = ContinuousClock.now + .seconds(40)
                    var now = first
                    while now == first, ContinuousClock.now < deadline {
                        try await Task.sleep(for: .milliseconds(500))
                        now = try await Self.servedPEM(port: https)
                    }
                    #expect(now != first, "the CA's open window did not renew the certificate within 40 s; asked about: \(asked.value); pebble's log:\n\(pebble.logText.suffix(2000))")
                    #expect(asked.value.first == firstID, "siwa asked about \(asked.value), not \(firstID) (openssl's reading of the served certificate)")
                    let secondID = try await Self.certID(of: now)
                    let askDeadline = ContinuousClock.now + .seconds(15)
                    while !asked.value.contains(secondID), ContinuousClock.now < askDeadline { try await Task.sleep(for: .milliseconds(200)) }
                    #expect(asked.value.contains(secondID), "the new certificate was not asked about: \(asked.value)")
                    // Its window is a month off: it is kept.
                    try await Task.sleep(for: .seconds(3))
                    #expect(try await Self.servedPEM(port: https) == now)
                    #expect(try await Self.orders(site, root: root, challenge: "tls-alpn-01", outcome: "issued") == 2)
                }
                // `siwa doctor --online` says whether the CA says when to renew.
                let told = await ConfigurationDoctor(
                    values: ["tls_domains": "auth.localhost", "acme_directory": "https://127.0.0.1:\(shimPort)/directory", "acme_ca_file": trusted], httpClient: .shared
                ).acmeDirectoryCheck()
                #expect(told?.passed == true && told?.message.contains("renewal information") == true, "\(String(describing: told))")
                let untold = await ConfigurationDoctor(
                    values: ["tls_domains": "auth.localhost", "acme_directory": pebble.directoryURL, "acme_ca_file": pebble.caFile], httpClient: .shared
                ).acmeDirectoryCheck()
                #expect(untold?.passed == true && untold?.message.contains("renewal information") == false, "\(String(describing: untold))")
            }
        }
    }

    /// A small HTTPS server of the test's own standing in for an ACME server, or in front of one, with a certificate
    /// made for 127.0.0.1 (`cert`, which siwa's `acme_ca_file` must trust), each request answered by `answer`;
    /// `body` gets its port and a scratch directory.
    fileprivate static func withACMEStandIn(
        _ answer: @escaping StandIn.Answer, _ body: (_ port: Int, _ directory: URL, _ cert: String) async throws -> Void
    ) async throws {
        try await withScratchDirectory("siwa-acme-stand-in") { directory in
            let (cert, key) = (directory.appendingPathComponent("cert.pem").path, directory.appendingPathComponent("key.pem").path)
            try await TestCertificate.make(certificate: cert, key: key, subject: "127.0.0.1", names: ["IP:127.0.0.1"])
            let tls = try NIOSSLContext(configuration: .makeServerConfiguration(
                certificateChain: try NIOSSLCertificate.fromPEMFile(cert).map { .certificate($0) }, privateKey: .privateKey(try NIOSSLPrivateKey(file: key, format: .pem))
            ))
            try await LoopbackServer.run({ pipeline in
                try pipeline.addHandler(NIOSSLServerHandler(context: tls))
                try pipeline.configureHTTPServerPipeline()
                try pipeline.addHandler(StandIn(answer))
            }) { port, _ in
                try await body(port, directory, cert)
            }
        }
    }

    /// The PEM of the certificate the HTTPS port serves to `auth.localhost`.
    static func servedPEM(port: Int) async throws -> String {
        let shown = try await ChildProcess.run(
            URL(fileURLWithPath: "/usr/bin/openssl"), arguments: ["s_client", "-connect", "127.0.0.1:\(port)", "-servername", "auth.localhost"], environment: [:], timeLimit: .seconds(30)
        )
        guard let start = shown.stdout.range(of: "-----BEGIN CERTIFICATE-----"), let end = shown.stdout.range(of: "-----END CERTIFICATE-----") else {
            throw EndToEndError("no certificate in s_client's output: \(shown.stdout.prefix(500))")
        }
        return String(shown.stdout[start.lowerBound..<end.upperBound]) + "\n"
    }

    /// RFC 9773 4.1's identifier of `pem`, from openssl's reading of it (not siwa's): the authority key identifier
    /// and the serial number's DER content (a zero byte first when its first bit is set), base64url each.
    static func certID(of pem: String) async throws -> String {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("ari-\(UUID().uuidString).pem")
        defer { try? FileManager.default.removeItem(at: file) }
        try pem.write(to: file, atomically: true, encoding: .utf8)
        let shown = try await ChildProcess.run(
            URL(fileURLWithPath: "/usr/bin/openssl"), arguments: ["x509", "-noout", "-serial", "-ext", "authorityKeyIdentifier", "-in", file.path], environment: [:]
        )
        let lines = shown.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        guard let serialLine = lines.first(where: { $0.hasPrefix("serial=") }),
            let keyLine = lines.first(where: { $0.replacingOccurrences(of: "keyid:", with: "").split(separator: ":").count > 8 })
        else { throw EndToEndError("openssl did not show a serial and an authority key identifier: \(shown.stdout)") }
        func bytes(_ hex: some StringProtocol) -> [UInt8] {
            let digits = Array(hex.filter(\.isHexDigit))
            return stride(from: 0, to: digits.count - 1, by: 2).compactMap { UInt8(String(digits[$0...$0 + 1]), radix: 16) }
        }
        var serial = bytes(serialLine.dropFirst("serial=".count))
        if let high = serial.first, high >= 0x80 { serial.insert(0, at: 0) }
        return Base64URL.encode(bytes(keyLine.replacingOccurrences(of: "keyid:", with: ""))) + "." + Base64URL.encode(serial)
    }
}

/// A small HTTPS server of the test's own (`EdgeTests.withACMEStandIn`): each request answered by `answer`, given its
/// path, the server's own base URL and the request's body.
private final class StandIn: ChannelInboundHandler, Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    typealias Answer = @Sendable (_ path: String, _ base: String, _ body: String) -> (status: HTTPResponseStatus, headers: HTTPHeaders, body: String)
    private let answer: Answer
    private let path = Collected("")
    private let received = Collected("")

    init(_ answer: @escaping Answer) { self.answer = answer }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            path.withLock { $0 = head.uri }
            received.withLock { $0 = "" }
        case .body(let bytes): received.withLock { $0 += String(buffer: bytes) }
        case .end:
            var (status, headers, body) = answer(path.value, "https://127.0.0.1:\(context.channel.localAddress?.port ?? 0)", received.value)
            headers.add(name: "Content-Length", value: String(body.utf8.count))
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
            if !body.isEmpty { context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: body)))), promise: nil) }
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}

extension StandIn {
    /// In front of pebble (2.4, which serves no renewal information): its directory with `renewalInfo` added, and the
    /// renewal information (RFC 9773 4.2) of every certificate asked about: the first one's window closed an hour ago
    /// (the CA wants it replaced now), any other's opens a month from now. Records the identifiers asked about, in
    /// order.
    static func renewalInformation(pebbleDirectory: String, asked: Collected<[String]>) -> Answer {
        { path, base, _ in
            let stamp = ISO8601DateFormatter()
            let json = HTTPHeaders([("Content-Type", "application/json")])
            if path == "/directory" {
                let open = pebbleDirectory.trimmingCharacters(in: .whitespacesAndNewlines).dropLast()
                return (.ok, json, open + ", \"renewalInfo\": \"\(base)/renewal-info/\"}")
            }
            guard path.hasPrefix("/renewal-info/") else { return (.notFound, json, "") }
            let id = String(path.dropFirst("/renewal-info/".count))
            var first = false
            asked.withLock { asked in
                if !asked.contains(id) { asked.append(id) }
                first = asked.first == id
            }
            // A window already over, as a CA says of a certificate it is about to revoke; else one a month off.
            let start = first ? Date().addingTimeInterval(-7200) : Date().addingTimeInterval(30 * 86400)
            var headers = json
            headers.add(name: "Retry-After", value: "21600")
            return (.ok, headers, "{\"suggestedWindow\": {\"start\": \"\(stamp.string(from: start))\", \"end\": \"\(stamp.string(from: start.addingTimeInterval(3600)))\"}}")
        }
    }

    /// What every stand-in ACME server answers the same way: its directory (`renewalInfo` in it when asked), a nonce
    /// (with every answer), and an account; nil for the other paths.
    static func account(path: String, base: String, renewalInfo: Bool = false) -> (status: HTTPResponseStatus, headers: HTTPHeaders, body: String)? {
        var headers = HTTPHeaders([("Replay-Nonce", UUID().uuidString), ("Content-Type", "application/json")])
        switch path {
        case "/directory":
            let info = renewalInfo ? ", \"renewalInfo\": \"\(base)/renewal-info/\"" : ""
            return (.ok, headers, "{\"newNonce\": \"\(base)/nonce\", \"newAccount\": \"\(base)/account\", \"newOrder\": \"\(base)/order\"\(info)}")
        case "/nonce":
            return (.ok, headers, "")
        case "/account":
            headers.add(name: "Location", value: base + "/account/1")
            return (.created, headers, "{\"status\": \"valid\"}")
        default:
            return nil
        }
    }

    /// A problem document (RFC 7807) of ACME's `type` with `status`, and `Retry-After` when given.
    static func problem(_ status: HTTPResponseStatus, _ type: String, _ detail: String, retryAfter: String? = nil) -> (status: HTTPResponseStatus, headers: HTTPHeaders, body: String) {
        var headers = HTTPHeaders([("Replay-Nonce", UUID().uuidString), ("Content-Type", "application/problem+json")])
        if let retryAfter { headers.add(name: "Retry-After", value: retryAfter) }
        return (status, headers, "{\"type\": \"urn:ietf:params:acme:error:\(type)\", \"detail\": \"\(detail)\"}")
    }

    /// An ACME server (RFC 8555) that refuses every order: for its rate limits, as Let's Encrypt does once a limit is
    /// met (429, `rateLimited`, `Retry-After`: Debian's pebble 2.4 has no rate limits to meet), or for an error of its
    /// own (500, `serverInternal`, no `Retry-After`). Counts the orders asked for.
    static func refusingOrders(_ refusal: EdgeTests.Refusal, orders: Collected<Int>) -> Answer {
        { path, base, _ in
            if let answer = account(path: path, base: base) { return answer }
            guard path == "/order" else { return (.notFound, [:], "") }
            orders.withLock { $0 += 1 }
            switch refusal {
            case .rateLimited:
                return problem(.tooManyRequests, "rateLimited", "too many certificates already issued for this exact set of identifiers", retryAfter: "7200")
            case .serverInternal:
                return problem(.internalServerError, "serverInternal", "the database is down")
            }
        }
    }

    /// An ACME server that has forgotten the first account it opened (as a CA whose store was reset: a restarted
    /// pebble): an order signed by it is refused (`accountDoesNotExist`), one signed by a later account is refused
    /// with an error of its own (500). Counts the accounts opened and records the `kid` of each order.
    static func forgettingFirstAccount(accounts: Collected<Int>, orderedBy: Collected<[String]>) -> Answer {
        { path, base, body in
            switch path {
            case "/account":
                var number = 0
                accounts.withLock { count in
                    count += 1
                    number = count
                }
                var headers = HTTPHeaders([("Replay-Nonce", UUID().uuidString), ("Content-Type", "application/json")])
                headers.add(name: "Location", value: base + "/account/\(number)")
                return (.created, headers, "{\"status\": \"valid\"}")
            case "/order":
                let jws = (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any]
                let header = (jws?["protected"] as? String).flatMap(Base64URL.decode).flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
                let kid = header?["kid"] as? String ?? "none"
                orderedBy.withLock { $0.append(kid) }
                if kid == base + "/account/1" { return problem(.badRequest, "accountDoesNotExist", "no account with that URL") }
                return problem(.internalServerError, "serverInternal", "the database is down")
            default:
                return account(path: path, base: base) ?? (.notFound, [:], "")
            }
        }
    }

    /// An ACME server whose account and order answers carry no `Replay-Nonce` (as a proxy's error page would not):
    /// nonces come from `newNonce` alone, a new one each time. Records the nonce each signed request used; orders
    /// are refused with an error of its own (500).
    static func answeringWithoutNonces(used: Collected<[String]>) -> Answer {
        { path, base, body in
            if path == "/directory" || path == "/nonce" { return account(path: path, base: base) ?? (.notFound, [:], "") }
            let jws = (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any]
            let header = (jws?["protected"] as? String).flatMap(Base64URL.decode).flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
            used.withLock { $0.append(header?["nonce"] as? String ?? "none") }
            switch path {
            case "/account":
                return (.created, HTTPHeaders([("Location", base + "/account/1"), ("Content-Type", "application/json")]), "{\"status\": \"valid\"}")
            case "/order":
                return (.internalServerError, HTTPHeaders([("Content-Type", "application/problem+json")]), "{\"type\": \"urn:ietf:params:acme:error:serverInternal\", \"detail\": \"down\"}")
            default:
                return (.notFound, [:], "")
            }
        }
    }

    /// An ACME server whose orders are ready at once and, once finalized, `processing` with `Retry-After: 3` (as
    /// Let's Encrypt's are, for a few seconds), then `invalid` at the second look. Records when it was finalized and
    /// when the order was looked at after.
    static func processingWithRetryAfter(finalizedAt: Collected<ContinuousClock.Instant?>, looked: Collected<[ContinuousClock.Instant]>) -> Answer {
        { path, base, _ in
            if let answer = account(path: path, base: base) { return answer }
            var headers = HTTPHeaders([("Replay-Nonce", UUID().uuidString), ("Content-Type", "application/json")])
            func order(_ status: String) -> String { "{\"status\": \"\(status)\", \"authorizations\": [], \"finalize\": \"\(base)/finalize/1\"}" }
            switch path {
            case "/order":
                headers.add(name: "Location", value: base + "/order/1")
                return (.created, headers, order("ready"))
            case "/finalize/1":
                finalizedAt.withLock { $0 = .now }
                headers.add(name: "Retry-After", value: "3")
                return (.ok, headers, order("processing"))
            case "/order/1":
                guard finalizedAt.value != nil else { return (.ok, headers, order("ready")) }
                var count = 0
                looked.withLock { looks in
                    looks.append(.now)
                    count = looks.count
                }
                headers.add(name: "Retry-After", value: "3")
                return (.ok, headers, order(count < 2 ? "processing" : "invalid"))
            default:
                return (.notFound, [:], "")
            }
        }
    }

    /// An ACME server whose orders are ready at once (their names validated before) and whose finalize fails with
    /// an error of its own (500, `serverInternal`). Counts the orders asked for and the finalizations.
    static func refusingFinalize(orders: Collected<Int>, finalized: Collected<Int>) -> Answer {
        { path, base, _ in
            if let answer = account(path: path, base: base) { return answer }
            var headers = HTTPHeaders([("Replay-Nonce", UUID().uuidString), ("Content-Type", "application/json")])
            let ready = "{\"status\": \"ready\", \"authorizations\": [], \"finalize\": \"\(base)/finalize/1\"}"
            switch path {
            case "/order":
                orders.withLock { $0 += 1 }
                headers.add(name: "Location", value: base + "/order/1")
                return (.created, headers, ready)
            case "/order/1":
                return (.ok, headers, ready)
            case "/finalize/1":
                finalized.withLock { $0 += 1 }
                return problem(.internalServerError, "serverInternal", "the signing service is down")
            default:
                return (.notFound, [:], "")
            }
        }
    }

    /// An ACME server that serves renewal information (when `renewalInfo`), records each new order's `replaces` (nil
    /// when it names none), and refuses one that names a certificate it replaces with `refusal` (`nil`: takes it); an
    /// order that names none is taken.
    static func ordering(renewalInfo: Bool, refusal: (HTTPResponseStatus, String)?, replaces: Collected<[String?]>) -> Answer {
        { path, base, body in
            if let answer = account(path: path, base: base, renewalInfo: renewalInfo) { return answer }
            guard path == "/order" else { return (.notFound, [:], "") }
            let jws = (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any]
            let payload = (jws?["payload"] as? String).flatMap(Base64URL.decode).flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] } ?? [:]
            replaces.withLock { $0.append(payload["replaces"] as? String) }
            if payload["replaces"] != nil, let (status, type) = refusal { return problem(status, type, "not for that certificate") }
            var headers = HTTPHeaders([("Replay-Nonce", UUID().uuidString), ("Content-Type", "application/json")])
            headers.add(name: "Location", value: base + "/order/1")
            return (.created, headers, "{\"status\": \"pending\", \"authorizations\": [], \"finalize\": \"\(base)/finalize/1\"}")
        }
    }
}
