import AppleSignIn
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import JOSE
@testable import SignInServer
import Testing

/// Services (issue 35 part D): a confidential client registered as a service gets `client_credentials` tokens that
/// name it, never a person, and passes the door by its groups or its client id like anyone else.
@Suite("Services: client credentials through the door")
struct ServiceClientTests {
    static let secret = "billing-secret-value"
    static let name = HTTPField.Name("X-Auth-Request-User")!
    static let groupsHeader = HTTPField.Name("X-Auth-Request-Groups")!
    static let clientHeader = HTTPField.Name("X-Auth-Request-Client")!
    static let uri = HTTPField.Name("X-Forwarded-Uri")!
    static let host = HTTPField.Name("X-Forwarded-Host")!

    static func options(auditPath: String? = nil) throws -> ServerOptions {
        var options = ProviderTests.options
        var billing = ProviderClientRecord(clientID: "billing", secretHash: ProviderSettings.hash(secret), redirectURIs: [], createdAt: Date())
        billing.isService = true
        var reports = ProviderClientRecord(clientID: "reports", secretHash: ProviderSettings.hash(secret), redirectURIs: [], createdAt: Date())
        reports.isService = true
        options.providerClients += [billing, reports]
        let rules = #"[{"paths": ["^/internal/"], "policy": "allow", "groups": ["machines"]}, {"paths": ["^/billing/"], "policy": "allow", "clients": ["billing"]}]"#
        options.front = FrontSettings(
            publicOrigin: "http://localhost", redirects: RedirectPolicy(domains: ["app.localhost"]),
            access: AccessControl(AccessConfiguration(rules: try AccessRule.parse(json: rules), groups: ["machines": [.subject("service:billing")]]))
        )
        options.trustedProxies = ["127.0.0.1"]
        options.live = true
        options.auditLogPath = auditPath
        return options
    }

    static func token(_ h: Harness, _ client: String, secret: String = secret) async throws -> TestResponse {
        try await h.post("/oauth2/token", form: "grant_type=client_credentials", headers: ProviderTests.basic(client, secret))
    }

    static func check(_ h: Harness, _ token: String, path: String) async throws -> TestResponse {
        try await h.get("/auth/check", headers: [.authorization: "Bearer " + token, uri: path, host: "app.localhost"])
    }

    @Test("a service's token names the service, never a person: no refresh token, no id_token, audited; it passes a rule by its group (X-Auth-Request-User service:billing, its groups, its client) and one by its client id; another service without the group is refused with 403")
    func serviceTokens() async throws {
        let auditPath = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-service-audit-\(UUID().uuidString).jsonl").path
        try await withServer(try Self.options(auditPath: auditPath)) { h in
            let answer = try await Self.token(h, "billing")
            #expect(answer.status == .ok, "\(answer.text)")
            let json = try ProviderTests.json(answer)
            let token = try #require(json["access_token"] as? String)
            #expect(json["token_type"] as? String == "Bearer")
            #expect(json["refresh_token"] == nil)
            #expect(json["id_token"] == nil)
            #expect(answer.headers[.cacheControl] == "no-store")
            let audit = try await Fixtures.audit(at: auditPath, holding: "\"event\":\"service-token\"")
            #expect(audit.contains("\"event\":\"service-token\"") && audit.contains("service:billing"))

            let inside = try await Self.check(h, token, path: "/internal/report")
            #expect(inside.status == .accepted)
            #expect(inside.headers[Self.name] == "service:billing")
            #expect(inside.headers[Self.groupsHeader] == "machines")
            #expect(inside.headers[Self.clientHeader] == "billing")
            #expect(try await Self.check(h, token, path: "/billing/run").status == .accepted)

            let reports = try #require(try ProviderTests.json(try await Self.token(h, "reports"))["access_token"] as? String)
            let refused = try await Self.check(h, reports, path: "/internal/report")
            #expect(refused.status == .forbidden)
            #expect(refused.headers[.wwwAuthenticate]?.contains("insufficient_scope") == true)
            #expect(try await Self.check(h, reports, path: "/billing/run").status == .forbidden)
            // The same token at userinfo: there is no person.
            #expect(try await h.get("/oauth2/userinfo", headers: [.authorization: "Bearer " + token]).status == .unauthorized)
        }
    }

