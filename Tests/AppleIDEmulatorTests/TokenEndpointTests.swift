import AppleIDEmulator
import AppleSignIn
import Crypto
import Foundation
import JOSE
import Testing

/// `POST /auth/token` as AppleSignIn's `AppleIDClient` (and a hand-made form, to break one thing at a time) sees it.
@Suite("Token endpoint")
struct TokenEndpointTests {
    static let redirectURL = URL(string: Fixtures.redirectURI)!

    @Test("a code exchanges for access_token, refresh_token and a verifiable id_token")
    func exchange() async throws {
        try await withEmulator { emulator async throws in
            let fields = try await emulator.authorize(user: Fixtures.ada, email: "hide", nonce: "ex-nonce")
            let tokens = try await emulator.appleClient().exchange(code: fields["code"]!, redirectURI: Self.redirectURL)
            #expect(!tokens.accessToken.isEmpty)
            #expect(tokens.tokenType.lowercased() == "bearer")
            #expect(tokens.expiresIn == 3600)
            #expect(tokens.refreshToken?.isEmpty == false)
            let idToken = try #require(tokens.idToken)
            let identity = try await emulator.identityVerifier().verify(idToken, nonce: "ex-nonce")
            #expect(identity.subject == Fixtures.ada)
            #expect(identity.email == Fixtures.adaRelay)
            #expect(identity.isPrivateEmail == true)
            // at_hash binds the id_token to the access token issued with it (left half of its SHA-256, base64url).
            let payload = try #require(Base64URL.decode(idToken.split(separator: ".")[1]))
            let claims = try #require(try JSONSerialization.jsonObject(with: payload) as? [String: Any])
            let digest = Array(SHA256.hash(data: Data(tokens.accessToken.utf8)))
            #expect(claims["at_hash"] as? String == Base64URL.encode(digest.prefix(16)))
            #expect(claims["c_hash"] == nil, "c_hash belongs to front-channel tokens")
        }
    }

    @Test("the same code twice is invalid_grant")
    func codeIsSingleUse() async throws {
        try await withEmulator { emulator async throws in
            let client = try emulator.appleClient()
            let code = try await emulator.authorize()["code"]!
            _ = try await client.exchange(code: code, redirectURI: Self.redirectURL)
            let error = await appleIDClientError { _ = try await client.exchange(code: code, redirectURI: Self.redirectURL) }
            #expect(error?.kind == .invalidGrant)
            #expect(error?.appleCode == "invalid_grant")
        }
    }

    @Test("a code exchanged with another registered redirect_uri, or none, is invalid_grant")
    func redirectMustMatch() async throws {
        try await withEmulator { emulator async throws in
            let client = try emulator.appleClient()
            let code = try await emulator.authorize(redirectURI: Fixtures.redirectURI)["code"]!
            let other = await appleIDClientError { _ = try await client.exchange(code: code, redirectURI: URL(string: Fixtures.otherRedirectURI)) }
            #expect(other?.kind == .invalidGrant)
            let missing = await appleIDClientError { _ = try await client.exchange(code: code, redirectURI: nil) }
            #expect(missing?.kind == .invalidGrant)
            let slash = await appleIDClientError { _ = try await client.exchange(code: code, redirectURI: URL(string: Fixtures.redirectURI + "/")) }
            #expect(slash?.kind == .invalidGrant)
        }
    }

    @Test("an unknown code is invalid_grant")
    func unknownCode() async throws {
        try await withEmulator { emulator async throws in
            let error = await appleIDClientError { _ = try await emulator.appleClient().exchange(code: "c0ffee.0.emu.made-up", redirectURI: Self.redirectURL) }
            #expect(error?.kind == .invalidGrant)
        }
    }

    @Test("an expired code is invalid_grant")
    func expiredCode() async throws {
        try await withEmulator(Fixtures.configuration { $0.codeLifetime = 1 }) { emulator in
            let code = try await emulator.authorize()["code"]!
            try await Task.sleep(for: .seconds(2))
            let error = await appleIDClientError { _ = try await emulator.appleClient().exchange(code: code, redirectURI: Self.redirectURL) }
            #expect(error?.kind == .invalidGrant)
        }
    }

