import AppleIDEmulator
import AppleSignIn
import Foundation
import Testing

/// The emulator-only headless consent (`emulator_user`, `emulator_email`, `emulator_action`,
/// `emulator_first_name`, `emulator_respond=json`) and what comes back in each response mode.
@Suite("Headless consent")
struct HeadlessConsentTests {
    @Test("Continue returns code, state and an id_token that AppleSignIn verifies against /auth/keys")
    func continueReturnsVerifiableToken() async throws {
        try await withEmulator { emulator async throws in
            let fields = try await emulator.authorize(user: Fixtures.ada, email: "share", state: "st-1", nonce: "n-1")
            #expect(fields["state"] == "st-1")
            let code = try #require(fields["code"])
            let idToken = try #require(fields["id_token"])
            #expect(Decode.jwtHeader(idToken)["alg"] as? String == "RS256")
            #expect(Decode.jwtHeader(idToken)["kid"] as? String != nil)

            let identity = try await emulator.identityVerifier().verify(idToken, nonce: "n-1", code: code)
            #expect(identity.subject == Fixtures.ada)
            #expect(identity.issuer == "https://appleid.apple.com", "signed as Apple signs, not with the emulator's own URL")
            #expect(identity.audience == EmulatorConfiguration.testServicesID)
            #expect(identity.nonce == "n-1")
            #expect(identity.nonceSupported == true)
            #expect(identity.email == Fixtures.adaEmail)
            #expect(identity.emailVerified == true)
            #expect(identity.isPrivateEmail == false)
            #expect(identity.authTime != nil)
            #expect(abs(identity.issuedAt.timeIntervalSinceNow) < 30)
            #expect(identity.expiresAt > Date())
        }
    }

    @Test("c_hash binds the id_token to its code and nonce to the request: another code or nonce is refused")
    func codeHashAndNonceAreChecked() async throws {
        try await withEmulator { emulator async throws in
            let first = try await emulator.authorize(nonce: "nonce-a")
            let second = try await emulator.authorize(nonce: "nonce-b")
            let verifier = try emulator.identityVerifier()
            let idToken = try #require(first["id_token"])
            let wrongCode = await identityTokenError { _ = try await verifier.verify(idToken, nonce: "nonce-a", code: second["code"]!) }
            #expect(wrongCode?.check == .codeHash)
            let wrongNonce = await identityTokenError { _ = try await verifier.verify(idToken, nonce: "nonce-b", code: first["code"]!) }
            #expect(wrongNonce?.check == .nonceMismatch)
        }
    }

    @Test("hide gives the relay address, marked private; share gives the real one", arguments: [
        ("hide", Fixtures.adaRelay, true),
        ("share", Fixtures.adaEmail, false),
    ])
    func emailChoice(choice: String, expectedEmail: String, isPrivate: Bool) async throws {
        try await withEmulator { emulator async throws in
            let fields = try await emulator.authorize(email: choice, nonce: "n")
            let identity = try await emulator.identityVerifier().verify(fields["id_token"]!, nonce: "n", code: fields["code"])
            #expect(identity.email == expectedEmail)
            #expect(identity.isPrivateEmail == isPrivate)
            #expect(Decode.user(fields["user"])?.email == expectedEmail)
            // 2025 tokens carry these as JSON booleans (older ones had strings, which verification still accepts).
            #expect(Decode.jwtClaims(fields["id_token"]!)["is_private_email"] as? Bool == isPrivate)
        }
    }

    @Test("user is sent the first time this user authorizes this client, never again")
    func userOnlyFirstTime() async throws {
        try await withEmulator { emulator async throws in
            let first = try await emulator.authorize(user: Fixtures.ada)
            let user = try #require(Decode.user(first["user"]))
            #expect(user.firstName == "Ada")
            #expect(user.lastName == "Lovelace")
            #expect(user.email == Fixtures.adaEmail)

            let second = try await emulator.authorize(user: Fixtures.ada)
            #expect(second["code"] != nil)
            #expect(second["user"] == nil)

            // Another user's first time is their own.
            let other = try await emulator.authorize(user: Fixtures.lilei)
            #expect(Decode.user(other["user"])?.firstName == "李")
            #expect(Decode.user(other["user"])?.lastName == "雷")
        }
    }

