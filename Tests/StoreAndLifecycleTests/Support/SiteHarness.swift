import AppleIDEmulator
import AppleSignIn
import AsyncHTTPClient
import Foundation
import Hummingbird
import JOSE
import Logging
import NIOCore
import NIOHTTP1
@testable import SignInServer
import TestSupport

/// What a client sees of one HTTP answer.
struct Answer: Sendable {
    var status: Int
    var headers: HTTPHeaders
    var body: String

    /// The body as a JSON object (tests force the shape they expect).
    var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] ?? [:] }
    /// `Location`.
    var location: String? { headers.first(name: "location") }
    /// The value a `Set-Cookie` of this response gives `name`, if any.
    func cookie(_ name: String) -> String? {
        for header in headers["set-cookie"] {
            let pair = header.split(separator: ";", maxSplits: 1)[0]
            guard let equals = pair.firstIndex(of: "="), pair[..<equals] == name else { continue }
            return String(pair[pair.index(after: equals)...])
        }
        return nil
    }
    /// The value of the first hidden `csrf_token` field of the page.
    var csrfToken: String? { capture(#"name="csrf_token" value="([^"]*)""#) }
    /// The text of the first `<h1>`.
    var heading: String? { capture(#"<h1[^>]*>([\s\S]*?)</h1>"#) }

    func capture(_ pattern: String) -> String? {
        let regex = try! NSRegularExpression(pattern: pattern)
        guard let match = regex.firstMatch(in: body, range: NSRange(body.startIndex..., in: body)), let range = Range(match.range(at: 1), in: body) else { return nil }
        return String(body[range])
    }
}

/// Values the site tests share.
enum Site {
    /// The return URL registered with the emulator and configured on every instance (Apple mode, HTTPS).
    static let returnURL = "https://app.example.com/auth/apple/callback"
    static let sessionCookie = "__Host-siwa_session"
    static let bindingCookie = "__Host-siwa_binding"
    static let ada = "000123.a1b2c3d4e5f60718293a4b5c6d7e8f90.1234"
    static let lilei = "000456.0f1e2d3c4b5a69788796a5b4c3d2e1f0.5678"
    static let grace = "000789.9a8b7c6d5e4f30211203f4e5d6c7b8a9.9012"
}

/// A running emulator and an HTTP client that does not follow redirects, to drive the emulator and the sites.
struct World: Sendable {
    let emulator: AppleIDEmulator
    let emulatorURL: String
    let http: HTTPClient

    func send(_ method: HTTPMethod, _ url: String, headers: [(String, String)] = [], body: String? = nil, contentType: String = "application/x-www-form-urlencoded", timeout: TimeAmount = .seconds(30)) async throws -> Answer {
        var request = HTTPClientRequest(url: url)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body {
            request.headers.add(name: "Content-Type", value: contentType)
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await http.execute(request, timeout: timeout)
        let bytes = try await response.body.collect(upTo: 1 << 20)
        return Answer(status: Int(response.status.code), headers: response.headers, body: String(buffer: bytes))
    }

    /// Calls the emulator's admin API.
    func admin(_ method: HTTPMethod, _ path: String, json: String? = nil) async throws -> Answer {
        let answer = try await send(method, emulatorURL + "/emulator/admin/" + path, body: json, contentType: "application/json")
        guard (200..<300).contains(answer.status) else { throw SetupError("emulator admin \(path) answered \(answer.status): \(answer.body)") }
        return answer
    }

    /// The emulator's counters (`tokenRequests`, `refreshes`, `revocations`, …).
    func counters() async throws -> [String: Int] {
        try await admin(.GET, "counters").json as? [String: Int] ?? [:]
    }

    /// Has the emulator post a notification; returns the HTTP statuses the receiver answered, one per copy.
    func notify(_ type: String, sub: String, to url: String, copies: Int = 1, clientID: String = EmulatorConfiguration.testServicesID) async throws -> (jti: String, statuses: [Int?]) {
        let body = try JSONSerialization.data(withJSONObject: ["type": type, "sub": sub, "client_id": clientID, "url": url, "copies": copies])
        let answer = try await admin(.POST, "notify", json: String(decoding: body, as: UTF8.self))
        let results = try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [[String: Any]] ?? []
        return (results.first?["id"] as? String ?? "", results.map { $0["status"] as? Int })
    }

    /// The person at Apple's consent page, headless: the fields the browser would carry back to the return URL.
    func consent(_ authorizeURL: String, user: String) async throws -> [String: String] {
        let answer = try await send(.GET, authorizeURL + "&" + FormEncoding.encode([("emulator_user", user), ("emulator_email", "share"), ("emulator_respond", "json")]))
        guard answer.status == 200, let fields = answer.json["fields"] as? [String: String] else {
            throw SetupError("headless consent failed: \(answer.status) \(answer.body)")
        }
        return fields
    }

    /// Apple mode settings for an instance on a free port, storing in `database`, sealing with `dataKeys`.
    func settings(database: String, dataKeys: [String]) throws -> ServerSettings {
        let apple = try AppleSignInConfiguration(
            teamID: EmulatorConfiguration.testTeamID, keyID: EmulatorConfiguration.testKeyID,
            servicesID: EmulatorConfiguration.testServicesID, extraAudiences: [EmulatorConfiguration.testBundleID],
            returnURLs: [Site.returnURL], privateKeyPEM: EmulatorConfiguration.testPrivateKeyPEM,
            appleBaseURL: emulatorURL
        )
        var settings = ServerSettings(mode: .apple, host: "127.0.0.1", port: 0, database: database, apple: apple, appleTimeoutMS: 5_000, dataKeys: dataKeys)
        // The tests drive refresh checks and the revocation queue themselves.
        settings.lifecycleIntervalSeconds = 3_600
        return settings
    }
}

/// Runs an emulator on a free loopback port, calls `body`, stops it.
func withWorld<T: Sendable>(_ body: (World) async throws -> T) async throws -> T {
    let emulator = try AppleIDEmulator(
        configuration: .defaults(redirectURIs: [Site.returnURL], notificationURL: nil),
        logger: Support.logger("test.emulator")
    )
    let http = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: .init(redirectConfiguration: .disallow))
    let result: Result<T, any Error>
    do {
        result = .success(try await withLiveApplication({ emulator.buildApplication(host: "127.0.0.1", port: 0, onRunning: $0) }) { port in
            try await body(World(emulator: emulator, emulatorURL: "http://127.0.0.1:\(port)", http: http))
        })
    } catch {
        result = .failure(error)
    }
    try await http.shutdown()
    return try result.get()
}

/// One running instance of the web front, reached over a real socket.
struct Instance: Sendable {
    let world: World
    let port: Int
    let settings: ServerSettings
    var baseURL: String { "http://127.0.0.1:\(port)" }

    func get(_ path: String, session: String? = nil, headers: [(String, String)] = []) async throws -> Answer {
        try await world.send(.GET, baseURL + path, headers: headers + (session.map { [("Cookie", "\(Site.sessionCookie)=\($0)")] } ?? []))
    }

    func post(_ path: String, form: [(String, String)], cookies: [String: String] = [:]) async throws -> Answer {
        let cookie = cookies.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: "; ")
        return try await world.send(.POST, baseURL + path, headers: cookie.isEmpty ? [] : [("Cookie", cookie)], body: FormEncoding.encode(form))
    }

    /// `GET /auth/apple`: the authorize URL and the binding cookie; throws on anything but the redirect.
    func start() async throws -> (authorizeURL: String, binding: String) {
        let answer = try await get("/auth/apple")
        guard answer.status == 302, let location = answer.location, let binding = answer.cookie(Site.bindingCookie) else {
            throw StepFailure(step: "start", answer: answer)
        }
        return (location, binding)
    }

    /// Apple's form_post to this instance's callback, with the binding cookie the browser holds.
    func callback(_ fields: [String: String], binding: String) async throws -> Answer {
        try await post("/auth/apple/callback", form: fields.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }, cookies: [Site.bindingCookie: binding])
    }

    /// A whole sign-in started here and completed on `finish` (this instance by default); the session cookie.
    func signIn(_ user: String = Site.ada, finishOn finish: Instance? = nil) async throws -> String {
        let (authorizeURL, binding) = try await start()
        let fields = try await world.consent(authorizeURL, user: user)
        let answer = try await (finish ?? self).callback(fields, binding: binding)
        guard answer.status == 303, let session = answer.cookie(Site.sessionCookie), !session.isEmpty else {
            throw StepFailure(step: "callback", answer: answer)
        }
        return session
    }

    /// `GET /session` with this session cookie.
    func sessionPage(_ session: String) async throws -> Answer {
        try await get("/session", session: session)
    }

    /// `siwa_notifications_total` for this type and outcome, from `/metrics`.
    func notificationCount(type: String, outcome: String) async throws -> Int {
        let text = try await get("/metrics").body
        let line = text.split(separator: "\n").first { $0.hasPrefix("siwa_notifications_total") && $0.contains("type=\"\(type)\"") && $0.contains("outcome=\"\(outcome)\"") }
        return line.flatMap { $0.split(separator: " ").last.flatMap { Double($0) } }.map { Int($0) } ?? 0
    }
}

/// A step of a sign-in did not answer as a working site does.
struct StepFailure: Error, CustomStringConvertible {
    let step: String
    let answer: Answer
    var description: String { "\(step) answered \(answer.status): \(answer.body.prefix(300))" }
}

/// Runs the application `buildApplication` makes from `settings` (with `store` when given) on a free port.
func withInstance<T: Sendable>(_ world: World, settings: ServerSettings, store: (any SignInStore)? = nil, _ body: (Instance) async throws -> T) async throws -> T {
    try await withLiveApplication({ onRunning in
        try await buildApplication(settings: settings, httpClient: .shared, store: store, logger: Support.logger("test.site"), onRunning: onRunning)
    }) { port in
        try await body(Instance(world: world, port: port, settings: settings))
    }
}