    @Test("a web client's code exchanged by the bundle-ID client is invalid_grant")
    func codeForAnotherClient() async throws {
        try await withEmulator { emulator async throws in
            let client = try emulator.appleClient()
            let code = try await emulator.authorize()["code"]!
            let error = await appleIDClientError {
                _ = try await client.exchange(code: code, redirectURI: Self.redirectURL, clientID: ClientID(EmulatorConfiguration.testBundleID))
            }
            #expect(error?.kind == .invalidGrant)
        }
    }

    @Test("a client secret signed by another key is invalid_client")
    func secretFromAnotherKey() async throws {
        try await withEmulator { emulator async throws in
            let code = try await emulator.authorize()["code"]!
            let forger = try emulator.appleClient(privateKeyPEM: P256.Signing.PrivateKey().pemRepresentation)
            let error = await appleIDClientError { _ = try await forger.exchange(code: code, redirectURI: Self.redirectURL) }
            #expect(error?.kind == .invalidClient)
            // The code is still good for the real client.
            _ = try await emulator.appleClient().exchange(code: code, redirectURI: Self.redirectURL)
        }
    }

    @Test("a client secret naming another key id is invalid_client")
    func secretWithWrongKeyID() async throws {
        try await withEmulator { emulator async throws in
            let code = try await emulator.authorize()["code"]!
            let client = try emulator.appleClient(keyID: "WRONGKEY01")
            let error = await appleIDClientError { _ = try await client.exchange(code: code, redirectURI: Self.redirectURL) }
            #expect(error?.kind == .invalidClient)
        }
    }

    /// A client secret broken in one way.
    struct BrokenSecret: Sendable, CustomTestStringConvertible {
        var name: String
        var make: @Sendable () throws -> String
        var testDescription: String { name }
    }

    static let brokenSecrets: [BrokenSecret] = [
        BrokenSecret(name: "sub differs from client_id") { try EmulatorHarness.clientSecret(sub: EmulatorConfiguration.testBundleID) },
        BrokenSecret(name: "iss is another team") { try EmulatorHarness.clientSecret(iss: "OTHERTEAM1") },
        BrokenSecret(name: "aud is not appleid.apple.com") { try EmulatorHarness.clientSecret(aud: "https://example.com") },
        BrokenSecret(name: "expired") { try EmulatorHarness.clientSecret(issuedAt: Date().addingTimeInterval(-7200), lifetime: 3600) },
        BrokenSecret(name: "lifetime longer than six months") { try EmulatorHarness.clientSecret(lifetime: 15_777_000 + 3600) },
        BrokenSecret(name: "kid of no registered key") { try EmulatorHarness.clientSecret(kid: "WRONGKEY01") },
        BrokenSecret(name: "signed by another key") { try EmulatorHarness.clientSecret(key: P256.Signing.PrivateKey()) },
        BrokenSecret(name: "not a JWT") { "not-a-jwt" },
    ]

    @Test("a broken client secret is invalid_client, while a good one for the same code succeeds", arguments: brokenSecrets)
    func brokenSecret(_ broken: BrokenSecret) async throws {
        try await withEmulator { emulator async throws in
            let code = try await emulator.authorize()["code"]!
            func form(_ secret: String) -> [(String, String)] {
                [("client_id", EmulatorConfiguration.testServicesID), ("client_secret", secret), ("code", code),
                 ("grant_type", "authorization_code"), ("redirect_uri", Fixtures.redirectURI)]
            }
            let refused = try await emulator.post("/auth/token", form: form(try broken.make()))
            #expect(refused.status == 400)
            #expect(refused.json["error"] as? String == "invalid_client")
            let accepted = try await emulator.post("/auth/token", form: form(try EmulatorHarness.clientSecret()))
            #expect(accepted.status == 200, "\(accepted.body)")
            #expect(accepted.json["id_token"] is String)
        }
    }

    @Test("a secret valid for exactly six months is accepted")
    func sixMonthSecret() async throws {
        try await withEmulator { emulator async throws in
            let code = try await emulator.authorize()["code"]!
            let answer = try await emulator.post("/auth/token", form: [
                ("client_id", EmulatorConfiguration.testServicesID), ("client_secret", try EmulatorHarness.clientSecret(lifetime: 15_777_000)),
                ("code", code), ("grant_type", "authorization_code"), ("redirect_uri", Fixtures.redirectURI),
            ])
            #expect(answer.status == 200)
        }
    }

