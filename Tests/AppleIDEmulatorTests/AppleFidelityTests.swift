import AppleIDEmulator
import AppleSignIn
import Foundation
import Testing

/// What a client that follows Apple's documentation sees of the emulator is what it would see of Apple
/// (APPLE.md §10): the issuer, the claim types, the lifetimes, the shapes of codes, tokens and key ids, the
/// discovery document, and `transfer_sub` after a team transfer.
@Suite("Fidelity to Apple")
struct AppleFidelityTests {
    /// `c`/`a`/`r` + 32 lowercase hex + `.0.` + 4–5 lowercase letters + `.` + 22 base64url characters.
    static func hasAppleShape(_ value: String, prefix: Character) -> Bool {
        value.wholeMatch(of: /[car][0-9a-f]{32}\.0\.[a-z]{4,5}\.[A-Za-z0-9_-]{22}/) != nil && value.first == prefix
    }

    @Test("everything it signs has Apple's issuer by default; a test may ask for its own URL instead")
    func issuer() async throws {
        try await withEmulator(initialKeys: 1) { emulator async throws in
            let token = try #require(try await emulator.authorize()["id_token"])
            #expect(Decode.jwtClaims(token)["iss"] as? String == "https://appleid.apple.com")
            let notification = try await emulator.emulator.signNotification(type: "consent-revoked", subject: Fixtures.ada, clientID: EmulatorConfiguration.testServicesID)
            #expect(Decode.jwtClaims(notification.jws)["iss"] as? String == "https://appleid.apple.com")
        }
        try await withEmulator(Fixtures.configuration { $0.issuer = EmulatorConfiguration.ownURLIssuer }, initialKeys: 1) { emulator async throws in
            let token = try #require(try await emulator.authorize()["id_token"])
            #expect(Decode.jwtClaims(token)["iss"] as? String == emulator.baseURL)
        }
    }