    @Test("first-time consent is per client: another Services ID gets user for the same person")
    func userFirstTimePerClient() async throws {
        let configuration = Fixtures.configuration { configuration in
            var second = configuration.clients[0]
            second.clientID = "com.example.second"
            configuration.clients.append(second)
        }
        try await withEmulator(configuration) { emulator async throws in
            _ = try await emulator.authorize(user: Fixtures.ada)
            let query = EmulatorHarness.authorizeQuery(
                clientID: "com.example.second",
                extra: [("emulator_user", Fixtures.ada), ("emulator_respond", "json")]
            )
            let fields = try await emulator.get("/auth/authorize?" + query).json["fields"] as? [String: String] ?? [:]
            #expect(fields["code"] != nil)
            #expect(Decode.user(fields["user"])?.firstName == "Ada")
        }
    }

    @Test("the name edited on the consent page is the name sent in user")
    func editedName() async throws {
        try await withEmulator { emulator async throws in
            let fields = try await emulator.authorize(user: Fixtures.ada, firstName: "Augusta")
            let user = try #require(Decode.user(fields["user"]))
            #expect(user.firstName == "Augusta")
            #expect(user.lastName == "Lovelace")
        }
    }

    @Test("without scopes no user is sent and the id_token carries no email")
    func noScopes() async throws {
        try await withEmulator { emulator async throws in
            let fields = try await emulator.authorize(scope: nil, nonce: "n")
            #expect(fields["user"] == nil)
            let identity = try await emulator.identityVerifier().verify(fields["id_token"]!, nonce: "n")
            #expect(identity.email == nil)
        }
    }

    @Test("Cancel returns user_cancelled_authorize with the state, and nothing else")
    func cancel() async throws {
        try await withEmulator { emulator async throws in
            let fields = try await emulator.authorize(action: "cancel", state: "cancel-state")
            #expect(fields == ["error": "user_cancelled_authorize", "state": "cancel-state"])
        }
    }

    @Test("an unknown test user is refused")
    func unknownUser() async throws {
        try await withEmulator { emulator async throws in
            let query = EmulatorHarness.authorizeQuery(extra: [("emulator_user", "000000.nobody.0000"), ("emulator_respond", "json")])
            let answer = try await emulator.get("/auth/authorize?" + query)
            #expect(answer.status == 400)
            #expect(Decode.errorPageCode(answer.body) == "invalid_request")
        }
    }

    @Test("form_post without emulator_respond=json returns an auto-submitting form to the redirect_uri")
    func formPostPage() async throws {
        try await withEmulator { emulator async throws in
            let query = EmulatorHarness.authorizeQuery(
                responseMode: "form_post", scope: "name email", state: "fp-state", nonce: "fp-nonce",
                extra: [("emulator_user", Fixtures.ada), ("emulator_email", "hide")]
            )
            let answer = try await emulator.get("/auth/authorize?" + query)
            #expect(answer.status == 200)
            #expect(answer.headers["content-type"]?.hasPrefix("text/html") == true)
            #expect(answer.body.contains("autosubmit.js"))
            let form = Decode.form(answer.body)
            #expect(form.method == "post")
            #expect(form.action == Fixtures.redirectURI)
            #expect(Set(form.fields.keys) == ["code", "id_token", "state", "user"])
            #expect(form.fields["state"] == "fp-state")
            let identity = try await emulator.identityVerifier().verify(form.fields["id_token"]!, nonce: "fp-nonce", code: form.fields["code"])
            #expect(identity.email == Fixtures.adaRelay)
            #expect(Decode.user(form.fields["user"])?.email == Fixtures.adaRelay)
        }
    }

