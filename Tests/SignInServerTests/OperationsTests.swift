import AppleIDEmulator
import AsyncHTTPClient
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import SignInServer
import Testing

@Suite("Operations: metrics, readiness, rate limits, doctor")
struct OperationsTests {
    /// The value of an unlabelled metric line in Prometheus text.
    static func metric(_ name: String, in text: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(name + " ") {
            return Double(line.dropFirst(name.count + 1))
        }
        return nil
    }

    @Test("the hot path fetches the key set once and signs one client secret for many sign-ins (shown by /metrics)")
    func hotPathMetrics() async throws {
        try await withServer { h in
            for _ in 0..<5 {
                let status = try await h.signIn().response.status
                #expect(status == .seeOther)
            }
            let metrics = try await h.get("/metrics")
            #expect(metrics.status == .ok)
            #expect(Self.metric("siwa_signins_completed_total", in: metrics.text) == 5)
            #expect(Self.metric("siwa_signins_started_total", in: metrics.text) == 5)
            #expect(Self.metric("siwa_keyset_fetches", in: metrics.text) == 1)
            #expect(Self.metric("siwa_client_secret_signatures", in: metrics.text) == 1)
            #expect(Self.metric("siwa_active_sessions", in: metrics.text) == 5)
            #expect(metrics.text.contains(#"siwa_apple_requests_total{endpoint="/auth/token",outcome="ok"} 5"#))
            #expect(Self.metric("siwa_callback_duration_seconds_count", in: metrics.text) == 5)
        }
    }

    @Test("failed sign-ins are counted by reason")
    func failureMetrics() async throws {
        try await withServer { h in
            let started = try await h.start()
            _ = try await h.callback(["state": started.state, "error": "user_cancelled_authorize"], binding: started.binding)
            _ = try await h.callback(["state": "unknown", "code": "x", "id_token": "a.b.c"], binding: started.binding)
            let text = try await h.get("/metrics").text
            #expect(text.contains(#"siwa_signins_failed_total{reason="cancelled"} 1"#))
            #expect(text.contains(#"siwa_signins_failed_total{reason="expired"} 1"#))
        }
    }

