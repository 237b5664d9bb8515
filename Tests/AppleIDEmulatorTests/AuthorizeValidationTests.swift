import AppleIDEmulator
import Foundation
import Testing

/// `GET /auth/authorize` refuses what Apple refuses, with Apple's error shown on a page (never a redirect),
/// and otherwise shows the emulator's consent page.
@Suite("Authorize request validation")
struct AuthorizeValidationTests {
    /// One bad authorization request and the error Apple shows for it.
    struct BadRequest: Sendable, CustomTestStringConvertible {
        var name: String
        var query: String
        var expectedCode: String
        var testDescription: String { name }
    }

    static let badRequests: [BadRequest] = [
        BadRequest(
            name: "unknown client_id",
            query: EmulatorHarness.authorizeQuery(clientID: "com.example.unknown"),
            expectedCode: "invalid_client"
        ),
        BadRequest(
            name: "client_id missing",
            query: "redirect_uri=" + Fixtures.redirectURI + "&response_type=code",
            expectedCode: "invalid_request"
        ),
        BadRequest(
            name: "redirect_uri with a trailing slash the registration lacks",
            query: EmulatorHarness.authorizeQuery(redirectURI: Fixtures.redirectURI + "/"),
            expectedCode: "invalid_request"
        ),
        BadRequest(
            name: "redirect_uri with another scheme",
            query: EmulatorHarness.authorizeQuery(redirectURI: Fixtures.redirectURI.replacingOccurrences(of: "https:", with: "http:")),
            expectedCode: "invalid_request"
        ),
        BadRequest(
            name: "response_type id_token alone",
            query: EmulatorHarness.authorizeQuery(responseType: "id_token"),
            expectedCode: "unsupported_response_type"
        ),
        BadRequest(
            name: "response_type token",
            query: EmulatorHarness.authorizeQuery(responseType: "token", scope: nil),
            expectedCode: "unsupported_response_type"
        ),
        BadRequest(
            name: "scope with response_mode query",
            query: EmulatorHarness.authorizeQuery(responseType: "code", responseMode: "query", scope: "name email"),
            expectedCode: "invalid_request"
        ),
        BadRequest(
            name: "scope with response_mode fragment",
            query: EmulatorHarness.authorizeQuery(responseType: "code id_token", responseMode: "fragment", scope: "email"),
            expectedCode: "invalid_request"
        ),
        BadRequest(
            name: "code id_token with response_mode query",
            query: EmulatorHarness.authorizeQuery(responseType: "code id_token", responseMode: "query", scope: nil),
            expectedCode: "invalid_request"
        ),
        BadRequest(
            name: "scope Apple does not know",
            query: EmulatorHarness.authorizeQuery(scope: "name phone"),
            expectedCode: "invalid_scope"
        ),
    ]

    @Test("a refused request shows Apple's error page and does not redirect", arguments: badRequests)
    func refused(_ bad: BadRequest) async throws {
        try await withEmulator { emulator async throws in
            let answer = try await emulator.get("/auth/authorize?" + bad.query)
            #expect(answer.status == 400)
            #expect(answer.headers["location"] == nil)
            #expect(answer.headers["content-type"]?.hasPrefix("text/html") == true)
            #expect(Decode.errorPageCode(answer.body) == bad.expectedCode)
            #expect(!answer.body.contains("emulator_action"), "no consent form on an error page")
        }
    }

    /// A client registered with return URLs Apple would never allow, as a hand-written configuration file could.
    static let looseClient = "com.example.loose"
    static let looseRedirects = [
        "http://app.example.com/auth/apple/callback", "https://203.0.113.7/auth/apple/callback",
        "https://[2001:db8::1]/auth/apple/callback", "http://10.0.0.8:8080/auth/apple/callback",
        "http://127.0.0.1:8080/auth/apple/callback", "http://localhost:8080/auth/apple/callback",
        "http://127.example.com/auth/apple/callback",
    ]

    static func looseConfiguration() -> EmulatorConfiguration {
        Fixtures.configuration { configuration in
            var loose = configuration.clients[0]
            loose.clientID = looseClient
            loose.redirectURIs = looseRedirects
            configuration.clients.append(loose)
        }
    }

    @Test("plain http and IP-address return URLs are refused on the error page even when registered, never redirected to", arguments: [
        "http://app.example.com/auth/apple/callback", "https://203.0.113.7/auth/apple/callback",
        "https://[2001:db8::1]/auth/apple/callback", "http://10.0.0.8:8080/auth/apple/callback",
        "http://127.example.com/auth/apple/callback",
    ])
    func refusesInsecureReturnURL(_ redirectURI: String) async throws {
        try await withEmulator(Self.looseConfiguration()) { emulator async throws in
            // Headless consent too: the refusal comes before any answer could be sent there.
            let query = EmulatorHarness.authorizeQuery(clientID: Self.looseClient, redirectURI: redirectURI, extra: [("emulator_respond", "json"), ("emulator_user", Fixtures.ada)])
            let answer = try await emulator.get("/auth/authorize?" + query)
            #expect(answer.status == 400)
            #expect(answer.headers["location"] == nil)
            #expect(Decode.errorPageCode(answer.body) == "invalid_request")
            #expect(!answer.body.contains("\"code\""), "no code was issued")
        }
    }