    @Test("query mode redirects with 302 and code and state in the query")
    func queryRedirect() async throws {
        try await withEmulator { emulator async throws in
            let query = EmulatorHarness.authorizeQuery(
                responseType: "code", responseMode: "query", scope: nil, state: "q state&more",
                extra: [("emulator_user", Fixtures.ada)]
            )
            let answer = try await emulator.get("/auth/authorize?" + query)
            #expect(answer.status == 302)
            let location = try #require(answer.headers["location"])
            #expect(location.hasPrefix(Fixtures.redirectURI + "?"))
            let parameters = Decode.parameters(String(location.dropFirst(Fixtures.redirectURI.count + 1)))
            #expect(Set(parameters.keys) == ["code", "state"])
            #expect(parameters["state"] == "q state&more")

            // The code works at the token endpoint.
            let tokens = try await emulator.appleClient().exchange(code: parameters["code"]!, redirectURI: URL(string: Fixtures.redirectURI))
            #expect(tokens.idToken != nil)
        }
    }

    @Test("fragment mode redirects with code, id_token and state in the fragment")
    func fragmentRedirect() async throws {
        try await withEmulator { emulator async throws in
            let query = EmulatorHarness.authorizeQuery(
                responseType: "code id_token", responseMode: "fragment", scope: nil, state: "f-state",
                extra: [("emulator_user", Fixtures.ada)]
            )
            let answer = try await emulator.get("/auth/authorize?" + query)
            #expect(answer.status == 302)
            let location = try #require(answer.headers["location"])
            #expect(location.hasPrefix(Fixtures.redirectURI + "#"))
            let parameters = Decode.parameters(String(location.dropFirst(Fixtures.redirectURI.count + 1)))
            #expect(Set(parameters.keys) == ["code", "id_token", "state"])
            #expect(parameters["state"] == "f-state")
        }
    }

    @Test("web_message mode returns a page that posts the result to the return URL's origin only")
    func webMessage() async throws {
        try await withEmulator { emulator async throws in
            let query = EmulatorHarness.authorizeQuery(
                responseMode: "web_message", scope: "name email", state: "</script><b>wm</b>", nonce: "wm-nonce",
                extra: [("emulator_user", Fixtures.ada)]
            )
            let answer = try await emulator.get("/auth/authorize?" + query)
            #expect(answer.status == 200)
            #expect(answer.body.contains(#"data-origin="https://app.example.com""#))
            #expect(!answer.body.contains("<b>wm</b>"), "the state cannot break out of the script element")
            let start = try #require(answer.body.range(of: #"id="apple-result" data-origin="https://app.example.com">"#))
            let end = try #require(answer.body.range(of: "</script>", range: start.upperBound..<answer.body.endIndex))
            let result = Decode.json(String(answer.body[start.upperBound..<end.lowerBound]))
            let authorization = try #require(result["authorization"] as? [String: String])
            #expect(authorization["state"] == "</script><b>wm</b>")
            let identity = try await emulator.identityVerifier().verify(authorization["id_token"]!, nonce: "wm-nonce", code: authorization["code"])
            #expect(identity.subject == Fixtures.ada)
            #expect(result["user"] != nil)
        }
    }

    @Test("cancel in query mode redirects with the error and the state")
    func cancelRedirect() async throws {
        try await withEmulator { emulator async throws in
            let query = EmulatorHarness.authorizeQuery(
                responseType: "code", responseMode: "query", scope: nil, state: "c-state",
                extra: [("emulator_user", Fixtures.ada), ("emulator_action", "cancel")]
            )
            let answer = try await emulator.get("/auth/authorize?" + query)
            #expect(answer.status == 302)
            let location = try #require(answer.headers["location"])
            let parameters = Decode.parameters(String(location.dropFirst(Fixtures.redirectURI.count + 1)))
            #expect(parameters == ["error": "user_cancelled_authorize", "state": "c-state"])
        }
    }
}
