import AppleIDEmulator
import AppleSignIn
import Foundation
import Testing

/// The refresh grant and `POST /auth/revoke`.
@Suite("Refresh and revoke")
struct RefreshAndRevokeTests {
    static let redirectURL = URL(string: Fixtures.redirectURI)!

    /// Signs Ada in and exchanges the code; returns the tokens.
    static func signIn(_ emulator: EmulatorHarness, user: String = Fixtures.ada) async throws -> TokenResponse {
        let code = try await emulator.authorize(user: user)["code"]!
        return try await emulator.appleClient().exchange(code: code, redirectURI: redirectURL)
    }

    @Test("the refresh grant returns a new id_token and access token but no refresh token")
    func refresh() async throws {
        try await withEmulator { emulator async throws in
            let tokens = try await Self.signIn(emulator)
            let refreshed = try await emulator.appleClient().refresh(refreshToken: tokens.refreshToken!)
            #expect(refreshed.refreshToken == nil)
            #expect(!refreshed.accessToken.isEmpty)
            #expect(refreshed.accessToken != tokens.accessToken)
            let identity = try await emulator.identityVerifier().verify(try #require(refreshed.idToken))
            #expect(identity.subject == Fixtures.ada)
            // The refresh token stays usable.
            _ = try await emulator.appleClient().refresh(refreshToken: tokens.refreshToken!)
        }
    }

    @Test("an unknown refresh token, or one of another client, is invalid_grant")
    func unknownRefreshToken() async throws {
        try await withEmulator { emulator async throws in
            let client = try emulator.appleClient()
            let unknown = await appleIDClientError { _ = try await client.refresh(refreshToken: "r-made-up") }
            #expect(unknown?.kind == .invalidGrant)
            let tokens = try await Self.signIn(emulator)
            let otherClient = await appleIDClientError {
                _ = try await client.refresh(refreshToken: tokens.refreshToken!, clientID: ClientID(EmulatorConfiguration.testBundleID))
            }
            #expect(otherClient?.kind == .invalidGrant)
        }
    }

    @Test("after revoke the refresh token is invalid_grant", arguments: [AppleIDClient.TokenTypeHint.refreshToken, .accessToken])
    func revokeInvalidatesRefreshToken(hint: AppleIDClient.TokenTypeHint) async throws {
        try await withEmulator { emulator async throws in
            let client = try emulator.appleClient()
            let tokens = try await Self.signIn(emulator)
            let revoked = hint == .refreshToken ? tokens.refreshToken! : tokens.accessToken
            try await client.revoke(token: revoked, hint: hint)
            let error = await appleIDClientError { _ = try await client.refresh(refreshToken: tokens.refreshToken!) }
            #expect(error?.kind == .invalidGrant)
        }
    }

    @Test("revoke answers 200 even for garbage and for tokens already revoked")
    func revokeAlwaysSucceeds() async throws {
        try await withEmulator { emulator async throws in
            let client = try emulator.appleClient()
            try await client.revoke(token: "garbage-\(UUID())")
            let tokens = try await Self.signIn(emulator)
            try await client.revoke(token: tokens.refreshToken!)
            try await client.revoke(token: tokens.refreshToken!)
            let raw = try await emulator.post("/auth/revoke", form: [
                ("client_id", EmulatorConfiguration.testServicesID), ("client_secret", try EmulatorHarness.clientSecret()),
                ("token", "not a token at all"), ("token_type_hint", "refresh_token"),
            ])
            #expect(raw.status == 200)
            #expect(raw.body.isEmpty)
        }
    }

    @Test("revoke checks the client first: no client credentials is invalid_client, then a missing token is invalid_request")
    func revokeErrorOrder() async throws {
        try await withEmulator { emulator async throws in
            let noClient = try await emulator.post("/auth/revoke", form: [("token_type_hint", "refresh_token")])
            #expect(noClient.status == 400)
            #expect(noClient.json["error"] as? String == "invalid_client")
            let noToken = try await emulator.post("/auth/revoke", form: [
                ("client_id", EmulatorConfiguration.testServicesID), ("client_secret", try EmulatorHarness.clientSecret()),
            ])
            #expect(noToken.status == 400)
            #expect(noToken.json["error"] as? String == "invalid_request")
        }
    }

    @Test("revoke with a bad client secret is invalid_client")
    func revokeChecksClient() async throws {
        try await withEmulator { emulator async throws in
            let answer = try await emulator.post("/auth/revoke", form: [
                ("client_id", EmulatorConfiguration.testServicesID), ("client_secret", try EmulatorHarness.clientSecret(sub: "com.example.other")),
                ("token", "t"),
            ])
            #expect(answer.status == 400)
            #expect(answer.json["error"] as? String == "invalid_client")
        }
    }

    @Test("revoking another client's token does not revoke it")
    func revokeIsPerClient() async throws {
        try await withEmulator { emulator async throws in
            let client = try emulator.appleClient()
            let tokens = try await Self.signIn(emulator)
            try await client.revoke(token: tokens.refreshToken!, clientID: ClientID(EmulatorConfiguration.testBundleID))
            _ = try await client.refresh(refreshToken: tokens.refreshToken!)
        }
    }

    @Test("revoke resets consent: the next sign-in sends user again")
    func revokeResetsConsent() async throws {
        try await withEmulator { emulator async throws in
            let first = try await emulator.authorize(user: Fixtures.ada)
            #expect(first["user"] != nil)
            let tokens = try await emulator.appleClient().exchange(code: first["code"]!, redirectURI: Self.redirectURL)
            #expect(try await emulator.authorize(user: Fixtures.ada)["user"] == nil)

            try await emulator.appleClient().revoke(token: tokens.refreshToken!)
            let again = try await emulator.authorize(user: Fixtures.ada)
            #expect(Decode.user(again["user"])?.firstName == "Ada")
            // And only once more.
            #expect(try await emulator.authorize(user: Fixtures.ada)["user"] == nil)
        }
    }

    @Test("revoking one user's token leaves other users' consent alone")
    func revokeIsPerUser() async throws {
        try await withEmulator { emulator async throws in
            _ = try await emulator.authorize(user: Fixtures.grace)
            let tokens = try await Self.signIn(emulator, user: Fixtures.ada)
            try await emulator.appleClient().revoke(token: tokens.refreshToken!)
            #expect(try await emulator.authorize(user: Fixtures.grace)["user"] == nil)
            #expect(try await emulator.authorize(user: Fixtures.ada)["user"] != nil)
        }
    }
}
