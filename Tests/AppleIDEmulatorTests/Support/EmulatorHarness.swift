import AppleIDEmulator
import AppleSignIn
import AsyncHTTPClient
import Crypto
import Foundation
import Hummingbird
import JOSE
import Logging
import NIOCore
import NIOHTTP1
import TestSupport

/// Values every suite shares: the registered return URL and the emulator's test users.
enum Fixtures {
    static let redirectURI = "https://app.example.com/auth/apple/callback"
    static let otherRedirectURI = "https://app.example.com/auth/apple/other"
    static let notificationURL = "http://127.0.0.1:9/unused"

    static let ada = "000123.a1b2c3d4e5f60718293a4b5c6d7e8f90.1234"
    static let lilei = "000456.0f1e2d3c4b5a69788796a5b4c3d2e1f0.5678"
    static let grace = "000789.9a8b7c6d5e4f30211203f4e5d6c7b8a9.9012"
    static let adaEmail = "ada@example.com"
    static let adaRelay = "x7kq2m9p4t@privaterelay.appleid.com"

    /// The defaults with our return URLs, changed by `adjust`.
    static func configuration(_ adjust: (inout EmulatorConfiguration) -> Void = { _ in }) -> EmulatorConfiguration {
        var configuration = EmulatorConfiguration.defaults(redirectURIs: [redirectURI, otherRedirectURI], notificationURL: notificationURL)
        adjust(&configuration)
        return configuration
    }

    /// The built-in test clients' private key, to sign client secrets by hand.
    static let testKey = try! P256.Signing.PrivateKey(pemRepresentation: EmulatorConfiguration.testPrivateKeyPEM)

    /// A logger that stays quiet (failures the tests provoke on purpose would fill the output) unless
    /// SIWA_TEST_EMULATOR_LOG is set.
    static func logger(_ label: String) -> Logger {
        var logger = Logger(label: label)
        logger.logLevel = ProcessInfo.processInfo.environment["SIWA_TEST_EMULATOR_LOG"] == nil ? .critical : .debug
        return logger
    }

    static func randomString() -> String { UUID().uuidString.lowercased() }
}

/// What a client sees of one HTTP answer.
struct HTTPAnswer: Sendable {
    var status: Int
    /// Header fields by lower-cased name; a repeated field's values joined with ", ".
    var headers: [String: String]
    var body: String

    /// The body as a JSON object (tests force the shape they expect).
    var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] ?? [:] }
    /// The body as a JSON array.
    var jsonArray: [[String: Any]] { (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [[String: Any]] ?? [] }
}

/// A running emulator on 127.0.0.1 and a plain HTTP client (redirects not followed) to talk to it.
struct EmulatorHarness: Sendable {
    let emulator: AppleIDEmulator
    let port: Int
    let baseURL: String
    let http: HTTPClient

    // MARK: plain HTTP

    func request(_ method: HTTPMethod, _ path: String, body: String? = nil, contentType: String? = nil) async throws -> HTTPAnswer {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = method
        if let body {
            request.body = .bytes(ByteBuffer(string: body))
            request.headers.add(name: "Content-Type", value: contentType ?? "application/json")
        }
        // Long: an admin call may itself deliver (a notification to a port that refuses), and under the full suite's
        // load on two cores 15 s ran out once; the tests are about what the emulator does, not how fast.
        let response = try await http.execute(request, timeout: .seconds(60))
        let bytes = try await response.body.collect(upTo: 1024 * 1024)
        var headers: [String: String] = [:]
        for header in response.headers {
            // Repeated fields are combined as HTTP says they may be.
            let name = header.name.lowercased()
            headers[name] = headers[name].map { $0 + ", " + header.value } ?? header.value
        }
        return HTTPAnswer(status: Int(response.status.code), headers: headers, body: String(buffer: bytes))
    }

    func get(_ path: String) async throws -> HTTPAnswer { try await request(.GET, path) }

    func post(_ path: String, form: [(String, String)]) async throws -> HTTPAnswer {
        try await request(.POST, path, body: FormEncoding.encode(form), contentType: "application/x-www-form-urlencoded")
    }

    /// Calls the admin API with a JSON body.
    func admin(_ method: HTTPMethod, _ path: String, json: String? = nil) async throws -> HTTPAnswer {
        try await request(method, "/emulator/admin/" + path, body: json)
    }

    /// Injects a fault into one endpoint.
    func fault(_ endpoint: String, _ json: String) async throws {
        let answer = try await admin(.PUT, "faults/" + endpoint, json: json)
        precondition(answer.status == 200, "fault injection refused: \(answer.status) \(answer.body)")
    }

    // MARK: authorize

    /// The query of an authorization request for the web client with the given changes.
    static func authorizeQuery(
        clientID: String = EmulatorConfiguration.testServicesID,
        redirectURI: String = Fixtures.redirectURI,
        responseType: String? = "code id_token",
        responseMode: String? = "form_post",
        scope: String? = "name email",
        state: String? = nil,
        nonce: String? = nil,
        extra: [(String, String)] = []
    ) -> String {
        var pairs: [(String, String)] = [("client_id", clientID), ("redirect_uri", redirectURI)]
        if let responseType { pairs.append(("response_type", responseType)) }
        if let responseMode { pairs.append(("response_mode", responseMode)) }
        if let scope { pairs.append(("scope", scope)) }
        if let state { pairs.append(("state", state)) }
        if let nonce { pairs.append(("nonce", nonce)) }
        return FormEncoding.encode(pairs + extra)
    }

