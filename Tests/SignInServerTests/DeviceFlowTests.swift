import AppleSignIn
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import JOSE
@testable import SignInServer
import Testing

/// The device flow (RFC 8628, issue 35 part C), driven as command-line OAuth clients drive it: the device
/// authorization, polls of the token endpoint, and the person's decision in siwa's page.
@Suite("Device flow: a command line signs in through a person's browser")
struct DeviceFlowTests {
    static var options: ServerOptions {
        var options = ProviderTests.options
        var cli = ProviderClientRecord(clientID: "cli", redirectURIs: [], isPublic: true, createdAt: Date())
        cli.deviceFlow = true
        var staff = ProviderClientRecord(clientID: "staff-cli", redirectURIs: [], isPublic: true, createdAt: Date(), allowedGroups: ["staff"])
        staff.deviceFlow = true
        options.providerClients += [cli, staff]
        options.front = FrontSettings(publicOrigin: "http://localhost", access: AccessControl(AccessConfiguration(groups: ["staff": [.email("grace@example.com")]])))
        return options
    }

    static func json(_ response: TestResponse) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(response.text.utf8)) as? [String: Any], "\(response.status) \(response.text)")
    }

    /// `POST /oauth2/device_authorization` as a command line sends it; its JSON.
    static func start(_ h: Harness, form: String = "client_id=cli&scope=openid profile offline_access", headers: HTTPFields = [:]) async throws -> [String: Any] {
        let answer = try await h.post("/oauth2/device_authorization", form: form, headers: headers)
        #expect(answer.status == .ok, "\(answer.text)")
        #expect(answer.headers[.cacheControl] == "no-store")
        return try json(answer)
    }

    static func poll(_ h: Harness, _ deviceCode: String, client: String = "cli") async throws -> TestResponse {
        try await h.post("/oauth2/token", form: FormEncoding.encode([("grant_type", TokenController.deviceCodeGrant), ("device_code", deviceCode), ("client_id", client)]))
    }

    static func error(_ response: TestResponse) throws -> String? {
        try json(response)["error"] as? String
    }

    /// The person's decision in the page, as a browser submits it: the code's page, then its form.
    static func decide(_ h: Harness, session: String, userCode: String, _ decision: String) async throws -> TestResponse {
        let page = try await h.get("/auth/device?user_code=" + FormEncoding.encode(userCode), cookies: [h.sessionCookie: session])
        #expect(page.status == .ok)
        #expect(page.element("device-client") != nil, "\(page.text)")
        let csrf = try #require(page.csrfToken)
        return try await h.post(
            "/auth/device", form: FormEncoding.encode([("csrf_token", csrf), ("user_code", userCode), ("decision", decision)]), cookies: [h.sessionCookie: session]
        )
    }

    @Test("the whole flow: a code to show (XXXX-XXXX of consonants), authorization_pending, slow_down adding 5 s, the person approves, tokens once with a refresh token for offline_access, then invalid_grant; the access token opens /auth/check as the client")
    func approved() async throws {
        try await withServer(Self.options) { h in
            let discovery = try Self.json(try await h.get("/.well-known/openid-configuration"))
            #expect(discovery["device_authorization_endpoint"] as? String == "http://localhost/oauth2/device_authorization")
            #expect((discovery["grant_types_supported"] as? [String])?.contains(TokenController.deviceCodeGrant) == true)

            let started = try await Self.start(h)
            let userCode = try #require(started["user_code"] as? String)
            #expect(userCode.wholeMatch(of: /[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}/) != nil, "\(userCode)")
            #expect(started["verification_uri"] as? String == "http://localhost/auth/device")
            #expect(started["verification_uri_complete"] as? String == "http://localhost/auth/device?user_code=" + userCode)
            #expect(started["interval"] as? Int == 5)
            #expect(started["expires_in"] as? Int == 600)
            let deviceCode = try #require(started["device_code"] as? String)

            #expect(try Self.error(try await Self.poll(h, deviceCode)) == "authorization_pending")
            let tooSoon = try await Self.poll(h, deviceCode)
            #expect(tooSoon.status == .badRequest)
            #expect(try Self.error(tooSoon) == "slow_down")
            #expect(try Self.json(tooSoon)["error_description"] as? String == "poll at most every 10 seconds")
            #expect(try Self.json(try await Self.poll(h, deviceCode))["error_description"] as? String == "poll at most every 15 seconds")

            let session = try #require(try await h.signIn().session)
            // Typed as a person types it: lower case, without the dash.
            let done = try await Self.decide(h, session: session, userCode: userCode.lowercased().replacingOccurrences(of: "-", with: ""), "approve")
            #expect(done.status == .ok)
            #expect(done.element("device-done")?.contains("connected") == true)

            let tokens = try Self.json(try await Self.poll(h, deviceCode))
            let access = try #require(tokens["access_token"] as? String)
            #expect(tokens["refresh_token"] is String, "offline_access was granted")
            #expect(tokens["scope"] as? String == "offline_access openid profile")
            #expect(try Self.error(try await Self.poll(h, deviceCode)) == "invalid_grant", "tokens once")
            let checked = try await h.get("/auth/check", headers: [.authorization: "Bearer " + access])
            #expect(checked.status == .accepted)
            #expect(checked.headers[HTTPField.Name("X-Auth-Request-Client")!] == "cli")
            #expect(checked.headers[HTTPField.Name("X-Auth-Request-User")!] == Fixtures.ada)
            // Without offline_access: no refresh token.
            let plain = try await Self.start(h, form: "client_id=cli&scope=openid")
            _ = try await Self.decide(h, session: session, userCode: try #require(plain["user_code"] as? String), "approve")
            let plainTokens = try Self.json(try await Self.poll(h, try #require(plain["device_code"] as? String)))
            #expect(plainTokens["access_token"] is String)
            #expect(plainTokens["refresh_token"] == nil)
        }
    }

    @Test("what real command lines send: the public client's id by HTTP Basic with an empty password, a scope with + or %20; a client not registered for the device flow is unauthorized_client, an unknown one invalid_client")
    func clientsAsTheyCome() async throws {
        try await withServer(Self.options) { h in
            let basic: HTTPFields = [.authorization: "Basic " + Data("cli:".utf8).base64EncodedString()]
            _ = try await Self.start(h, form: "scope=openid+email", headers: basic)
            let encoded = try await Self.start(h, form: "client_id=cli&scope=openid%20email")
            let code = try #require(encoded["device_code"] as? String)
            #expect(try Self.error(try await h.post("/oauth2/token", form: "grant_type=\(FormEncoding.encode(TokenController.deviceCodeGrant))&device_code=\(code)", headers: basic)) == "authorization_pending")
            let app = try await h.post("/oauth2/device_authorization", form: "scope=openid", headers: ProviderTests.basic("app", ProviderTests.secret))
            #expect(try Self.error(app) == "unauthorized_client")
            let unknown = try await h.post("/oauth2/device_authorization", form: "client_id=nobody")
            #expect(unknown.status == .unauthorized)
            #expect(try Self.error(unknown) == "invalid_client")
            // Another client's device code is not this one's.
            #expect(try Self.error(try await Self.poll(h, code, client: "staff-cli")) == "invalid_grant")
        }
    }

    @Test("refused: access_denied; expired: expired_token; approved but its session signed out before the poll: invalid_grant, no tokens; a member-only client approved by a non-member: access_denied")
    func refusedExpiredEnded() async throws {
        try await withServer(Self.options) { h in
            let session = try #require(try await h.signIn().session)
            let refused = try await Self.start(h)
            _ = try await Self.decide(h, session: session, userCode: try #require(refused["user_code"] as? String), "deny")
            #expect(try Self.error(try await Self.poll(h, try #require(refused["device_code"] as? String))) == "access_denied")

            let expiredCode = RandomToken.generate()
            let past = Date().addingTimeInterval(-700)
            #expect(try await h.store.saveDeviceGrant(DeviceGrantRecord(
                deviceCodeHash: ProviderSettings.hash(expiredCode), userCode: "BCDFGHJK", clientID: "cli", scope: "openid", createdAt: past,
                expiresAt: past.addingTimeInterval(600), interval: 5
            ), now: past))
            #expect(try Self.error(try await Self.poll(h, expiredCode)) == "expired_token")

            let ended = try await Self.start(h)
            _ = try await Self.decide(h, session: session, userCode: try #require(ended["user_code"] as? String), "approve")
            #expect(try await h.store.deleteSession(idHash: SignInFlow.hash(session)))
            #expect(try Self.error(try await Self.poll(h, try #require(ended["device_code"] as? String))) == "invalid_grant")
            #expect(try h.database.count("provider_tokens") == 0)

            let another = try #require(try await h.signIn().session)
            let staff = try await Self.start(h, form: "client_id=staff-cli&scope=openid")
            let done = try await Self.decide(h, session: another, userCode: try #require(staff["user_code"] as? String), "approve")
            #expect(done.element("device-done")?.contains("members") == true)
            #expect(try Self.error(try await Self.poll(h, try #require(staff["device_code"] as? String), client: "staff-cli")) == "access_denied")
        }
    }

    @Test("the page: signed out, a browser is sent to sign in and back to the same code; wrong codes are bounded per session (429 after 5, audited); the decision needs the CSRF token; in Chinese too")
    func page() async throws {
        var options = Self.options
        let auditPath = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-device-audit-\(UUID().uuidString).jsonl").path
        options.auditLogPath = auditPath
        try await withServer(options) { h in
            let signedOut = try await h.get("/auth/device?user_code=BCDF-GHJK", headers: Fixtures.browser)
            #expect(signedOut.status == .found)
            #expect(signedOut.location?.hasPrefix("/auth/apple?return_to=") == true)
            #expect(signedOut.location?.removingPercentEncoding?.contains("/auth/device?user_code=BCDF-GHJK") == true)

            let session = try #require(try await h.signIn().session)
            let entry = try await h.get("/auth/device", cookies: [h.sessionCookie: session])
            #expect(entry.status == .ok)
            #expect(entry.element("device-intro") != nil)
            let chinese = try await h.get("/auth/device", cookies: [h.sessionCookie: session], headers: [.acceptLanguage: "zh-CN"])
            #expect(chinese.text.contains("连接设备"))

            for _ in 0..<5 {
                let wrong = try await h.get("/auth/device?user_code=ZZZZ-ZZZZ", cookies: [h.sessionCookie: session])
                #expect(wrong.status == .ok)
                #expect(wrong.element("device-wrong") != nil)
            }
            let started = try await Self.start(h)
            let blocked = try await h.get("/auth/device?user_code=" + (started["user_code"] as? String ?? ""), cookies: [h.sessionCookie: session])
            #expect(blocked.status == .tooManyRequests)
            #expect(blocked.headers[.retryAfter] == "900")
            let audit = try await Fixtures.audit(at: auditPath, holding: "device-code-guessing")
            #expect(audit.components(separatedBy: "device-code-miss").count - 1 == 5)
            #expect(audit.contains("device-code-guessing"))

            // Another person's session may still decide; without the CSRF token nothing is decided.
            let other = try #require(try await h.signIn(user: Fixtures.grace).session)
            let forged = try await h.post(
                "/auth/device", form: FormEncoding.encode([("csrf_token", "wrong"), ("user_code", started["user_code"] as? String ?? ""), ("decision", "approve")]),
                cookies: [h.sessionCookie: other]
            )
            #expect(forged.status == .forbidden || forged.status == .badRequest, "\(forged.status)")
            #expect(try Self.error(try await Self.poll(h, try #require(started["device_code"] as? String))) == "authorization_pending")
        }
    }
}