    @Test("claims are typed as in 2025 tokens: booleans as JSON booleans, auth_time, c_hash in front and at_hash from the token endpoint")
    func claimTypes() async throws {
        try await withEmulator(initialKeys: 1) { emulator async throws in
            let fields = try await emulator.authorize(email: "hide", nonce: "n")
            let front = Decode.jwtClaims(try #require(fields["id_token"]))
            // (That they are JSON booleans and not strings on the wire: booleansOnTheWire.)
            for name in ["email_verified", "is_private_email", "nonce_supported"] {
                #expect(front[name] as? Bool != nil, "\(name) is missing or not a boolean")
            }
            #expect(front["is_private_email"] as? Bool == true)
            #expect(front["auth_time"] is Int)
            #expect(front["c_hash"] is String)
            #expect(front["at_hash"] == nil)
            #expect(front["real_user_status"] == nil, "web sign-ins carry no real_user_status")

            let tokens = try await emulator.appleClient().exchange(code: try #require(fields["code"]), redirectURI: URL(string: Fixtures.redirectURI))
            let back = Decode.jwtClaims(try #require(tokens.idToken))
            #expect(back["at_hash"] as? String == IdentityTokenVerifier.codeHash(tokens.accessToken))
            #expect(back["c_hash"] == nil)
            #expect(back["email_verified"] as? Bool == true)

            // Without the email scope there are no email claims at all.
            let noEmail = Decode.jwtClaims(try #require(try await emulator.authorize(scope: "name")["id_token"]))
            #expect(noEmail["email"] == nil && noEmail["email_verified"] == nil && noEmail["is_private_email"] == nil)
        }
    }

    @Test("JSON booleans in the raw token text, not strings")
    func booleansOnTheWire() async throws {
        try await withEmulator(initialKeys: 1) { emulator async throws in
            let token = try #require(try await emulator.authorize()["id_token"])
            let payload = String(decoding: try #require(JOSEPart.decode(token, part: 1)), as: UTF8.self)
            #expect(payload.contains(#""email_verified":true"#))
            #expect(payload.contains(#""is_private_email":false"#))
            #expect(payload.contains(#""nonce_supported":true"#))
        }
    }

    @Test("a native sign-in's token carries real_user_status 2 and c_hash")
    func nativeToken() async throws {
        try await withEmulator(initialKeys: 1) { emulator async throws in
            let native = try await emulator.emulator.nativeAuthorization(.init(clientID: EmulatorConfiguration.testBundleID, sub: Fixtures.ada, nonce: "n", hideEmail: false))
            let claims = Decode.jwtClaims(native.identityToken)
            #expect(claims["real_user_status"] as? Int == 2)
            #expect(claims["c_hash"] as? String == IdentityTokenVerifier.codeHash(native.authorizationCode))
        }
    }

    @Test("lifetimes are Apple's: id_token a day, access token an hour, code five minutes and single use")
    func lifetimes() async throws {
        try await withEmulator(initialKeys: 1) { emulator async throws in
            let fields = try await emulator.authorize()
            let front = Decode.jwtClaims(try #require(fields["id_token"]))
            let iat = try #require(front["iat"] as? Int)
            #expect(try #require(front["exp"] as? Int) - iat == 86_400)
            #expect(emulator.emulator.configuration.codeLifetime == 300)
            let answer = try await emulator.post("/auth/token", form: [
                ("client_id", EmulatorConfiguration.testServicesID), ("client_secret", try EmulatorHarness.clientSecret()),
                ("grant_type", "authorization_code"), ("code", try #require(fields["code"])), ("redirect_uri", Fixtures.redirectURI),
            ])
            #expect(answer.status == 200)
            #expect(answer.json["expires_in"] as? Int == 3600)
            #expect(answer.json["token_type"] as? String == "Bearer")
            let back = Decode.jwtClaims(try #require(answer.json["id_token"] as? String))
            #expect(try #require(back["exp"] as? Int) - (try #require(back["iat"] as? Int)) == 86_400)
        }
    }

    @Test("codes, access and refresh tokens and key ids have Apple's shapes, with random content")
    func shapes() async throws {
        try await withEmulator(initialKeys: 1) { emulator async throws in
            let first = try await emulator.authorize()
            let second = try await emulator.authorize()
            let code = try #require(first["code"])
            #expect(Self.hasAppleShape(code, prefix: "c"), "code \(code)")
            #expect(code != second["code"])
            let tokens = try await emulator.appleClient().exchange(code: code, redirectURI: URL(string: Fixtures.redirectURI))
            #expect(Self.hasAppleShape(tokens.accessToken, prefix: "a"), "access token \(tokens.accessToken)")
            let refresh = try #require(tokens.refreshToken)
            #expect(Self.hasAppleShape(refresh, prefix: "r"), "refresh token")
            let keys = try await emulator.get("/auth/keys").json["keys"] as? [[String: Any]] ?? []
            #expect(!keys.isEmpty)
            for kid in keys.compactMap({ $0["kid"] as? String }) {
                #expect(kid.wholeMatch(of: /[A-Za-z0-9]{6,10}/) != nil, "kid \(kid)")
            }
        }
    }

    @Test("/.well-known/openid-configuration has the members of Apple's document, pointing at the emulator")
    func discovery() async throws {
        try await withEmulator(initialKeys: 1) { emulator async throws in
            let answer = try await emulator.get("/.well-known/openid-configuration")
            #expect(answer.status == 200)
            #expect(answer.headers["content-type"]?.hasPrefix("application/json") == true)
            let document = answer.json
            #expect(document["issuer"] as? String == "https://appleid.apple.com")
            #expect(document["authorization_endpoint"] as? String == emulator.baseURL + "/auth/authorize")
            #expect(document["token_endpoint"] as? String == emulator.baseURL + "/auth/token")
            #expect(document["revocation_endpoint"] as? String == emulator.baseURL + "/auth/revoke")
            #expect(document["jwks_uri"] as? String == emulator.baseURL + "/auth/keys")
            #expect(document["response_types_supported"] as? [String] == ["code"])
            #expect(document["response_modes_supported"] as? [String] == ["query", "fragment", "form_post"])
            #expect(document["subject_types_supported"] as? [String] == ["pairwise"])
            #expect(document["id_token_signing_alg_values_supported"] as? [String] == ["RS256"])
            #expect(document["scopes_supported"] as? [String] == ["openid", "email", "name"])
            #expect(document["token_endpoint_auth_methods_supported"] as? [String] == ["client_secret_post"])
            let claims = try #require(document["claims_supported"] as? [String])
            #expect(Set(["sub", "email", "email_verified", "is_private_email", "nonce", "transfer_sub", "real_user_status"]).isSubset(of: Set(claims)))
            // The endpoints it names work.
            #expect(try await emulator.get("/auth/keys").status == 200)
        }
    }

    @Test("after a team-transfer lookup at /auth/usermigrationinfo, that user's id_tokens carry transfer_sub")
    func transferSubject() async throws {
        try await withEmulator(initialKeys: 1) { emulator async throws in
            let before = Decode.jwtClaims(try #require(try await emulator.authorize(user: Fixtures.ada)["id_token"]))
            #expect(before["transfer_sub"] == nil)
            let client = try emulator.appleClient()
            let bearer = try await client.migrationAccessToken()
            let transfer = try await client.transferSubject(for: Fixtures.ada, targetTeam: try TeamID("NEWTEAM001"), accessToken: bearer)
            let fields = try await emulator.authorize(user: Fixtures.ada)
            #expect(Decode.jwtClaims(try #require(fields["id_token"]))["transfer_sub"] as? String == transfer)
            let tokens = try await client.exchange(code: try #require(fields["code"]), redirectURI: URL(string: Fixtures.redirectURI))
            let identity = try await emulator.identityVerifier().verify(try #require(tokens.idToken))
            #expect(identity.transferSubject == transfer)
            // Other users are not in a transfer.
            let other = Decode.jwtClaims(try #require(try await emulator.authorize(user: Fixtures.grace)["id_token"]))
            #expect(other["transfer_sub"] == nil)
        }
    }

    @Test("notifications expire a day after they are issued, as Apple's")
    func notificationExpiry() async throws {
        try await withEmulator(initialKeys: 1) { emulator async throws in
            let signed = try await emulator.emulator.signNotification(type: "email-disabled", subject: Fixtures.ada, clientID: EmulatorConfiguration.testServicesID)
            let claims = Decode.jwtClaims(signed.jws)
            #expect(try #require(claims["exp"] as? Int) - (try #require(claims["iat"] as? Int)) == 86_400)
        }
    }
}

/// One base64url part of a compact JWS, decoded.
enum JOSEPart {
    static func decode(_ token: String, part: Int) -> [UInt8]? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        var text = parts[part].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        return Data(base64Encoded: text).map(Array.init)
    }
}
