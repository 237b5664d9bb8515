import AppleIDEmulator
import AppleSignIn
import AsyncHTTPClient
import Foundation
import GRDB
import Hummingbird
import HummingbirdTesting
import JOSE
import Logging
import NIOCore
@testable import SignInServer
import TestSupport

/// How to set up the server under test.
struct ServerOptions: Sendable {
    var mode: ServerSettings.Mode = .local
    /// The server's return URL (registered in the emulator exactly).
    var returnURL = Fixtures.localReturnURL
    /// The return URL registered in the emulator, when it must differ.
    var registeredReturnURL: String?
    /// The key that signs client secrets (the emulator knows only the built-in one).
    var privateKeyPEM = EmulatorConfiguration.testPrivateKeyPEM
    /// `ServerSettings.appleTimeoutMS`.
    var appleTimeoutMS = 10_000
    /// `ServerSettings.sessionLifetime`.
    var sessionLifetime: TimeInterval = 7 * 86_400
    /// When set, "Apple" as the server sees it also publishes this key (see `KeyProxy`).
    var trustedForger: Forger?
    /// Sign-in starts and callbacks per client and minute (0: no limit).
    var rateLimitPerMinute = 0
    /// Proxies whose X-Forwarded-* headers the server believes.
    var trustedProxies: [String] = []
    /// `check_cache_seconds`: how long a session stays in memory (a test that counts answers from memory holds them
    /// for its whole run, however slow the suite's load makes it).
    var cacheSeconds = 5
    /// Serve on a real loopback socket (`.live`), so the server sees a peer address, instead of in process.
    var live = false
    /// `audit_log`.
    var auditLogPath: String?
    /// `hsts_max_age`.
    var hstsMaxAge = 0
    /// `admin_groups`.
    var adminGroups: [String] = []
    /// The front's settings (`public_url`, redirect domains, access policy), when the test needs them.
    var front: FrontSettings?
    /// `cookie_domain`.
    var cookieDomain: String?
    /// The OpenID Provider's configured clients, and how long its codes live.
    var providerClients: [ProviderClientRecord] = []
    var providerCodeLifetime: TimeInterval = 60
}

/// A running emulator, the server built by `buildApplication` on a fresh SQLite file, and ways to drive both.
struct Harness: Sendable {
    let client: any TestClientProtocol
    /// Where the emulator listens (what the test's "browser" talks to for consent).
    let emulatorURL: String
    let settings: ServerSettings
    let store: SessionCachedStore
    /// What seals refresh tokens in the store.
    let cipher: TokenCipher
    let database: TestDatabase
    let logs: LogCapture

    /// The binding and session cookie names (they change with the `__Host-` prefix over HTTPS).
    var bindingCookie: String { settings.secureCookies ? "__Host-siwa_binding" : "siwa_binding" }
    var sessionCookie: String { settings.secureCookies ? (settings.cookieDomain == nil ? "__Host-siwa_session" : "__Secure-siwa_session") : "siwa_session" }
    var csrfCookie: String { settings.secureCookies ? "__Host-siwa_csrf" : "siwa_csrf" }
}

/// Runs the emulator live on a free port and the server in process (`app.test(.router)`), calls `body`, cleans up.
func withServer(_ options: ServerOptions = ServerOptions(), _ body: @Sendable (Harness) async throws -> Void) async throws {
    var emulatorLogger = Logger(label: "test.emulator")
    emulatorLogger.logLevel = .critical
    let emulator = try AppleIDEmulator(
        configuration: .defaults(redirectURIs: [options.registeredReturnURL ?? options.returnURL], notificationURL: nil),
        logger: emulatorLogger
    )
    try await withLiveApplication({ emulator.buildApplication(host: "127.0.0.1", port: 0, onRunning: $0) }) { emulatorPort in
        let emulatorURL = "http://127.0.0.1:\(emulatorPort)"
        if let forger = options.trustedForger {
            let proxy = KeyProxy(upstream: emulatorURL, extraKey: forger.jwk)
            try await withLiveApplication({ proxy.application(onRunning: $0) }) { proxyPort in
                try await runServer(options, appleBaseURL: "http://127.0.0.1:\(proxyPort)", emulatorURL: emulatorURL, body)
            }
        } else {
            try await runServer(options, appleBaseURL: emulatorURL, emulatorURL: emulatorURL, body)
        }
    }
}