    @Test("/healthz is alive; /readyz is ready once the store answers and Apple's key set is loaded, 503 when it cannot be")
    func readiness() async throws {
        try await withServer { h in
            let health = try await h.get("/healthz").status
            let ready = try await h.get("/readyz").status
            #expect(health == .ok)
            #expect(ready == .ok)
        }
        try await withServer { h in
            try await h.fault("keys", #"{"status":503}"#)
            let ready = try await h.get("/readyz")
            #expect(ready.status == .serviceUnavailable)
            #expect(ready.text.contains("key set"))
        }
    }

    @Test("rate limit: past the limit per client and minute, the sign-in start answers a 429 page with Retry-After")
    func rateLimit() async throws {
        var options = ServerOptions()
        options.rateLimitPerMinute = 3
        try await withServer(options) { h in
            for _ in 0..<3 {
                let status = try await h.get("/auth/apple").status
                #expect(status == .found)
            }
            let limited = try await h.get("/auth/apple")
            #expect(limited.status == .tooManyRequests)
            #expect(limited.errorTitle == "Too many sign-in attempts")
            #expect(limited.headers[.retryAfter] == "60")
            // Pages that are not sign-in steps are not limited.
            let home = try await h.get("/").status
            #expect(home == .ok)
        }
        // Native sign-ins are limited at both their paths (the /auth/ one is what stays siwa's before an upstream).
        for path in ["/api/apple/native", "/auth/api/apple/native"] {
            try await withServer(options) { h in
                var statuses: [HTTPResponse.Status] = []
                for _ in 0..<4 {
                    statuses.append(try await h.post(path, form: "{}", headers: [.contentType: "application/json"]).status)
                }
                #expect(statuses.prefix(3).allSatisfy { $0 != .tooManyRequests } && statuses.last == .tooManyRequests, "\(path): \(statuses)")
            }
        }
        // So are device authorizations: each is a grant stored for ten minutes.
        var device = options
        var cli = ProviderClientRecord(clientID: "cli", redirectURIs: [], isPublic: true, createdAt: Date())
        cli.deviceFlow = true
        device.providerClients = [cli]
        try await withServer(device) { h in
            var statuses: [HTTPResponse.Status] = []
            for _ in 0..<4 { statuses.append(try await h.post("/oauth2/device_authorization", form: "client_id=cli").status) }
            #expect(statuses.prefix(3).allSatisfy { $0 == .ok } && statuses.last == .tooManyRequests, "\(statuses)")
        }
    }

    @Test("behind a trusted proxy each client gets its own limit by X-Forwarded-For; from anyone else the header is ignored")
    func rateLimitBehindProxy() async throws {
        @Sendable func starts(_ h: Harness, from client: String) async throws -> [HTTPResponse.Status] {
            var statuses: [HTTPResponse.Status] = []
            for _ in 0..<3 {
                statuses.append(try await h.get("/auth/apple", headers: [HTTPField.Name("X-Forwarded-For")!: client + ", 127.0.0.1"]).status)
            }
            return statuses
        }
        var options = ServerOptions()
        options.rateLimitPerMinute = 2
        options.live = true
        // The proxy named by its address, and by a CIDR range (a load balancer's subnet).
        for trusted in [["127.0.0.1"], ["10.0.0.0/8", "127.0.0.0/8"]] {
            options.trustedProxies = trusted
            try await withServer(options) { h in
                // Two people behind the same proxy: each has their own two starts a minute.
                let first = try await starts(h, from: "203.0.113.7")
                let second = try await starts(h, from: "198.51.100.9")
                #expect(first == [.found, .found, .tooManyRequests], "\(trusted)")
                #expect(second == [.found, .found, .tooManyRequests], "\(trusted)")
            }
        }
        // Nothing trusted: the header is anyone's to forge, so all requests count against the peer itself.
        options.trustedProxies = []
        try await withServer(options) { h in
            let first = try await starts(h, from: "203.0.113.7")
            let second = try await starts(h, from: "198.51.100.9")
            #expect(first == [.found, .found, .tooManyRequests])
            #expect(second == [.tooManyRequests, .tooManyRequests, .tooManyRequests])
        }
    }

    @Test("siwa doctor --online against the emulator: right credentials pass, a wrong key is reported as invalid_client")
    func doctorOnline() async throws {
        try await withServer { h in
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-doctor-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let goodKey = directory.appendingPathComponent("AuthKey_\(EmulatorConfiguration.testKeyID).p8").path
            try EmulatorConfiguration.testPrivateKeyPEM.write(toFile: goodKey, atomically: true, encoding: .utf8)
            var values = [
                "team_id": EmulatorConfiguration.testTeamID, "key_id": EmulatorConfiguration.testKeyID,
                "services_id": EmulatorConfiguration.testServicesID, "key_file": goodKey,
                "return_url": Fixtures.localReturnURL, "apple_base_url": h.emulatorURL,
                "data_key": TokenCipher.generateKey(), "db": directory.appendingPathComponent("siwa.sqlite").path,
            ]
            let passing = await ConfigurationDoctor(values: values, httpClient: .shared).run(online: true)
            #expect(passing.allSatisfy { $0.passed }, "\(passing.filter { !$0.passed }.map(\.line))")
            #expect(passing.contains { $0.name == "credentials" && $0.passed })
            #expect(passing.contains { $0.name == "apple_keys" && $0.passed })

            let wrongKey = directory.appendingPathComponent("AuthKey_WRONG.p8").path
            try P256Key.generatePEM().write(toFile: wrongKey, atomically: true, encoding: .utf8)
            values["key_file"] = wrongKey
            let failing = await ConfigurationDoctor(values: values, httpClient: .shared).run(online: true)
            let credentials = try #require(failing.first { $0.name == "credentials" })
            #expect(!credentials.passed)
            #expect(credentials.message.contains("invalid_client"))
        }
    }

    @Test("siwa doctor offline: each broken field is its own FAIL line with a fix", arguments: [
        ("team_id", "ABC", "10-character Team ID"),
        ("key_id", "abc", "10-character Key ID"),
        ("services_id", "web", "reverse-DNS"),
        ("return_url", "http://203.0.113.7/auth/apple/callback", "https"),
        ("return_url", "https://localhost/auth/apple/callback", "domain name"),
        ("return_url", "https://example.com/auth/apple/callback/", "trailing slash"),
        ("return_url", "https://example.com/auth/apple/callback#x", "fragment"),
        ("notifications_url", "http://example.com/auth/apple/notifications", "HTTPS"),
        ("client_secret_lifetime", "99999999", "15777000"),
        ("data_key", "short", "32 random bytes"),
    ])
    func doctorOffline(field: String, value: String, expected: String) async throws {
        let key = FileManager.default.temporaryDirectory.appendingPathComponent("AuthKey_ABC123DEFG-\(UUID().uuidString).p8").path
        try P256Key.generatePEM().write(toFile: key, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: key) }
        var values = [
            "team_id": "A1B2C3D4E5", "key_id": "ABC123DEFG", "services_id": "com.example.web", "key_file": key,
            "return_url": "https://example.com/auth/apple/callback", "data_key": TokenCipher.generateKey(),
            "db": FileManager.default.temporaryDirectory.appendingPathComponent("doctor.sqlite").path,
        ]
        let healthy = await ConfigurationDoctor(values: values, httpClient: .shared).run(online: false)
        #expect(healthy.allSatisfy { $0.passed }, "\(healthy.filter { !$0.passed }.map(\.line))")
        values[field] = value
        let checks = await ConfigurationDoctor(values: values, httpClient: .shared).run(online: false)
        let failed = checks.filter { !$0.passed }
        #expect(failed.count == 1, "\(failed.map(\.line))")
        #expect(failed.first?.name == field)
        #expect(failed.first?.line.contains(expected) == true, "\(failed.first?.line ?? "")")
    }

