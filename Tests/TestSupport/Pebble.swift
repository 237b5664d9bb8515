import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Debian's `pebble` (Let's Encrypt's ACME test server) and `pebble-challtestsrv` (its DNS, answering 127.0.0.1 for
/// every name), on free loopback ports while `body` runs; both stopped by their pids after. Pebble validates
/// HTTP-01 on `httpPort` and TLS-ALPN-01 on `tlsPort`, siwa's own listeners. Its listener's certificate (made here
/// with `openssl`) is `caFile`, what siwa's `acme_ca_file` names; the certificates it issues chain to `rootPEM()`.
public struct Pebble: Sendable {
    public let directoryURL: String
    /// The CA of Pebble's own HTTPS (its directory and management interface).
    public let caFile: String
    public let managementPort: Int
    public let directory: URL
    /// Where Pebble and its DNS write.
    public let log: URL
    let pid: pid_t

    /// Stops pebble (SIGTERM, by its pid) before the end of `withPebble`: its directory then refuses connections.
    public func stop() async throws {
        kill(pid, SIGTERM)
        let deadline = ContinuousClock.now + .seconds(10)
        while kill(pid, 0) == 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
    }

    /// The root Pebble issues under (made anew at each start), in PEM: what a client trusts to reach siwa.
    public func rootPEM() async throws -> String {
        let outcome = try await ChildProcess.run(
            URL(fileURLWithPath: "/usr/bin/curl"), arguments: ["-sS", "--cacert", caFile, "https://127.0.0.1:\(managementPort)/roots/0"], environment: [:]
        )
        guard outcome.status == 0, outcome.stdout.contains("BEGIN CERTIFICATE") else { throw ExternalToolError("pebble's root could not be read: \(outcome.stderr)") }
        return outcome.stdout
    }

    /// The root in a file.
    public func rootFile() async throws -> String {
        let path = directory.appendingPathComponent("root.pem").path
        try await rootPEM().write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    public var logText: String { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }
}

/// `externalAccountKeys`: the key IDs and HMAC keys (base64url) of the external accounts pebble binds; when given,
/// pebble opens accounts only with a binding (`externalAccountBindingRequired`).
public func withPebble<T>(
    httpPort: Int, tlsPort: Int, validitySeconds: Int? = nil, externalAccountKeys: [String: String]? = nil, _ body: (Pebble) async throws -> T
) async throws -> T {
    let pebble = URL(fileURLWithPath: "/usr/bin/pebble")
    let challenges = URL(fileURLWithPath: "/usr/bin/pebble-challtestsrv")
    for tool in [pebble, challenges] where !FileManager.default.isExecutableFile(atPath: tool.path) {
        throw ExternalToolError("\(tool.path) was not found. Run ./scripts/test, which installs Debian's pebble.")
    }
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-pebble-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let ports = try await FreePorts.reserve(4)
    let (listen, management, dns, dnsManagement) = (ports[0], ports[1], ports[2], ports[3])
    let cert = directory.appendingPathComponent("pebble.pem").path
    let key = directory.appendingPathComponent("pebble.key").path
    try await TestCertificate.make(certificate: cert, key: key, subject: "pebble", names: ["DNS:localhost", "IP:127.0.0.1"], authority: true)
    var settings: [String: Any] = [
        "listenAddress": "127.0.0.1:\(listen)", "managementListenAddress": "127.0.0.1:\(management)", "certificate": cert, "privateKey": key,
        "httpPort": httpPort, "tlsPort": tlsPort, "ocspResponderURL": "", "externalAccountBindingRequired": false,
    ]
    if let validitySeconds { settings["certificateValidityPeriod"] = validitySeconds }
    if let externalAccountKeys {
        settings["externalAccountBindingRequired"] = true
        settings["externalAccountMACKeys"] = externalAccountKeys
    }
    let configuration = directory.appendingPathComponent("pebble.json")
    try JSONSerialization.data(withJSONObject: ["pebble": settings]).write(to: configuration)
    let log = directory.appendingPathComponent("pebble.log")
    return try await ChildProcess.withRunning(
        challenges,
        arguments: ["-dns01", "127.0.0.1:\(dns)", "-http01", "", "-https01", "", "-tlsalpn01", "", "-management", "127.0.0.1:\(dnsManagement)", "-defaultIPv6", ""],
        output: directory.appendingPathComponent("dns.log"),
        ready: { await TCPProbe.acceptsConnections(on: dnsManagement) }
    ) { _ in
        // No random sleep before validations; authorizations are never reused, so each order validates.
        try await ChildProcess.withRunning(
            pebble, arguments: ["-config", configuration.path, "-dnsserver", "127.0.0.1:\(dns)"],
            environment: ["PEBBLE_VA_NOSLEEP": "1", "PEBBLE_AUTHZREUSE": "0"], output: log,
            ready: { await TCPProbe.acceptsConnections(on: listen) }
        ) { pid in
            try await body(Pebble(directoryURL: "https://127.0.0.1:\(listen)/dir", caFile: cert, managementPort: management, directory: directory, log: log, pid: pid))
        }
    }
}

/// A self-signed certificate (ECDSA P-256) made by `openssl req -x509`, for the servers the tests start.
public enum TestCertificate {
    /// Runs `body` with the paths of a certificate for `name` and its key, in a directory of their own deleted after
    /// (where `body` may write other files of its test too).
    public static func withSelfSigned<T>(name: String = "auth.localhost", _ body: (_ certificate: String, _ key: String) async throws -> T) async throws -> T {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-tls-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let certificate = directory.appendingPathComponent("cert.pem").path
        let key = directory.appendingPathComponent("key.pem").path
        try await make(certificate: certificate, key: key, subject: name, names: ["DNS:" + name])
        return try await body(certificate, key)
    }

    /// Writes the certificate to `certificate` and its key to `key`; `names` go in subjectAltName (`DNS:…`, `IP:…`).
    public static func make(certificate: String, key: String, subject: String, names: [String], days: Int = 2, authority: Bool = false) async throws {
        var arguments = [
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", certificate, "-days", String(days),
            "-subj", "/CN=\(subject)", "-addext", "subjectAltName=" + names.joined(separator: ","),
        ]
        if authority { arguments += ["-addext", "basicConstraints=critical,CA:TRUE"] }
        let made = try await ChildProcess.run(URL(fileURLWithPath: "/usr/bin/openssl"), arguments: arguments, environment: [:])
        guard made.status == 0 else { throw ExternalToolError("openssl could not make a certificate: \(made.stderr)") }
    }
}
