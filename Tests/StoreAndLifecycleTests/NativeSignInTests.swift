import AppleIDEmulator
import AppleSignIn
import Foundation
import JOSE
@testable import SignInServer
import Testing

/// Native apps: identity token and authorization code from the device, a bearer session back.
@Suite("Native sign-in over HTTP")
struct NativeSignInTests {
    @Test("a native app signs in with a hashed nonce, uses its bearer session, and cannot reuse the code")
    func nativeFlow() async throws {
        try await SQLiteSite.with { site in
            let rawNonce = "raw-nonce-" + Support.randomHex()
            let request = try JSONSerialization.data(withJSONObject: ["client_id": EmulatorConfiguration.testBundleID, "sub": Site.grace, "nonce": IdentityTokenVerifier.sha256Hex(rawNonce)])
            let device = try await site.world.admin(.POST, "native-authorization", json: String(decoding: request, as: UTF8.self)).json
            let identityToken = try #require(device["identityToken"] as? String)
            let code = try #require(device["authorizationCode"] as? String)
            #expect(device["firstName"] as? String == "Grace")

            let body = try JSONSerialization.data(withJSONObject: ["identityToken": identityToken, "authorizationCode": code, "nonce": rawNonce, "firstName": "Grace"])
            let signedIn = try await site.world.send(.POST, site.instance.baseURL + "/api/apple/native", body: String(decoding: body, as: UTF8.self), contentType: "application/json")
            #expect(signedIn.status == 200)
            #expect(signedIn.json["sub"] as? String == Site.grace)
            let token = try #require(signedIn.json["session_token"] as? String)
            #expect(try await site.sql.texts("SELECT client_id FROM refresh_tokens WHERE sub = \(Support.literal(Site.grace))") == [EmulatorConfiguration.testBundleID])

            let me = try await site.instance.get("/api/session", headers: [("Authorization", "Bearer " + token)])
            #expect(me.status == 200)
            #expect(me.json["sub"] as? String == Site.grace)
            #expect(me.json["name"] as? String == "Grace")
            let stranger = try await site.instance.get("/api/session", headers: [("Authorization", "Bearer not-a-session")])
            #expect(stranger.status == 401)
            #expect(stranger.json["type"] as? String == "urn:siwa:problem:no-session")

            let again = try await site.world.send(.POST, site.instance.baseURL + "/api/apple/native", body: String(decoding: body, as: UTF8.self), contentType: "application/json")
            #expect(again.status == 400)
            #expect(again.headers.first(name: "content-type") == "application/problem+json")
            #expect(again.json["type"] as? String == "urn:siwa:problem:expired")
            #expect(again.json["status"] as? Int == 400)
            #expect(try await site.sql.count("sessions", sub: Site.grace) == 1)
        }
    }

    @Test("the app renews its session: a fresh identity token and code with its session token keep the same session, its auth_time now Apple's new one; another person's token, or an unknown session token, opens a session of its own")
    func renewal() async throws {
        try await SQLiteSite.with { site in
            func credential(_ sub: String) async throws -> String {
                let request = try JSONSerialization.data(withJSONObject: ["client_id": EmulatorConfiguration.testBundleID, "sub": sub])
                let device = try await site.world.admin(.POST, "native-authorization", json: String(decoding: request, as: UTF8.self)).json
                let body = try JSONSerialization.data(withJSONObject: ["identityToken": try #require(device["identityToken"] as? String), "authorizationCode": try #require(device["authorizationCode"] as? String)])
                return String(decoding: body, as: UTF8.self)
            }
            func post(_ body: String, bearer: String? = nil) async throws -> [String: Any] {
                let answer = try await site.world.send(
                    .POST, site.instance.baseURL + "/auth/api/apple/native", headers: bearer.map { [("Authorization", "Bearer " + $0)] } ?? [], body: body, contentType: "application/json"
                )
                #expect(answer.status == 200, "\(answer.json)")
                return answer.json
            }
            func authTime(_ token: String) async throws -> Date {
                let me = try await site.instance.get("/api/session", headers: [("Authorization", "Bearer " + token)])
                return try #require((me.json["auth_time"] as? String).flatMap { ISO8601DateFormatter().date(from: $0) }, "\(me.json)")
            }
            let first = try await post(try await credential(Site.grace))
            let token = try #require(first["session_token"] as? String)
            let before = try await authTime(token)
            try await Task.sleep(for: .milliseconds(1100))

            let renewed = try await post(try await credential(Site.grace), bearer: token)
            #expect(renewed["session_token"] as? String == token, "the same session")
            let after = try await authTime(token)
            #expect(after > before, "auth_time \(before) → \(after)")
            #expect(try await site.sql.count("sessions", sub: Site.grace) == 1)

            // Another person on the same device, and a session token the store does not know: sessions of their own.
            let ada = try await post(try await credential(Site.ada), bearer: token)
            #expect(ada["session_token"] as? String != token && ada["sub"] as? String == Site.ada)
            #expect(try await authTime(token) == after, "Grace's session is untouched")
            let unknown = try await post(try await credential(Site.grace), bearer: "not-a-session")
            #expect(unknown["session_token"] as? String != token)
            #expect(try await site.sql.count("sessions", sub: Site.grace) == 2)
        }
    }

    @Test("an identity token issued to the web Services ID is refused by the native endpoint")
    func webTokenRefusedByNativeEndpoint() async throws {
        try await SQLiteSite.with { site in
            let nonce = "web-nonce-" + Support.randomHex()
            let query = FormEncoding.encode([
                ("client_id", EmulatorConfiguration.testServicesID), ("redirect_uri", Site.returnURL), ("response_type", "code id_token"),
                ("response_mode", "form_post"), ("scope", "name email"), ("state", "s-" + Support.randomHex()), ("nonce", nonce),
            ])
            let fields = try await site.world.consent(site.world.emulatorURL + "/auth/authorize?" + query, user: Site.ada)
            let idToken = try #require(fields["id_token"])
            let code = try #require(fields["code"])
            let counters = try await site.world.counters()

            let body = try JSONSerialization.data(withJSONObject: ["identityToken": idToken, "authorizationCode": code, "nonce": nonce])
            let answer = try await site.world.send(.POST, site.instance.baseURL + "/api/apple/native", body: String(decoding: body, as: UTF8.self), contentType: "application/json")
            #expect(answer.status == 401)
            #expect(answer.headers.first(name: "content-type") == "application/problem+json")
            #expect(answer.json["type"] as? String == "urn:siwa:problem:not-verified")
            // Refused before the code reached Apple, and nothing stored.
            #expect(try await site.world.counters()["tokenRequests"] == counters["tokenRequests"])
            #expect(try await site.sql.count("users") == 0)
        }
    }
}