    @Test("only a service gets client_credentials (a person's client: unauthorized_client); a wrong secret is invalid_client; a service cannot start a person's sign-in")
    func onlyServices() async throws {
        try await withServer(try Self.options()) { h in
            let app = try await h.post("/oauth2/token", form: "grant_type=client_credentials", headers: ProviderTests.basic("app", ProviderTests.secret))
            #expect(try ProviderTests.json(app)["error"] as? String == "unauthorized_client")
            let wrong = try await Self.token(h, "billing", secret: "not-it")
            #expect(wrong.status == .unauthorized)
            #expect(try ProviderTests.json(wrong)["error"] as? String == "invalid_client")
            let session = try #require(try await h.signIn().session)
            let authorize = try await h.get("/oauth2/authorize?response_type=code&client_id=billing&redirect_uri=https%3A%2F%2Fx.example%2Fcb&scope=openid", cookies: [h.sessionCookie: session])
            #expect(authorize.status == .badRequest, "a service has no redirect URI: no code for it")
        }
    }

    @Test("introspection (RFC 7662): a confidential client learns whether an access token is active and whom it stands for; unknown, revoked or a refresh token: active false; a public client may not ask")
    func introspection() async throws {
        try await withServer(try Self.options()) { h in
            func introspect(_ token: String, as client: String = "billing", secret: String = Self.secret, hint: String? = nil) async throws -> [String: Any] {
                let form = FormEncoding.encode([("token", token)] + (hint.map { [("token_type_hint", $0)] } ?? []))
                return try ProviderTests.json(try await h.post("/oauth2/introspect", form: form, headers: ProviderTests.basic(client, secret)))
            }
            let session = try #require(try await h.signIn().session)
            let tokens = try await h.accessToken(session: session)
            let access = try #require(tokens["access_token"] as? String)
            let person = try await introspect(access)
            #expect(person["active"] as? Bool == true)
            #expect(person["sub"] as? String == Fixtures.ada)
            #expect(person["client_id"] as? String == "app")
            #expect(person["token_type"] as? String == "Bearer")
            #expect((person["exp"] as? Int ?? 0) > Int(Date().timeIntervalSince1970))
            let service = try await introspect(try #require(try ProviderTests.json(try await Self.token(h, "billing"))["access_token"] as? String), as: "reports")
            #expect(service["active"] as? Bool == true)
            #expect(service["sub"] as? String == "service:billing")
            #expect(service["groups"] as? [String] == ["machines"])
            for inactive in ["nothing-" + RandomToken.generate(), try #require(tokens["refresh_token"] as? String)] {
                #expect(try await introspect(inactive).keys.sorted() == ["active"])
                #expect(try await introspect(inactive)["active"] as? Bool == false)
            }
            _ = try await h.post("/oauth2/revoke", form: FormEncoding.encode([("token", access)]), headers: ProviderTests.basic("app", ProviderTests.secret))
            #expect(try await introspect(access)["active"] as? Bool == false)
            let spa = try await h.post("/oauth2/introspect", form: FormEncoding.encode([("token", access), ("client_id", "spa")]))
            #expect(spa.status == .unauthorized)
        }
    }

    @Test("rotate-secret: the new secret works at once, the replaced one until its overlap ends, then not")
    func rotation() async throws {
        try await withServer(try Self.options()) { h in
            // Both registered and rotated before the first request (instances read stored clients every 5 s).
            for (name, overlap) in [("svc-overlap", TimeInterval(3600)), ("svc-ended", TimeInterval(-1))] {
                var client = ProviderClientRecord(clientID: name, secretHash: ProviderSettings.hash("old-secret"), redirectURIs: [], createdAt: Date())
                client.isService = true
                let added = try await h.store.addProviderClient(client)
                let rotated = try await h.store.rotateProviderSecret(clientID: name, secretHash: ProviderSettings.hash("new-secret"), until: Date().addingTimeInterval(overlap))
                #expect(added && rotated)
            }
            let duringNew = try await Self.token(h, "svc-overlap", secret: "new-secret").status
            let duringOld = try await Self.token(h, "svc-overlap", secret: "old-secret").status
            #expect(duringNew == .ok && duringOld == .ok)
            let afterNew = try await Self.token(h, "svc-ended", secret: "new-secret").status
            let afterOld = try await Self.token(h, "svc-ended", secret: "old-secret").status
            #expect(afterNew == .ok && afterOld == .unauthorized)
            #expect(try await h.store.rotateProviderSecret(clientID: "nobody", secretHash: "x", until: Date()) == false)
        }
    }
}
