import AppleSignIn
import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOCore

/// `siwa doctor`: checks a configuration one item at a time and says how to fix each failure.
public struct ConfigurationDoctor: Sendable {
    /// One line of the report.
    public struct Check: Sendable, Hashable {
        /// The configuration key or topic.
        public var name: String
        /// Whether it passed.
        public var passed: Bool
        /// What was found, or what is wrong and how to fix it.
        public var message: String

        /// A line of the report.
        public init(name: String, passed: Bool, message: String) {
            self.name = name
            self.passed = passed
            self.message = message
        }

        /// The printed line.
        public var line: String { "\(passed ? "PASS" : "FAIL")  \(name): \(message)" }
    }

    /// The raw configuration values (keys as in the README's reference).
    let values: [String: String]
    let httpClient: HTTPClient

    /// Creates a doctor for these values.
    public init(values: [String: String], httpClient: HTTPClient) {
        self.values = values
        self.httpClient = httpClient
    }

    private func list(_ key: String) -> [String] {
        (values[key] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// Runs every check; `online` also asks Apple (key set and a token-endpoint probe).
    public func run(online: Bool) async -> [Check] {
        var checks: [Check] = []
        let appleKeys = ["team_id", "key_id", "key_file", "services_id", "return_url"]
        if appleKeys.allSatisfy({ values[$0] == nil }) {
            checks.append(Check(name: "mode", passed: true, message: "local mode: no Apple credentials configured, Apple is emulated; set team_id, key_id, key_file, services_id and return_url for Apple mode"))
            checks.append(await databaseCheck())
            checks += await certificateChecks()
            if online, let acme = await acmeDirectoryCheck() { checks.append(acme) }
            return checks
        }
        let base = values["apple_base_url"] ?? AppleSignInConfiguration.appleBaseURL
        let isApple = URL(string: base)?.host == "appleid.apple.com"

        let teamID = check("team_id") { text throws(ConfigurationError) in try TeamID(text).rawValue }
        checks.append(teamID.check)
        let keyID = check("key_id") { text throws(ConfigurationError) in try KeyID(text).rawValue }
        checks.append(keyID.check)
        let servicesID = check("services_id") { text throws(ConfigurationError) in try ClientID(text).rawValue }
        checks.append(servicesID.check)
        for audience in list("extra_audiences") {
            do {
                _ = try ClientID(audience, field: "extra_audiences")
                checks.append(Check(name: "extra_audiences", passed: true, message: audience))
            } catch {
                checks.append(Check(name: "extra_audiences", passed: false, message: error.message))
            }
        }

        var pem: String?
        if let path = values["key_file"] {
            if let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) {
                do {
                    _ = try SigningKey(pem: text, field: "key_file")
                    pem = text
                    checks.append(Check(name: "key_file", passed: true, message: "\(path) is an EC P-256 private key (PKCS#8)"))
                } catch {
                    checks.append(Check(name: "key_file", passed: false, message: error.message))
                }
            } else {
                checks.append(Check(name: "key_file", passed: false, message: "cannot read \(path); give the path of AuthKey_<KEYID>.p8 and make it readable by the siwa user"))
            }
        } else {
            checks.append(Check(name: "key_file", passed: false, message: "missing; download AuthKey_<KEYID>.p8 from Certificates, Identifiers & Profiles → Keys"))
        }

        checks.append(contentsOf: returnURLChecks(requireApplesRules: isApple))

        if let notifications = values["notifications_url"] {
            let url = URL(string: notifications)
            let ok = url?.scheme == "https" && url?.host.map { !ReturnURL.isLocalOrIP($0) } == true
            checks.append(Check(name: "notifications_url", passed: ok, message: ok ? notifications : "\(notifications) must be an HTTPS URL on a domain; Apple posts server-to-server notifications only there (register it on the App ID)"))
        }

        let lifetime = Int(values["client_secret_lifetime"] ?? "86400")
        if let lifetime, lifetime >= 60, lifetime <= 15_777_000 {
            checks.append(Check(name: "client_secret_lifetime", passed: true, message: "\(lifetime) s"))
        } else {
            checks.append(Check(name: "client_secret_lifetime", passed: false, message: "must be a whole number of seconds between 60 and 15777000 (six months, Apple's limit)"))
        }

        let dataKeys = list("data_key")
        if dataKeys.isEmpty {
            checks.append(Check(name: "data_key", passed: false, message: "missing; refresh tokens are encrypted at rest with it. Create one with `openssl rand -base64 32` and set SIWA_DATA_KEY"))
        } else if (try? TokenCipher(base64Keys: dataKeys)) == nil {
            checks.append(Check(name: "data_key", passed: false, message: "each key must be 32 random bytes in base64 (`openssl rand -base64 32`)"))
        } else {
            checks.append(Check(name: "data_key", passed: true, message: "\(dataKeys.count) key(s)"))
        }

        checks.append(await databaseCheck())
        checks += await certificateChecks()
        if online, let acme = await acmeDirectoryCheck() { checks.append(acme) }

        if online, let teamID = teamID.value, let keyID = keyID.value, let servicesID = servicesID.value, let pem {
            checks.append(contentsOf: await onlineChecks(teamID: teamID, keyID: keyID, servicesID: servicesID, pem: pem, base: base))
        } else if online {
            checks.append(Check(name: "online", passed: false, message: "skipped: fix the credentials above first"))
        }
        return checks
    }

    private func check(_ key: String, _ parse: (String) throws(ConfigurationError) -> String) -> (check: Check, value: String?) {
        guard let text = values[key] else {
            return (Check(name: key, passed: false, message: "missing"), nil)
        }
        do {
            let value = try parse(text)
            return (Check(name: key, passed: true, message: value), value)
        } catch {
            return (Check(name: key, passed: false, message: error.message), nil)
        }
    }

    private func returnURLChecks(requireApplesRules: Bool) -> [Check] {
        let urls = list("return_url")
        guard !urls.isEmpty else {
            return [Check(name: "return_url", passed: false, message: "missing; register https://<your domain>/auth/apple/callback on the Services ID and set it here exactly")]
        }
        var checks: [Check] = []
        let publicHost = values["public_url"].flatMap { URL(string: $0)?.host }
        for text in urls {
            do {
                let url = try ReturnURL.parse(text, requireApplesRules: requireApplesRules, field: "return_url")
                // URL.path drops a trailing slash; URLComponents keeps the path exactly as registered.
                let path = URLComponents(string: text)?.path ?? url.path
                if path != "/auth/apple/callback" {
                    let hint = path == "/auth/apple/callback/" ? "drop the trailing slash here and on the Services ID (they must match exactly)" : "siwa receives Apple's return at /auth/apple/callback"
                    checks.append(Check(name: "return_url", passed: false, message: "\(text): path is \(path); \(hint)"))
                } else if let publicHost, url.host != publicHost {
                    checks.append(Check(name: "return_url", passed: false, message: "\(text) names \(url.host ?? "?") but the site is reached at \(publicHost) (public_url); the binding cookie would be set on one host and expected on the other"))
                } else {
                    checks.append(Check(name: "return_url", passed: true, message: text))
                }
            } catch {
                checks.append(Check(name: "return_url", passed: false, message: error.message))
            }
        }
        return checks
    }

    /// With `--online` and a certificate siwa obtains: the ACME directory answers (trusting `acme_ca_file`), and an
    /// external account binding is set when the CA opens accounts only with one. Nil when siwa obtains no certificate.
    public func acmeDirectoryCheck() async -> Check? {
        guard !list("tls_domains").isEmpty, values["tls_cert_file"] == nil, values["tls_key_file"] == nil else { return nil }
        let directoryURL = values["acme_directory"] ?? ACMESettings.letsEncrypt
        let http: HTTPClient
        do {
            http = try EdgeCertificateService.httpClient(caFile: values["acme_ca_file"])
        } catch {
            return Check(name: "acme_directory", passed: false, message: "acme_ca_file \(values["acme_ca_file"] ?? ""): cannot be read as PEM certificates: \(error)")
        }
        let client = ACMEClient(directoryURL: directoryURL, http: http, key: P256.Signing.PrivateKey(), accountURL: nil, logger: Logger(label: "siwa.doctor"))
        let check: Check
        do {
            let directory = try await client.directory()
            let bound = values["acme_eab_kid"] != nil && values["acme_eab_hmac_key"] != nil
            if directory.externalAccountRequired, !bound {
                check = Check(
                    name: "acme_directory",
                    passed: false,
                    message: "\(directoryURL) opens accounts only with an external account binding: set acme_eab_kid and acme_eab_hmac_key to the key ID and HMAC key your CA gives"
                )
            } else {
                check = Check(
                    name: "acme_directory", passed: true,
                    message: "\(directoryURL) answers" + (directory.externalAccountRequired ? "; it requires an external account binding, and one is set" : "")
                        + (directory.renewalInfo != nil ? "; it says when to renew (renewal information, RFC 9773)" : "")
                )
            }
        } catch {
            check = Check(name: "acme_directory", passed: false, message: "\(error); siwa cannot obtain a certificate until it answers (check acme_directory, acme_ca_file and the network)")
        }
        try? await http.shutdown()
        return check
    }

    /// Days before expiry below which the certificate's check fails: Let's Encrypt's certificates are renewed with a
    /// month left, so a fortnight means renewals have been failing for two weeks.
    static let certificateWarningDays = 14

    /// With siwa's own TLS: how long the certificate has left, the operator's files or the one ACME stored.
    public func certificateChecks(now: Date = Date()) async -> [Check] {
        let domains = list("tls_domains").map { $0.lowercased() }
        func expiry(_ notAfter: Date, _ what: String) -> Check {
            let days = Int(notAfter.timeIntervalSince(now) / 86_400)
            if notAfter <= now { return Check(name: "tls_certificate", passed: false, message: "\(what) expired on \(notAfter); browsers refuse it") }
            if days < Self.certificateWarningDays {
                return Check(name: "tls_certificate", passed: false, message: "\(what) expires in \(days) days (\(notAfter)); renew it now: siwa's log says why its renewals failed")
            }
            return Check(name: "tls_certificate", passed: true, message: "\(what) good for \(days) more days (until \(notAfter))")
        }
        if let certificate = values["tls_cert_file"], let key = values["tls_key_file"] {
            guard let chain = FileManager.default.contents(atPath: certificate).flatMap({ String(data: $0, encoding: .utf8) }),
                let keyPEM = FileManager.default.contents(atPath: key).flatMap({ String(data: $0, encoding: .utf8) })
            else { return [Check(name: "tls_certificate", passed: false, message: "cannot read \(certificate) and \(key)")] }
            do {
                let served = try EdgeCertificates(domains: domains).install(chainPEM: chain, keyPEM: keyPEM)
                return [expiry(served.notAfter, "\(certificate) (\(served.names.joined(separator: ", ")))")]
            } catch {
                return [Check(name: "tls_certificate", passed: false, message: "\(certificate) with \(key): \(error)")]
            }
        }
        guard !domains.isEmpty else { return [] }
        let directory = values["acme_directory"] ?? ACMESettings.letsEncrypt
        let name = EdgeRecordNames.certificate(directory: directory, domains: domains)
        do {
            let database = values["db"] ?? ServerSettings.defaultDatabase
            let cipher = try TokenCipher(base64Keys: [TokenCipher.generateKey()])
            let notAfter: Date?
            if database.hasPrefix("postgres://") || database.hasPrefix("postgresql://") {
                let store = try PostgresStore(url: database, cipher: cipher, logger: Logger(label: "siwa.doctor"))
                notAfter = try await withThrowingTaskGroup(of: Date?.self) { group in
                    group.addTask { await store.client.run(); return nil }
                    defer { group.cancelAll() }
                    return try await store.edgeRecordExpiry(name: name)
                }
            } else {
                guard FileManager.default.fileExists(atPath: database) else {
                    return [Check(name: "tls_certificate", passed: true, message: "none yet: siwa orders one from \(directory) at its first start")]
                }
                notAfter = try await SQLiteStore(path: database, cipher: cipher).edgeRecordExpiry(name: name)
            }
            guard let notAfter else {
                return [Check(name: "tls_certificate", passed: true, message: "none yet for \(domains.joined(separator: ", ")): siwa orders one from \(directory) at its first start")]
            }
            return [expiry(notAfter, "the certificate from \(directory) for \(domains.joined(separator: ", "))")]
        } catch {
            let text = String(reflecting: error)
            if text.contains("no such table") || text.contains("does not exist") {
                // A store from before siwa served TLS: migrated at the next start.
                return [Check(name: "tls_certificate", passed: true, message: "none yet: siwa orders one from \(directory) at its first start")]
            }
            return [Check(name: "tls_certificate", passed: false, message: "the store could not be read: \(error)")]
        }
    }

    private func databaseCheck() async -> Check {
        let database = values["db"] ?? ServerSettings.defaultDatabase
        do {
            if database.hasPrefix("postgres://") || database.hasPrefix("postgresql://") {
                let store = try PostgresStore(url: database, cipher: TokenCipher(base64Keys: [TokenCipher.generateKey()]), logger: Logger(label: "siwa.doctor"))
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { await store.client.run() }
                    group.addTask { try await store.ping() }
                    defer { group.cancelAll() }
                    try await group.next()
                }
                return Check(name: "db", passed: true, message: "PostgreSQL reachable")
            }
            let directory = URL(fileURLWithPath: database).deletingLastPathComponent().path
            guard FileManager.default.isWritableFile(atPath: directory) else {
                return Check(name: "db", passed: false, message: "cannot write in \(directory); SQLite needs the directory writable for the database and its WAL file")
            }
            return Check(name: "db", passed: true, message: "SQLite at \(database)")
        } catch {
            return Check(name: "db", passed: false, message: "database not reachable: \(error)")
        }
    }