    /// A headless sign-in answered as JSON: the fields the browser would carry to the return URL.
    func authorize(
        user: String = Fixtures.ada,
        email: String = "share",
        action: String = "continue",
        firstName: String? = nil,
        scope: String? = "name email",
        redirectURI: String = Fixtures.redirectURI,
        state: String = Fixtures.randomString(),
        nonce: String? = Fixtures.randomString()
    ) async throws -> [String: String] {
        var extra = [("emulator_user", user), ("emulator_email", email), ("emulator_action", action), ("emulator_respond", "json")]
        if let firstName { extra.append(("emulator_first_name", firstName)) }
        let query = Self.authorizeQuery(redirectURI: redirectURI, scope: scope, state: state, nonce: nonce, extra: extra)
        let answer = try await get("/auth/authorize?" + query)
        precondition(answer.status == 200, "headless authorize failed: \(answer.status) \(answer.body)")
        return answer.json["fields"] as? [String: String] ?? [:]
    }

    // MARK: AppleSignIn clients pointed at the emulator

    /// The core library's configuration for the built-in web client, with the given key.
    func configuration(
        keyID: String = EmulatorConfiguration.testKeyID,
        privateKeyPEM: String = EmulatorConfiguration.testPrivateKeyPEM
    ) throws -> AppleSignInConfiguration {
        try AppleSignInConfiguration(
            teamID: EmulatorConfiguration.testTeamID,
            keyID: keyID,
            servicesID: EmulatorConfiguration.testServicesID,
            extraAudiences: [EmulatorConfiguration.testBundleID],
            returnURLs: [Fixtures.redirectURI, Fixtures.otherRedirectURI],
            privateKeyPEM: privateKeyPEM,
            appleBaseURL: baseURL
        )
    }

    /// AppleSignIn's token/revoke client for the built-in web client.
    /// `timeout` is a test's patience, not the product's (AppleIDClient's own default is 10 s): under the whole suite's
    /// load a first call to a fresh emulator took over 10 s once (a fresh clone's run, RefreshAndRevokeTests), and a
    /// test that asserts what the call answers must not fail for a slow machine. The fault tests pass their own.
    func appleClient(
        timeout: TimeAmount = .seconds(60),
        keyID: String = EmulatorConfiguration.testKeyID,
        privateKeyPEM: String = EmulatorConfiguration.testPrivateKeyPEM
    ) throws -> AppleIDClient {
        let configuration = try configuration(keyID: keyID, privateKeyPEM: privateKeyPEM)
        return AppleIDClient(
            configuration: configuration, httpClient: .shared, secrets: ClientSecretSigner(configuration: configuration),
            timeout: timeout, logger: Fixtures.logger("test-apple-client")
        )
    }

    /// A key set reading the emulator's `/auth/keys`; `refetchAtOnce` lets an unknown `kid` refetch immediately.
    func keySet(refetchAtOnce: Bool = false) -> AppleKeySet {
        var policy = AppleKeySet.Policy()
        if refetchAtOnce {
            policy.unknownKeyRefetchInterval = 0
            policy.retryAfterFailure = 0
        }
        return AppleKeySet(
            source: .remote(URL(string: baseURL + "/auth/keys")!, HTTPClient.shared, timeout: .seconds(60)),
            policy: policy, logger: Fixtures.logger("test-key-set")
        )
    }

    /// AppleSignIn's identity token verifier trusting the emulator as issuer.
    func identityVerifier(keySet: AppleKeySet? = nil) throws -> IdentityTokenVerifier {
        IdentityTokenVerifier(
            keySet: keySet ?? self.keySet(),
            audiences: [try ClientID(EmulatorConfiguration.testServicesID), try ClientID(EmulatorConfiguration.testBundleID)],
            issuers: [emulator.issuer]
        )
    }

    /// A client secret signed by hand, so tests can break one claim at a time.
    static func clientSecret(
        kid: String = EmulatorConfiguration.testKeyID,
        iss: String = EmulatorConfiguration.testTeamID,
        sub: String = EmulatorConfiguration.testServicesID,
        aud: String = "https://appleid.apple.com",
        issuedAt: Date = Date(),
        lifetime: TimeInterval = 3600,
        key: P256.Signing.PrivateKey = Fixtures.testKey
    ) throws -> String {
        struct Claims: Encodable {
            var iss: String
            var iat: Int
            var exp: Int
            var aud: String
            var sub: String
        }
        let iat = Int(issuedAt.timeIntervalSince1970)
        let claims = Claims(iss: iss, iat: iat, exp: iat + Int(lifetime), aud: aud, sub: sub)
        return try JWTSigning.es256(header: ["alg": "ES256", "kid": kid], claims: claims, key: key)
    }
}

/// Runs an emulator on 127.0.0.1 on a free port, calls `body` with it, then stops it.
func withEmulator<Value: Sendable>(
    _ configuration: EmulatorConfiguration = Fixtures.configuration(),
    initialKeys: Int = 2,
    _ body: (EmulatorHarness) async throws -> Value
) async throws -> Value {
    let emulator = try AppleIDEmulator(configuration: configuration, initialKeys: initialKeys, logger: Fixtures.logger("test-emulator"))
    let http = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: .init(redirectConfiguration: .disallow))
    let result: Result<Value, any Error>
    do {
        result = .success(try await withLiveApplication({ emulator.buildApplication(host: "127.0.0.1", port: 0, onRunning: $0) }) { port in
            guard let baseURL = emulator.baseURL else { throw LiveServerError.didNotStart("the emulator has no base URL") }
            return try await body(EmulatorHarness(emulator: emulator, port: port, baseURL: baseURL, http: http))
        })
    } catch {
        result = .failure(error)
    }
    try await http.shutdown()
    return try result.get()
}