    @Test("siwa doctor with siwa's own TLS: the operator's certificate files pass with more than 14 days left, fail with fewer, expired, or a key of another certificate; an ACME certificate in the store is judged the same, a store without one says it will be ordered")
    func doctorCertificates() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-doctor-tls-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        func certificate(_ name: String, days: Int) throws -> (String, String) {
            let cert = directory.appendingPathComponent("\(name).pem").path
            let key = directory.appendingPathComponent("\(name).key").path
            let openssl = Process()
            openssl.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
            openssl.arguments = [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert, "-days", String(days),
                "-subj", "/CN=auth.example.com", "-addext", "subjectAltName=DNS:auth.example.com",
            ]
            openssl.standardError = FileHandle.nullDevice
            try openssl.run()
            openssl.waitUntilExit()
            try #require(openssl.terminationStatus == 0)
            return (cert, key)
        }
        let doctor = { (values: [String: String]) in await ConfigurationDoctor(values: values, httpClient: .shared).certificateChecks() }
        for (days, passes, says) in [(90, true, "good for 89 more days"), (5, false, "expires in 4 days")] {
            let (cert, key) = try certificate("d\(days)", days: days)
            let checks = await doctor(["tls_cert_file": cert, "tls_key_file": key, "tls_domains": "auth.example.com"])
            #expect(checks.count == 1 && checks[0].passed == passes && checks[0].message.contains(says), "\(checks.map(\.line))")
        }
        let (good, _) = try certificate("good", days: 30)
        let (_, otherKey) = try certificate("other", days: 30)
        let mismatched = await doctor(["tls_cert_file": good, "tls_key_file": otherKey, "tls_domains": "auth.example.com"])
        #expect(mismatched.count == 1 && !mismatched[0].passed, "\(mismatched.map(\.line))")
        let elsewhere = await doctor(["tls_cert_file": good, "tls_key_file": directory.appendingPathComponent("good.key").path, "tls_domains": "www.example.org"])
        #expect(elsewhere.count == 1 && !elsewhere[0].passed && elsewhere[0].message.contains("none of tls_domains"), "\(elsewhere.map(\.line))")

        // ACME: the store's record, read without the data key.
        let database = directory.appendingPathComponent("siwa.sqlite").path
        let acme = ["tls_domains": "auth.example.com", "db": database, "acme_directory": "https://ca.example/dir"]
        #expect(await doctor(acme).first?.message.contains("none yet") == true)
        let store = try SQLiteStore(path: database, cipher: TokenCipher(base64Keys: [TokenCipher.generateKey()]))
        try await store.migrate()
        #expect(await doctor(acme).first?.message.contains("none yet") == true)
        let name = EdgeRecordNames.certificate(directory: "https://ca.example/dir", domains: ["auth.example.com"])
        try await store.saveEdgeRecord(EdgeRecord(name: name, value: "sealed", notAfter: Date() + 3 * 86_400 + 3600, updatedAt: Date()))
        let soon = await doctor(acme)
        #expect(soon.count == 1 && !soon[0].passed && soon[0].message.contains("expires in 3 days"), "\(soon.map(\.line))")
        // Another directory's certificate is not this one's.
        #expect(await doctor(acme.merging(["acme_directory": "https://other.example/dir"]) { $1 }).first?.message.contains("none yet") == true)
    }

    @Test("siwa doctor refuses a public key or a certificate given as the .p8")
    func doctorRefusesPublicKey() async throws {
        let key = FileManager.default.temporaryDirectory.appendingPathComponent("AuthKey_ABC123DEFG-\(UUID().uuidString).p8").path
        try EmulatorConfiguration.testPublicKeyPEM.write(toFile: key, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: key) }
        let checks = await ConfigurationDoctor(values: [
            "team_id": "A1B2C3D4E5", "key_id": "ABC123DEFG", "services_id": "com.example.web", "key_file": key,
            "return_url": "https://example.com/auth/apple/callback", "data_key": TokenCipher.generateKey(),
        ], httpClient: .shared).run(online: false)
        let line = try #require(checks.first { $0.name == "key_file" })
        #expect(!line.passed)
        #expect(line.message.contains("public key"))
    }
}

import Crypto

enum P256Key {
    static func generatePEM() -> String { P256.Signing.PrivateKey().pemRepresentation }
}