    private func onlineChecks(teamID: String, keyID: String, servicesID: String, pem: String, base: String) async -> [Check] {
        var checks: [Check] = []
        let configuration: AppleSignInConfiguration
        do {
            configuration = try AppleSignInConfiguration(
                teamID: teamID, keyID: keyID, servicesID: servicesID, returnURLs: list("return_url"), privateKeyPEM: pem, appleBaseURL: base
            )
        } catch {
            return [Check(name: "online", passed: false, message: "skipped: \(error)")]
        }
        let keysURL = configuration.endpoint("/auth/keys")
        let keySet = AppleKeySet(source: .remote(keysURL, httpClient, timeout: .seconds(10)))
        await keySet.refresh()
        checks.append(keySet.isLoaded
            ? Check(name: "apple_keys", passed: true, message: "fetched the key set from \(keysURL.absoluteString)")
            : Check(name: "apple_keys", passed: false, message: "could not fetch \(keysURL.absoluteString); check outbound HTTPS from this machine"))
        let client = AppleIDClient(configuration: configuration, httpClient: httpClient, secrets: ClientSecretSigner(configuration: configuration), timeout: .seconds(10))
        do {
            _ = try await client.exchange(code: "siwa-doctor-probe", redirectURI: configuration.returnURLs.first)
            checks.append(Check(name: "credentials", passed: false, message: "Apple accepted a dummy code, which it never should"))
        } catch {
            switch error.kind {
            case .invalidGrant:
                checks.append(Check(name: "credentials", passed: true, message: "Apple accepted the client secret (a dummy code got invalid_grant, as expected)"))
            case .invalidClient:
                checks.append(Check(name: "credentials", passed: false, message: "Apple refused the client secret (invalid_client): check team_id (iss), key_id (kid), that key_file is that key with Sign in with Apple enabled, and that services_id is the Services ID (sub = client_id)"))
            default:
                checks.append(Check(name: "credentials", passed: false, message: "probe failed: \(error.message)"))
            }
        }
        return checks
    }
}