    @Test("a loopback http return URL registered for the client is accepted (local mode: the emulator's one deliberate difference)", arguments: [
        "http://127.0.0.1:8080/auth/apple/callback", "http://localhost:8080/auth/apple/callback",
    ])
    func acceptsRegisteredLoopback(_ redirectURI: String) async throws {
        try await withEmulator(Self.looseConfiguration()) { emulator async throws in
            let answer = try await emulator.get("/auth/authorize?" + EmulatorHarness.authorizeQuery(clientID: Self.looseClient, redirectURI: redirectURI))
            #expect(answer.status == 200)
            #expect(Decode.errorPageCode(answer.body) == nil)
            // Unregistered loopback URLs are still refused.
            let other = try await emulator.get("/auth/authorize?" + EmulatorHarness.authorizeQuery(redirectURI: redirectURI))
            #expect(other.status == 400)
        }
    }

    @Test("a disabled client is refused with unauthorized_client")
    func disabledClient() async throws {
        let configuration = Fixtures.configuration { configuration in
            var disabled = configuration.clients[0]
            disabled.clientID = "com.example.disabled"
            disabled.enabled = false
            configuration.clients.append(disabled)
        }
        try await withEmulator(configuration) { emulator async throws in
            let answer = try await emulator.get("/auth/authorize?" + EmulatorHarness.authorizeQuery(clientID: "com.example.disabled"))
            #expect(answer.status == 400)
            #expect(Decode.errorPageCode(answer.body) == "unauthorized_client")
        }
    }

    @Test("the registered redirect_uri, exactly, is accepted in every allowed combination", arguments: [
        ("code", "query", nil),
        ("code", "form_post", "name email"),
        ("code id_token", "fragment", nil),
        ("code id_token", "form_post", "name"),
        ("id_token code", "form_post", "email"),
    ] as [(String, String, String?)])
    func accepted(responseType: String, responseMode: String, scope: String?) async throws {
        try await withEmulator { emulator async throws in
            let query = EmulatorHarness.authorizeQuery(responseType: responseType, responseMode: responseMode, scope: scope, state: "s1")
            let answer = try await emulator.get("/auth/authorize?" + query)
            #expect(answer.status == 200, "\(answer.body)")
            #expect(Decode.errorPageCode(answer.body) == nil)
        }
    }

    @Test("a valid request without headless parameters shows a consent page marked as the emulator")
    func consentPage() async throws {
        try await withEmulator { emulator async throws in
            let query = EmulatorHarness.authorizeQuery(scope: "name email", state: "state-123", nonce: "nonce-456")
            let answer = try await emulator.get("/auth/authorize?" + query)
            #expect(answer.status == 200)
            #expect(answer.headers["content-type"]?.hasPrefix("text/html") == true)
            let page = answer.body
            // It names the client asking.
            #expect(page.contains("Sign in to \(EmulatorConfiguration.testServicesID)"))
            // It lists every test user, each selectable.
            for user in emulator.emulator.configuration.users {
                #expect(page.contains("\(user.firstName) \(user.lastName)"))
                #expect(page.contains(#"name="emulator_user" value="\#(user.sub)""#))
            }
            // It is visibly the emulator, not Apple.
            #expect(page.contains("Apple ID <strong>emulator</strong>"))
            #expect(page.contains("<title>Sign in — Apple ID emulator</title>"))
            // It offers the choices the scopes call for, and Continue and Cancel.
            #expect(page.contains(#"name="emulator_first_name""#))
            #expect(page.contains(#"value="hide""#))
            #expect(page.contains(#"id="continue""#))
            #expect(page.contains(#"id="cancel""#))
            // It carries the request through the form, and issues nothing yet.
            let form = Decode.form(page)
            #expect(form.method == "post")
            #expect(form.action == "/auth/authorize/consent")
            #expect(form.fields["state"] == "state-123")
            #expect(form.fields["nonce"] == "nonce-456")
            #expect(form.fields["redirect_uri"] == Fixtures.redirectURI)
            #expect(form.fields["code"] == nil)
        }
    }

    @Test("without name and email scopes the consent page asks for neither")
    func consentPageWithoutScopes() async throws {
        try await withEmulator { emulator async throws in
            let query = EmulatorHarness.authorizeQuery(responseType: "code", responseMode: "query", scope: nil)
            let page = try await emulator.get("/auth/authorize?" + query).body
            #expect(page.contains(#"name="emulator_user""#))
            #expect(!page.contains(#"name="emulator_first_name""#))
            #expect(!page.contains(#"value="hide""#))
        }
    }

    @Test("submitting the consent page as a browser does returns the auto-submitting form_post page")
    func consentFormSubmission() async throws {
        try await withEmulator { emulator async throws in
            let query = EmulatorHarness.authorizeQuery(scope: "name email", state: "browser-state", nonce: "browser-nonce")
            let page = try await emulator.get("/auth/authorize?" + query).body
            var fields = Decode.form(page).fields.map { ($0.key, $0.value) }
            fields += [("emulator_user", Fixtures.grace), ("emulator_email", "share"), ("emulator_first_name", ""), ("emulator_action", "continue")]
            let answer = try await emulator.post("/auth/authorize/consent", form: fields)
            #expect(answer.status == 200)
            let returned = Decode.form(answer.body)
            #expect(returned.action == Fixtures.redirectURI)
            #expect(returned.fields["state"] == "browser-state")
            #expect(returned.fields["code"]?.isEmpty == false)
            let identity = try await emulator.identityVerifier().verify(returned.fields["id_token"]!, nonce: "browser-nonce", code: returned.fields["code"])
            #expect(identity.subject == Fixtures.grace)
            // An empty name field means "as the test user".
            #expect(Decode.user(returned.fields["user"])?.firstName == "Grace")
        }
    }
}