private func runServer(_ options: ServerOptions, appleBaseURL: String, emulatorURL: String, _ body: @Sendable (Harness) async throws -> Void) async throws {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-test-\(UUID().uuidString).sqlite").path
    defer {
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }
    let apple = try AppleSignInConfiguration(
        teamID: EmulatorConfiguration.testTeamID, keyID: EmulatorConfiguration.testKeyID,
        servicesID: EmulatorConfiguration.testServicesID, extraAudiences: [EmulatorConfiguration.testBundleID],
        returnURLs: [options.returnURL], privateKeyPEM: options.privateKeyPEM,
        appleBaseURL: appleBaseURL
    )
    var configured = ServerSettings(mode: options.mode, host: "127.0.0.1", port: 0, database: path, apple: apple, sessionLifetime: options.sessionLifetime, appleTimeoutMS: options.appleTimeoutMS)
    configured.rateLimitPerMinute = options.rateLimitPerMinute
    configured.trustedProxies = options.trustedProxies
    configured.checkCacheSeconds = options.cacheSeconds
    if let front = options.front { configured.front = front }
    configured.cookieDomain = options.cookieDomain
    configured.auditLogPath = options.auditLogPath
    configured.hstsMaxAge = options.hstsMaxAge
    configured.adminGroups = options.adminGroups
    configured.provider = ProviderSettings(issuer: configured.front.publicOrigin, clients: options.providerClients)
    configured.provider.codeLifetime = options.providerCodeLifetime
    let settings = configured
    let cipher = try TokenCipher(base64Keys: settings.dataKeys)
    let store = SessionCachedStore(try SQLiteStore(path: path, cipher: cipher), cacheSeconds: options.cacheSeconds)
    let logs = LogCapture()
    let app = try await buildApplication(settings: settings, httpClient: .shared, store: store, logger: logs.logger)
    try await app.test(options.live ? .live : .router) { client in
        try await body(Harness(client: client, emulatorURL: emulatorURL, settings: settings, store: store, cipher: cipher, database: TestDatabase(path: path), logs: logs))
    }
}

enum HarnessError: Error {
    case emulatorRefused(Int, String)
}

/// Reads the server's SQLite file the way an operator would, to see what is (not) stored.
struct TestDatabase: Sendable {
    let path: String

    func read<T>(_ work: (Database) throws -> T) throws -> T {
        let queue = try DatabaseQueue(path: path)
        return try queue.read(work)
    }

    /// Writes as a second process on the same file would (a connection of its own, not the server's store).
    func write<T>(_ work: (Database) throws -> T) throws -> T {
        let queue = try DatabaseQueue(path: path)
        return try queue.write(work)
    }

    /// Rows in `table`.
    func count(_ table: String) throws -> Int {
        try read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM \(table)") ?? 0 }
    }

    /// The user row for `sub`.
    func user(_ sub: String) throws -> Row? {
        try read { try Row.fetchOne($0, sql: "SELECT * FROM users WHERE sub = ?", arguments: [sub]) }
    }

    /// The stored refresh token of `sub`.
    func refreshToken(_ sub: String) throws -> String? {
        try read { try String.fetchOne($0, sql: "SELECT token FROM refresh_tokens WHERE sub = ?", arguments: [sub]) }
    }

    /// Every session's id hash.
    func sessionHashes() throws -> [String] {
        try read { try String.fetchAll($0, sql: "SELECT id_hash FROM sessions") }
    }

    /// Every pending authorization's return path.
    func pendingReturnPaths() throws -> [String] {
        try read { try String.fetchAll($0, sql: "SELECT return_to FROM pending_authorizations") }
    }
}

/// A sign-in started at `GET /auth/apple`.
struct Started: Sendable {
    /// The start response.
    var response: TestResponse
    /// Where the server sent the browser (the authorize URL).
    var authorizeURL: String
    /// The binding cookie's value.
    var binding: String
    /// The `state` in the authorize URL.
    var state: String { Fixtures.query(authorizeURL)["state"] ?? "" }
}

/// A sign-in carried to the end.
struct SignIn: Sendable {
    var started: Started
    /// What Apple (the emulator) returned to the browser.
    var fields: [String: String]
    /// The callback's response.
    var response: TestResponse
    /// The new session cookie's value, if one was set.
    var session: String?
}

extension Harness {
    // MARK: plain requests to the server