    @Test("an unknown client_id is invalid_client")
    func unknownClient() async throws {
        try await withEmulator { emulator async throws in
            let answer = try await emulator.post("/auth/token", form: [
                ("client_id", "com.example.unknown"), ("client_secret", try EmulatorHarness.clientSecret(sub: "com.example.unknown")),
                ("code", "x"), ("grant_type", "authorization_code"),
            ])
            #expect(answer.status == 400)
            #expect(answer.json["error"] as? String == "invalid_client")
        }
    }

    /// A request with a good secret and one thing wrong, and Apple's answer to it.
    struct BadGrant: Sendable, CustomTestStringConvertible {
        var name: String
        var fields: [String: String]
        var expectedError: String
        var testDescription: String { name }
    }

    static let badGrants: [BadGrant] = [
        BadGrant(name: "unknown grant_type", fields: ["grant_type": "password", "username": "ada", "password": "x"], expectedError: "unsupported_grant_type"),
        BadGrant(name: "grant_type missing", fields: ["code": "x"], expectedError: "invalid_request"),
        BadGrant(name: "code missing", fields: ["grant_type": "authorization_code", "redirect_uri": Fixtures.redirectURI], expectedError: "invalid_request"),
        BadGrant(name: "refresh_token missing", fields: ["grant_type": "refresh_token"], expectedError: "invalid_request"),
        BadGrant(name: "client_credentials with another scope", fields: ["grant_type": "client_credentials", "scope": "openid"], expectedError: "invalid_scope"),
        BadGrant(name: "client_credentials without scope", fields: ["grant_type": "client_credentials"], expectedError: "invalid_scope"),
    ]

    @Test("requests Apple refuses get Apple's error code with HTTP 400", arguments: badGrants)
    func badGrant(_ bad: BadGrant) async throws {
        try await withEmulator { emulator async throws in
            var form = [("client_id", EmulatorConfiguration.testServicesID), ("client_secret", try EmulatorHarness.clientSecret())]
            form += bad.fields.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
            let answer = try await emulator.post("/auth/token", form: form)
            #expect(answer.status == 400)
            #expect(answer.headers["content-type"]?.hasPrefix("application/json") == true)
            #expect(answer.json["error"] as? String == bad.expectedError)
        }
    }

    @Test("client authentication comes first: without good client credentials every request is invalid_client, whatever else is wrong", arguments: [
        [("grant_type", "password")],
        [("code", "x")],
        [("grant_type", "authorization_code")],
        [("grant_type", "refresh_token"), ("refresh_token", "r")],
    ])
    func clientAuthenticationFirst(_ fields: [(String, String)]) async throws {
        try await withEmulator { emulator async throws in
            let missing = try await emulator.post("/auth/token", form: fields)
            #expect(missing.status == 400)
            #expect(missing.json["error"] as? String == "invalid_client", "no client credentials: \(missing.body)")
            let secretOnly = try await emulator.post("/auth/token", form: [("client_secret", try EmulatorHarness.clientSecret())] + fields)
            #expect(secretOnly.json["error"] as? String == "invalid_client")
            let badSecret = try await emulator.post("/auth/token", form: [("client_id", EmulatorConfiguration.testServicesID), ("client_secret", "not-a-jwt")] + fields)
            #expect(badSecret.json["error"] as? String == "invalid_client")
        }
    }

    @Test("client_credentials with scope user.migration returns a bearer token and no id_token")
    func migrationToken() async throws {
        try await withEmulator { emulator async throws in
            let answer = try await emulator.post("/auth/token", form: [
                ("client_id", EmulatorConfiguration.testServicesID), ("client_secret", try EmulatorHarness.clientSecret()),
                ("grant_type", "client_credentials"), ("scope", "user.migration"),
            ])
            #expect(answer.status == 200)
            #expect(answer.json["access_token"] is String)
            #expect(answer.json["id_token"] == nil)
            #expect(answer.json["refresh_token"] == nil)
        }
    }

    @Test("a client with Sign in with Apple disabled is unauthorized_client")
    func disabledClient() async throws {
        let configuration = Fixtures.configuration { configuration in
            var disabled = configuration.clients[0]
            disabled.clientID = "com.example.disabled"
            disabled.enabled = false
            configuration.clients.append(disabled)
        }
        try await withEmulator(configuration) { emulator async throws in
            let error = await appleIDClientError {
                _ = try await emulator.appleClient().exchange(code: "any", redirectURI: Self.redirectURL, clientID: ClientID("com.example.disabled"))
            }
            #expect(error?.kind == .unauthorizedClient)
            #expect(error?.appleCode == "unauthorized_client")
        }
    }
}