    func request(_ method: HTTPRequest.Method, _ uri: String, cookies: [String: String] = [:], headers: HTTPFields = [:], body: String? = nil) async throws -> TestResponse {
        var headers = headers
        if !cookies.isEmpty {
            headers[.cookie] = cookies.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: "; ")
        }
        if body != nil, headers[.contentType] == nil {
            headers[.contentType] = "application/x-www-form-urlencoded"
        }
        return try await client.execute(uri: uri, method: method, headers: headers, body: body.map { ByteBuffer(string: $0) })
    }

    func get(_ uri: String, cookies: [String: String] = [:], headers: HTTPFields = [:]) async throws -> TestResponse {
        try await request(.get, uri, cookies: cookies, headers: headers)
    }

    func post(_ uri: String, form: String, cookies: [String: String] = [:], headers: HTTPFields = [:]) async throws -> TestResponse {
        try await request(.post, uri, cookies: cookies, headers: headers, body: form)
    }

    // MARK: the flow, step by step

    /// `GET /auth/apple` (the button), optionally with `return_to`.
    func start(returnTo: String? = nil) async throws -> Started {
        try await start(at: "/auth/apple" + (returnTo.map { "?return_to=" + FormEncoding.encode($0) } ?? ""))
    }

    /// The start of a sign-in at `uri` (`/auth/apple?…`, e.g. where the server sent a signed-out browser).
    func start(at uri: String) async throws -> Started {
        let response = try await get(uri)
        guard response.status == .found, let location = response.location, let binding = response.setCookie(bindingCookie)?.value else {
            throw HarnessError.emulatorRefused(Int(response.status.code), "start did not redirect with a binding cookie: \(response.text)")
        }
        return Started(response: response, authorizeURL: location, binding: binding)
    }

    /// The person at Apple's consent page, headless: the emulator answers with the fields it would return.
    /// `override` replaces parameters of the authorize URL the server built (e.g. the nonce).
    func authorize(
        _ authorizeURL: String, user: String = Fixtures.ada, hide: Bool = false, action: String = "continue", override: [String: String] = [:],
        firstName: String? = nil
    ) async throws -> [String: String] {
        var pairs = Fixtures.queryPairs(authorizeURL).map { ($0.0, override[$0.0] ?? $0.1) }
        pairs += [("emulator_user", user), ("emulator_email", hide ? "hide" : "share"), ("emulator_action", action), ("emulator_respond", "json")]
        if let firstName { pairs.append(("emulator_first_name", firstName)) }
        // The test's browser goes to the emulator itself, also when the server sees "Apple" through a proxy.
        let answer = try await HTTPClient.shared.execute(HTTPClientRequest(url: emulatorURL + "/auth/authorize?" + FormEncoding.encode(pairs)), timeout: .seconds(10))
        let body = String(buffer: try await answer.body.collect(upTo: 1 << 20))
        guard answer.status == .ok, let object = try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any], let fields = object["fields"] as? [String: String] else {
            throw HarnessError.emulatorRefused(Int(answer.status.code), body)
        }
        return fields
    }

    /// Apple's `form_post` to the return URL, carrying `binding` as the browser would.
    func callback(_ fields: [String: String], binding: String?, headers: HTTPFields = [:]) async throws -> TestResponse {
        let form = FormEncoding.encode(fields.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
        return try await post("/auth/apple/callback", form: form, cookies: binding.map { [bindingCookie: $0] } ?? [:], headers: headers)
    }

    /// The whole sign-in: start, consent at the emulator, form_post back.
    /// `userAgent`: the browser's `User-Agent` on Apple's return (the sessions page names the browser from it).
    /// `startingAt`: the start's URI as the server gave it (a `Location`), in place of one built from `returnTo`.
    func signIn(
        user: String = Fixtures.ada, hide: Bool = false, returnTo: String? = nil, startingAt: String? = nil, firstName: String? = nil, userAgent: String? = nil
    ) async throws -> SignIn {
        let started = if let startingAt { try await start(at: startingAt) } else { try await start(returnTo: returnTo) }
        let fields = try await authorize(started.authorizeURL, user: user, hide: hide, firstName: firstName)
        let response = try await callback(fields, binding: started.binding, headers: userAgent.map { [.userAgent: $0] } ?? [:])
        return SignIn(started: started, fields: fields, response: response, session: response.setCookie(sessionCookie).flatMap { $0.value.isEmpty ? nil : $0.value })
    }

    /// `GET /session` with the session cookie.
    func sessionPage(_ session: String?, headers: HTTPFields = [:]) async throws -> TestResponse {
        try await get("/session", cookies: session.map { [sessionCookie: $0] } ?? [:], headers: headers)
    }

    // MARK: the emulator's admin API

    /// Injects a fault into one of the emulator's endpoints (`token`, `keys`, `revoke`, `authorize`).
    func fault(_ endpoint: String, _ json: String) async throws {
        var request = HTTPClientRequest(url: emulatorURL + "/emulator/admin/faults/" + endpoint)
        request.method = .PUT
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(string: json))
        let answer = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        let body = String(buffer: try await answer.body.collect(upTo: 1 << 16))
        guard answer.status == .ok else { throw HarnessError.emulatorRefused(Int(answer.status.code), body) }
    }

    /// Clears every injected fault.
    func clearFaults() async throws {
        var request = HTTPClientRequest(url: emulatorURL + "/emulator/admin/faults")
        request.method = .DELETE
        let answer = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        guard answer.status == .ok || answer.status == .noContent else { throw HarnessError.emulatorRefused(Int(answer.status.code), "") }
    }

    /// The emulator's counters (`codesExchanged`, `keySetRequests`, …).
    func emulatorCounters() async throws -> [String: Int] {
        let answer = try await HTTPClient.shared.execute(HTTPClientRequest(url: emulatorURL + "/emulator/admin/counters"), timeout: .seconds(10))
        let body = try await answer.body.collect(upTo: 1 << 16)
        return try JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Int] ?? [:]
    }

    /// A flow over the same store and settings, for what HTTP cannot start (query mode, a start in the past).
    func flow() async throws -> SignInFlow {
        try await buildComponents(settings: settings, httpClient: .shared, store: store, logger: logs.logger).flow
    }
}
