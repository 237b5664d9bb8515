import AppleSignIn
import Crypto
import CryptoExtras
import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import JOSE
@testable import SignInServer
import Testing

/// siwa as an OpenID Provider, driven as a relying party drives it: discovery, the authorization endpoint, the
/// token endpoint, userinfo, revocation and end-session, with every check a client or an attacker would run into.
@Suite("OpenID Provider")
struct ProviderTests {
    static let app = "https://app.example.org/callback"
    static let appLogout = "https://app.example.org/signed-out"
    static let secret = "s3cret with spaces & symbols:+/="

    static var options: ServerOptions {
        var options = ServerOptions()
        options.providerClients = [
            ProviderClientRecord(clientID: "app", secretHash: ProviderSettings.hash(secret), redirectURIs: [app], postLogoutRedirectURIs: [appLogout], createdAt: Date()),
            ProviderClientRecord(clientID: "other", secretHash: ProviderSettings.hash("other-secret"), redirectURIs: ["https://other.example.org/cb"], createdAt: Date()),
            ProviderClientRecord(clientID: "spa", redirectURIs: ["http://127.0.0.1:5173/cb"], isPublic: true, idTokenAlgorithm: "ES256", createdAt: Date()),
        ]
        return options
    }

    /// RFC 6749 §2.3.1: each part form-urlencoded, then Base64.
    static func basic(_ id: String, _ secret: String) -> HTTPFields {
        [.authorization: "Basic " + Data((FormEncoding.encode(id) + ":" + FormEncoding.encode(secret)).utf8).base64EncodedString()]
    }

    static func verifier() -> String { RandomToken.generate() }
    static func challenge(_ verifier: String) -> String { Base64URL.encode(SHA256.hash(data: Data(verifier.utf8))) }

    /// A signed-in person's trip through `/oauth2/authorize`; returns the code.
    static func code(
        _ h: Harness, session: String, client: String = "app", redirect: String = app, scope: String = "openid email profile", extra: [(String, String)] = []
    ) async throws -> String {
        let query = FormEncoding.encode([("response_type", "code"), ("client_id", client), ("redirect_uri", redirect), ("scope", scope), ("state", "st-1")] + extra)
        let answer = try await h.get("/oauth2/authorize?" + query, cookies: [h.sessionCookie: session])
        #expect(answer.status == .found)
        let location = try #require(answer.location)
        #expect(location.hasPrefix(redirect + "?"))
        let fields = Dictionary(Fixtures.queryPairs(location), uniquingKeysWith: { first, _ in first })
        #expect(fields["state"] == "st-1")
        #expect(fields["iss"] == h.settings.provider.issuer)
        return try #require(fields["code"])
    }

    static func exchange(_ h: Harness, code: String, headers: HTTPFields = basic("app", secret), extra: [(String, String)] = []) async throws -> TestResponse {
        try await h.post("/oauth2/token", form: FormEncoding.encode([("grant_type", "authorization_code"), ("code", code), ("redirect_uri", app)] + extra), headers: headers)
    }

    static func json(_ response: TestResponse) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(response.text.utf8)) as? [String: Any])
    }

    /// The claims of `token` after checking its signature against `/oauth2/jwks` with swift-crypto.
    static func verifiedClaims(_ h: Harness, _ token: String) async throws -> [String: Any] {
        let parts = token.split(separator: ".").map(String.init)
        #expect(parts.count == 3)
        let headerData = try #require(Base64URL.decode(parts[0]))
        let header = try #require(try JSONSerialization.jsonObject(with: headerData) as? [String: Any])
        let jwks = try json(try await h.get("/oauth2/jwks"))
        let keys = try #require(jwks["keys"] as? [[String: String]])
        let key = try #require(keys.first { $0["kid"] == header["kid"] as? String })
        let input = Data((parts[0] + "." + parts[1]).utf8)
        let signature = try #require(Base64URL.decode(parts[2]))
        switch header["alg"] as? String {
        case "RS256":
            let modulus = try #require(Base64URL.decode(key["n"] ?? ""))
            let exponent = try #require(Base64URL.decode(key["e"] ?? ""))
            let publicKey = try _RSA.Signing.PublicKey(n: modulus, e: exponent)
            let valid = publicKey.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: signature), for: SHA256.hash(data: input), padding: _RSA.Signing.Padding.insecurePKCS1v1_5)
            #expect(valid)
        case "ES256":
            let x = try #require(Base64URL.decode(key["x"] ?? ""))
            let y = try #require(Base64URL.decode(key["y"] ?? ""))
            let publicKey = try P256.Signing.PublicKey(rawRepresentation: x + y)
            let valid = publicKey.isValidSignature(try P256.Signing.ECDSASignature(rawRepresentation: signature), for: input)
            #expect(valid)
        default:
            Issue.record("unexpected alg \(String(describing: header["alg"]))")
        }
        let payload = try #require(Base64URL.decode(parts[1]))
        return try #require(try JSONSerialization.jsonObject(with: payload) as? [String: Any])
    }

    @Test("discovery: issuer exactly public_url without a trailing slash, every endpoint, S256 only, the auth methods")
    func discovery() async throws {
        try await withServer(Self.options) { h in
            let document = try Self.json(try await h.get("/.well-known/openid-configuration"))
            let issuer = h.settings.provider.issuer
            #expect(issuer == "http://localhost")
            #expect(document["issuer"] as? String == issuer)
            for (key, path) in [
                ("authorization_endpoint", "/oauth2/authorize"), ("token_endpoint", "/oauth2/token"), ("userinfo_endpoint", "/oauth2/userinfo"),
                ("jwks_uri", "/oauth2/jwks"), ("revocation_endpoint", "/oauth2/revoke"), ("end_session_endpoint", "/oauth2/end-session"),
                ("device_authorization_endpoint", "/oauth2/device_authorization"), ("introspection_endpoint", "/oauth2/introspect"),
            ] {
                #expect(document[key] as? String == issuer + path)
            }
            #expect(document["code_challenge_methods_supported"] as? [String] == ["S256"])
            #expect(document["token_endpoint_auth_methods_supported"] as? [String] == ["client_secret_basic", "client_secret_post", "none"])
            #expect(document["grant_types_supported"] as? [String] == ["authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code", "client_credentials"])
            #expect(document["authorization_response_iss_parameter_supported"] as? Bool == true)
        }
    }

    @Test("an unknown client or an unregistered redirect URI gets a 400 page at once, never a redirect and never a trip to Apple")
    func unknownClientOrRedirect() async throws {
        try await withServer(Self.options) { h in
            for query in [
                "client_id=nobody&redirect_uri=" + FormEncoding.encode(Self.app),
                "client_id=app&redirect_uri=" + FormEncoding.encode("https://app.example.org/callback/evil"),
                "client_id=app&redirect_uri=" + FormEncoding.encode("https://app.example.org/"),
                "client_id=app",
            ] {
                let answer = try await h.get("/oauth2/authorize?response_type=code&scope=openid&" + query)
                #expect(answer.status == .badRequest, "\(query)")
                #expect(answer.location == nil)
                #expect(answer.errorTitle == "This app is not registered here")
            }
            #expect(try h.database.count("pending_authorizations") == 0)
        }
    }

    @Test("without a session: to Sign in with Apple and back to the same authorization; prompt=none: login_required to the client with state and iss (RFC 9207), without iss for a client registered so (mod_auth_openidc reads an error with iss as a provider-started sign-in)")
    func withoutSession() async throws {
        var options = Self.options
        var apache = ProviderClientRecord(clientID: "apache", secretHash: ProviderSettings.hash(Self.secret), redirectURIs: [Self.app], createdAt: Date())
        apache.issInErrors = false
        options.providerClients.append(apache)
        try await withServer(options) { h in
            let query = FormEncoding.encode([("response_type", "code"), ("client_id", "app"), ("redirect_uri", Self.app), ("scope", "openid"), ("state", "xyz"), ("nonce", "n-1")])
            let away = try await h.get("/oauth2/authorize?" + query)
            #expect(away.status == .found)
            let location = try #require(away.location)
            #expect(location.hasPrefix("http://localhost/auth/apple?rd="))
            let rd = try #require(Dictionary(Fixtures.queryPairs(location), uniquingKeysWith: { a, _ in a })["rd"])
            #expect(rd.hasPrefix("http://localhost/oauth2/authorize?"))
            // After Apple, the person lands on that authorization again, now with a session: a code for the client.
            let signIn = try await h.signIn(returnTo: nil)
            let session = try #require(signIn.session)
            let back = try await h.get(String(rd.dropFirst("http://localhost".count)), cookies: [h.sessionCookie: session])
            #expect(back.location?.hasPrefix(Self.app + "?code=") == true)

            let none = try await h.get("/oauth2/authorize?" + query + "&prompt=none")
            #expect(none.status == .found)
            let fields = Dictionary(Fixtures.queryPairs(try #require(none.location)), uniquingKeysWith: { a, _ in a })
            #expect(fields["error"] == "login_required")
            #expect(fields["state"] == "xyz")
            #expect(fields["iss"] == "http://localhost")
            let apacheQuery = query.replacingOccurrences(of: "client_id=app", with: "client_id=apache")
            let apacheNone = try await h.get("/oauth2/authorize?" + apacheQuery + "&prompt=none")
            let apacheFields = Dictionary(Fixtures.queryPairs(try #require(apacheNone.location)), uniquingKeysWith: { a, _ in a })
            #expect(apacheFields["error"] == "login_required")
            #expect(apacheFields["iss"] == nil)
            // prompt=login sends a signed-in person to Apple again.
            let again = try await h.get("/oauth2/authorize?" + query + "&prompt=login", cookies: [h.sessionCookie: session])
            #expect(again.location?.hasPrefix("http://localhost/auth/apple?rd=") == true)
            #expect(again.location?.contains("prompt") == false)
        }
    }

    @Test("code flow: client_secret_basic (form-urlencoded before Base64) and client_secret_post; the id_token verifies against the key set with every claim; userinfo; Cache-Control no-store")
    func codeFlow() async throws {
        try await withServer(Self.options) { h in
            let session = try #require(try await h.signIn(user: Fixtures.ada, firstName: "Ada").session)
            let code = try await Self.code(h, session: session, extra: [("nonce", "nonce-abc")])
            let answer = try await Self.exchange(h, code: code)
            #expect(answer.status == .ok, "\(answer.text)")
            #expect(answer.headers[.cacheControl] == "no-store")
            let tokens = try Self.json(answer)
            #expect(tokens["token_type"] as? String == "Bearer")
            let accessToken = try #require(tokens["access_token"] as? String)
            let claims = try await Self.verifiedClaims(h, try #require(tokens["id_token"] as? String))
            #expect(claims["iss"] as? String == "http://localhost")
            #expect(claims["aud"] as? String == "app")
            #expect(claims["sub"] as? String == Fixtures.ada)
            #expect(claims["nonce"] as? String == "nonce-abc")
            #expect(claims["email"] as? String == Fixtures.adaEmail)
            #expect(claims["email_verified"] as? Bool == true)
            #expect(claims["given_name"] as? String == "Ada")
            #expect(claims["at_hash"] as? String == Digests.codeHash(accessToken))
            #expect(claims["auth_time"] is Int)

            let info = try await h.get("/oauth2/userinfo", headers: [.authorization: "Bearer " + accessToken])
            #expect(info.status == .ok)
            let user = try Self.json(info)
            #expect(user["sub"] as? String == Fixtures.ada)
            #expect(user["name"] as? String == claims["name"] as? String)

            // client_secret_post, a second sign-in: Apple sends no name now, siwa still does.
            let again = try await Self.code(h, session: session)
            let posted = try await Self.exchange(h, code: again, headers: [:], extra: [("client_id", "app"), ("client_secret", Self.secret)])
            #expect(posted.status == .ok)
            let second = try await Self.verifiedClaims(h, try #require(try Self.json(posted)["id_token"] as? String))
            #expect(second["given_name"] as? String == "Ada")
        }
    }

    @Test("client authentication: wrong secret by Basic → 401 invalid_client with WWW-Authenticate; by post → 401; unknown client → 401; the code is not spent")
    func clientAuthentication() async throws {
        try await withServer(Self.options) { h in
            let session = try #require(try await h.signIn().session)
            let code = try await Self.code(h, session: session)
            let basic = try await Self.exchange(h, code: code, headers: Self.basic("app", "wrong"))
            #expect(basic.status == .unauthorized)
            #expect(try Self.json(basic)["error"] as? String == "invalid_client")
            #expect(basic.headers[.wwwAuthenticate]?.hasPrefix("Basic") == true)
            let posted = try await Self.exchange(h, code: code, headers: [:], extra: [("client_id", "app"), ("client_secret", "wrong")])
            #expect(posted.status == .unauthorized)
            #expect(try Self.json(posted)["error"] as? String == "invalid_client")
            let unknown = try await Self.exchange(h, code: code, headers: Self.basic("nobody", Self.secret))
            #expect(unknown.status == .unauthorized)
            // A confidential client cannot pass as public by leaving the secret out.
            let bare = try await Self.exchange(h, code: code, headers: [:], extra: [("client_id", "app")])
            #expect(bare.status == .unauthorized)
            #expect(try await Self.exchange(h, code: code).status == .ok)
        }
    }

    @Test("a code is single use: a replay gets invalid_grant and revokes the tokens it issued; another client's code and an expired code get invalid_grant")
    func codeReplayAndBinding() async throws {
        // The codes live as long as they do by default: with the 1 s lifetime the expiry needs, the first exchange came
        // too late under the full suite's load (CI's run of this session); the expired code is tried on a server of its own.
        try await withServer(Self.options) { h in
            let session = try #require(try await h.signIn().session)
            let code = try await Self.code(h, session: session)
            let first = try Self.json(try await Self.exchange(h, code: code))
            let accessToken = try #require(first["access_token"] as? String)
            let refreshToken = try #require(first["refresh_token"] as? String)
            #expect(try await h.get("/oauth2/userinfo", headers: [.authorization: "Bearer " + accessToken]).status == .ok)
            let replay = try await Self.exchange(h, code: code)
            #expect(replay.status == .badRequest)
            #expect(try Self.json(replay)["error"] as? String == "invalid_grant")
            #expect(try await h.get("/oauth2/userinfo", headers: [.authorization: "Bearer " + accessToken]).status == .unauthorized)
            let refreshed = try await h.post("/oauth2/token", form: "grant_type=refresh_token&refresh_token=" + refreshToken, headers: Self.basic("app", Self.secret))
            #expect(try Self.json(refreshed)["error"] as? String == "invalid_grant")

            let stolen = try await Self.code(h, session: session)
            let other = try await h.post(
                "/oauth2/token", form: FormEncoding.encode([("grant_type", "authorization_code"), ("code", stolen), ("redirect_uri", Self.app)]),
                headers: Self.basic("other", "other-secret")
            )
            #expect(try Self.json(other)["error"] as? String == "invalid_grant")

            let wrongRedirect = try await Self.code(h, session: session)
            let answer = try await h.post(
                "/oauth2/token", form: FormEncoding.encode([("grant_type", "authorization_code"), ("code", wrongRedirect), ("redirect_uri", Self.app + "/x")]),
                headers: Self.basic("app", Self.secret)
            )
            #expect(try Self.json(answer)["error"] as? String == "invalid_grant")
        }
        var expiring = Self.options
        expiring.providerCodeLifetime = 1
        try await withServer(expiring) { h in
            let session = try #require(try await h.signIn().session)
            let late = try await Self.code(h, session: session)
            try await Task.sleep(for: .milliseconds(1_500))
            #expect(try Self.json(try await Self.exchange(h, code: late))["error"] as? String == "invalid_grant")
        }
    }

    @Test("PKCE: required for a public client, S256 only, verifier checked; a verifier without a challenge refused; ES256 id_tokens on request")
    func pkce() async throws {
        try await withServer(Self.options) { h in
            let session = try #require(try await h.signIn().session)
            let spa = "http://127.0.0.1:5173/cb"
            let missing = try await h.get(
                "/oauth2/authorize?" + FormEncoding.encode([("response_type", "code"), ("client_id", "spa"), ("redirect_uri", spa), ("scope", "openid"), ("state", "s")]),
                cookies: [h.sessionCookie: session]
            )
            #expect(Dictionary(Fixtures.queryPairs(try #require(missing.location)), uniquingKeysWith: { a, _ in a })["error"] == "invalid_request")
            let verifier = Self.verifier()
            let plain = try await h.get(
                "/oauth2/authorize?" + FormEncoding.encode([("response_type", "code"), ("client_id", "spa"), ("redirect_uri", spa), ("scope", "openid"), ("code_challenge", verifier), ("code_challenge_method", "plain")]),
                cookies: [h.sessionCookie: session]
            )
            #expect(plain.location?.contains("error=invalid_request") == true)

            func spaCode() async throws -> String {
                try await Self.code(h, session: session, client: "spa", redirect: spa, extra: [("code_challenge", Self.challenge(verifier)), ("code_challenge_method", "S256")])
            }
            func redeem(_ code: String, verifier: String?) async throws -> TestResponse {
                var form = [("grant_type", "authorization_code"), ("code", code), ("redirect_uri", spa), ("client_id", "spa")]
                if let verifier { form.append(("code_verifier", verifier)) }
                return try await h.post("/oauth2/token", form: FormEncoding.encode(form))
            }
            #expect(try Self.json(try await redeem(try await spaCode(), verifier: Self.verifier()))["error"] as? String == "invalid_grant")
            #expect(try Self.json(try await redeem(try await spaCode(), verifier: nil))["error"] as? String == "invalid_grant")
            let good = try await redeem(try await spaCode(), verifier: verifier)
            #expect(good.status == .ok, "\(good.text)")
            let idToken = try #require(try Self.json(good)["id_token"] as? String)
            let headerData = try #require(Base64URL.decode(idToken.split(separator: ".")[0]))
            let header = try #require(try JSONSerialization.jsonObject(with: headerData) as? [String: Any])
            #expect(header["alg"] as? String == "ES256")
            #expect(try await Self.verifiedClaims(h, idToken)["aud"] as? String == "spa")

            // A confidential client that sent no challenge cannot add a verifier later.
            let code = try await Self.code(h, session: session)
            #expect(try Self.json(try await Self.exchange(h, code: code, extra: [("code_verifier", verifier)]))["error"] as? String == "invalid_grant")
        }
    }

    @Test("refresh tokens rotate on use; a used one presented again revokes the whole grant; another client's refresh token is refused without being spent")
    func refreshRotation() async throws {
        try await withServer(Self.options) { h in
            let session = try #require(try await h.signIn().session)
            let first = try Self.json(try await Self.exchange(h, code: try await Self.code(h, session: session)))
            let refresh1 = try #require(first["refresh_token"] as? String)
            let stranger = try await h.post("/oauth2/token", form: "grant_type=refresh_token&refresh_token=" + refresh1, headers: Self.basic("other", "other-secret"))
            #expect(try Self.json(stranger)["error"] as? String == "invalid_grant")
            let second = try Self.json(try await h.post("/oauth2/token", form: "grant_type=refresh_token&refresh_token=" + refresh1, headers: Self.basic("app", Self.secret)))
            let refresh2 = try #require(second["refresh_token"] as? String)
            let access2 = try #require(second["access_token"] as? String)
            #expect(refresh2 != refresh1)
            #expect(try await h.get("/oauth2/userinfo", headers: [.authorization: "Bearer " + access2]).status == .ok)
            let reuse = try await h.post("/oauth2/token", form: "grant_type=refresh_token&refresh_token=" + refresh1, headers: Self.basic("app", Self.secret))
            #expect(try Self.json(reuse)["error"] as? String == "invalid_grant")
            #expect(try await h.get("/oauth2/userinfo", headers: [.authorization: "Bearer " + access2]).status == .unauthorized)
            let after = try await h.post("/oauth2/token", form: "grant_type=refresh_token&refresh_token=" + refresh2, headers: Self.basic("app", Self.secret))
            #expect(try Self.json(after)["error"] as? String == "invalid_grant")
        }
    }

    @Test("revocation (RFC 7009): 200 for a known and an unknown token; a revoked access token gets 401 from userinfo; another client cannot revoke it")
    func revocation() async throws {
        try await withServer(Self.options) { h in
            let session = try #require(try await h.signIn().session)
            let tokens = try Self.json(try await Self.exchange(h, code: try await Self.code(h, session: session)))
            let accessToken = try #require(tokens["access_token"] as? String)
            #expect(try await h.post("/oauth2/revoke", form: "token=" + accessToken, headers: Self.basic("other", "other-secret")).status == .ok)
            #expect(try await h.get("/oauth2/userinfo", headers: [.authorization: "Bearer " + accessToken]).status == .ok)
            #expect(try await h.post("/oauth2/revoke", form: "token=" + accessToken, headers: Self.basic("app", Self.secret)).status == .ok)
            let refused = try await h.get("/oauth2/userinfo", headers: [.authorization: "Bearer " + accessToken])
            #expect(refused.status == .unauthorized)
            #expect(refused.headers[.wwwAuthenticate]?.contains("invalid_token") == true)
            #expect(try await h.post("/oauth2/revoke", form: "token=never-issued", headers: Self.basic("app", Self.secret)).status == .ok)
            #expect(try await h.post("/oauth2/revoke", form: "token=never-issued", headers: Self.basic("app", "wrong")).status == .unauthorized)
        }
    }

    @Test("end-session: an unregistered post_logout_redirect_uri gets an error page; a registered one, confirmed, ends the siwa session and returns with state")
    func endSession() async throws {
        try await withServer(Self.options) { h in
            let session = try #require(try await h.signIn().session)
            let bad = try await h.get("/oauth2/end-session?client_id=app&post_logout_redirect_uri=" + FormEncoding.encode("https://evil.example/"), cookies: [h.sessionCookie: session])
            #expect(bad.status == .badRequest)
            #expect(bad.location == nil)
            #expect(try await h.sessionPage(session).status == .ok)

            let query = "client_id=app&state=bye-1&post_logout_redirect_uri=" + FormEncoding.encode(Self.appLogout)
            let confirm = try await h.get("/oauth2/end-session?" + query, cookies: [h.sessionCookie: session])
            #expect(confirm.status == .ok)
            #expect(try await h.sessionPage(session).status == .ok, "a link alone signs nobody out")
            #expect(confirm.headers[.contentSecurityPolicy]?.contains("form-action 'self'") == true)
            #expect(confirm.headers[.contentSecurityPolicy]?.contains("https://app.example.org") == true)
            let csrf = try #require(confirm.csrfToken)
            let done = try await h.post("/oauth2/end-session", form: "csrf_token=\(csrf)&" + query, cookies: [h.sessionCookie: session])
            #expect(done.status == .seeOther)
            #expect(done.location == Self.appLogout + "?state=bye-1")
            #expect(try await h.sessionPage(session).status == .unauthorized)
        }
    }

    @Test("a code issued just before its session ends does not redeem afterwards (invalid_grant), and gives no tokens for the ended session")
    func codeBoundToItsSession() async throws {
        try await withServer(Self.options) { h in
            let session = try #require(try await h.signIn().session)
            let code = try await Self.code(h, session: session)
            // The person signs out (the sessions page's, the console's and the sign-out page's way alike).
            #expect(try await h.store.deleteSession(idHash: SignInFlow.hash(session)))
            let answer = try await Self.exchange(h, code: code)
            #expect(answer.status == .badRequest)
            #expect(try Self.json(answer)["error"] as? String == "invalid_grant")
            #expect(try h.database.count("provider_tokens") == 0)
        }
    }

    @Test("end-session believes an id_token_hint siwa signed only: a forged hint naming a client is ignored, so its registered post-logout URI is not used; a genuine one, even expired, names its client")
    func endSessionVerifiesTheHint() async throws {
        try await withServer(Self.options) { h in
            let session = try #require(try await h.signIn().session)
            let tokens = try Self.json(try await Self.exchange(h, code: try await Self.code(h, session: session)))
            let idToken = try #require(tokens["id_token"] as? String)
            let uri = "&post_logout_redirect_uri=" + FormEncoding.encode(Self.appLogout)
            let genuine = try await h.get("/oauth2/end-session?id_token_hint=" + idToken + uri, cookies: [h.sessionCookie: session])
            #expect(genuine.status == .ok, "the confirmation page for the client the hint names")
            // The same claims, re-signed by no key of siwa's (the signature of another token), and unsigned.
            let parts = idToken.split(separator: ".")
            let other = try #require(try Self.json(try await Self.exchange(h, code: try await Self.code(h, session: session, extra: [("nonce", "x")])))["id_token"] as? String)
            let forged = parts[0] + "." + parts[1] + "." + other.split(separator: ".")[2]
            let none = Base64URL.encode(Data(#"{"alg":"none"}"#.utf8)) + "." + parts[1] + "."
            for hint in [String(forged), none] {
                let answer = try await h.get("/oauth2/end-session?id_token_hint=" + hint + uri, cookies: [h.sessionCookie: session])
                #expect(answer.status == .badRequest, "a hint siwa did not sign names no client: the URI is not registered for none")
                #expect(h.logs.text.contains("id_token_hint siwa did not sign"))
            }
        }
    }

    @Test("Apple's consent-revoked (the path a failed daily refresh check takes too) and an account deletion end the person's siwa-issued tokens with their sessions")
    func appleEventsRevokeTokens() async throws {
        try await withServer(Self.options) { h in
            let ada = try #require(try await h.signIn(user: Fixtures.ada).session)
            let grace = try #require(try await h.signIn(user: Fixtures.grace).session)
            let adaTokens = try Self.json(try await Self.exchange(h, code: try await Self.code(h, session: ada)))
            let graceTokens = try Self.json(try await Self.exchange(h, code: try await Self.code(h, session: grace)))
            func userinfo(_ tokens: [String: Any]) async throws -> HTTPResponse.Status {
                try await h.get("/oauth2/userinfo", headers: [.authorization: "Bearer " + (tokens["access_token"] as? String ?? "")]).status
            }
            #expect(try await userinfo(adaTokens) == .ok)
            // What the store does for a consent-revoked notification and a refresh check Apple refuses.
            try await h.store.revokeLink(subject: Fixtures.ada, at: Date())
            #expect(try await userinfo(adaTokens) == .unauthorized)
            let refresh = try await h.post("/oauth2/token", form: "grant_type=refresh_token&refresh_token=" + (adaTokens["refresh_token"] as? String ?? ""), headers: Self.basic("app", Self.secret))
            #expect(try Self.json(refresh)["error"] as? String == "invalid_grant")
            #expect(try await h.sessionPage(ada).status == .unauthorized)
            #expect(try await userinfo(graceTokens) == .ok, "another person's tokens are untouched")
            // Account deletion from the session page.
            let page = try await h.sessionPage(grace)
            let deleted = try await h.post("/account/delete", form: "confirm=yes&csrf_token=" + (page.csrfToken ?? ""), cookies: [h.sessionCookie: grace])
            #expect(deleted.status.code < 400, "\(deleted.status)")
            #expect(try await userinfo(graceTokens) == .unauthorized)
        }
    }

    @Test("pairwise subjects: each sector gets its own stable sub, not Apple's, the same in the id_token and userinfo; public clients keep Apple's")
    func pairwiseSubjects() async throws {
        var options = Self.options
        options.providerClients += [
            ProviderClientRecord(clientID: "pw1", secretHash: ProviderSettings.hash("pw"), redirectURIs: ["https://one.example.net/cb"], pairwiseSubject: true, createdAt: Date()),
            ProviderClientRecord(clientID: "pw2", secretHash: ProviderSettings.hash("pw"), redirectURIs: ["https://two.example.net/cb"], pairwiseSubject: true, createdAt: Date()),
        ]
        try await withServer(options) { h in
            #expect(try Self.json(try await h.get("/.well-known/openid-configuration"))["subject_types_supported"] as? [String] == ["public", "pairwise"])
            let session = try #require(try await h.signIn().session)
            func subjects(_ client: String, _ redirect: String) async throws -> (String?, String?) {
                let code = try await Self.code(h, session: session, client: client, redirect: redirect)
                let answer = try await h.post(
                    "/oauth2/token", form: FormEncoding.encode([("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirect)]),
                    headers: client.hasPrefix("pw") ? Self.basic(client, "pw") : Self.basic("app", Self.secret)
                )
                let tokens = try Self.json(answer)
                let idToken = try await Self.verifiedClaims(h, try #require(tokens["id_token"] as? String))
                let info = try Self.json(try await h.get("/oauth2/userinfo", headers: [.authorization: "Bearer " + (tokens["access_token"] as? String ?? "")]))
                #expect(idToken["sub"] as? String == info["sub"] as? String)
                sids.append(try #require(idToken["sid"] as? String))
                return (idToken["sub"] as? String, info["sub"] as? String)
            }
            var sids: [String] = []
            let one = try await subjects("pw1", "https://one.example.net/cb").0
            let two = try await subjects("pw2", "https://two.example.net/cb").0
            let plain = try await subjects("app", Self.app).0
            // One siwa session, three clients: three sids, none the session's own public id, so no two clients can
            // link the person through it.
            #expect(Set(sids).count == 3, "\(sids)")
            #expect(!sids.contains(SessionRecord.publicID(idHash: SignInFlow.hash(session))))
            #expect(plain == Fixtures.ada)
            #expect(one != nil && two != nil && one != two)
            #expect(one != Fixtures.ada && two != Fixtures.ada)
            #expect(try await subjects("pw1", "https://one.example.net/cb").0 == one, "stable across sign-ins")
        }
    }

    @Test("no code, token or client secret in the log; only their hashes in the store")
    func secretsNotLoggedAndStoredHashed() async throws {
        try await withServer(Self.options) { h in
            let session = try #require(try await h.signIn().session)
            let code = try await Self.code(h, session: session)
            let tokens = try Self.json(try await Self.exchange(h, code: code))
            let secrets = [code, Self.secret, try #require(tokens["access_token"] as? String), try #require(tokens["refresh_token"] as? String), try #require(tokens["id_token"] as? String)]
            _ = try await Self.exchange(h, code: code)
            _ = try await Self.exchange(h, code: code, headers: Self.basic("app", "wrong-" + Self.secret))
            let log = h.logs.text
            #expect(log.contains("authorization code used again"))
            for secret in secrets { #expect(!log.contains(secret)) }
            let dump = try h.database.read { db in
                try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'").flatMap { table in
                    try Row.fetchAll(db, sql: "SELECT * FROM \"\(table)\"").map { "\($0)" }
                }.joined(separator: "\n")
            }
            #expect(dump.contains(ProviderSettings.hash(code)))
            for secret in secrets.dropLast() { #expect(!dump.contains(secret)) }
        }
    }

    @Test("groups: the groups scope puts the person's groups in the id_token and userinfo (empty too); a client limited to a group refuses others with access_denied, at once after a change")
    func groups() async throws {
        var options = Self.options
        options.providerClients.append(ProviderClientRecord(
            clientID: "admin-app", secretHash: ProviderSettings.hash("admin-secret"), redirectURIs: [Self.app], createdAt: Date(), allowedGroups: ["admins"]
        ))
        options.front = FrontSettings(publicOrigin: "http://localhost", access: AccessControl(AccessConfiguration(groups: ["admins": [.email(Fixtures.adaEmail)]])))
        try await withServer(options) { h in
            let discovery = try Self.json(try await h.get("/.well-known/openid-configuration"))
            #expect((discovery["scopes_supported"] as? [String])?.contains("groups") == true)
            #expect((discovery["claims_supported"] as? [String])?.contains("groups") == true)
            let ada = try #require(try await h.signIn().session)
            let code = try await Self.code(h, session: ada, scope: "openid email groups")
            let tokens = try Self.json(try await Self.exchange(h, code: code))
            let claims = try await Self.verifiedClaims(h, try #require(tokens["id_token"] as? String))
            #expect(claims["groups"] as? [String] == ["admins"])
            let userinfo = try Self.json(try await h.get("/oauth2/userinfo", headers: [.authorization: "Bearer " + (try #require(tokens["access_token"] as? String))]))
            #expect(userinfo["groups"] as? [String] == ["admins"])
            // Without the scope, no groups claim.
            let plain = try Self.json(try await Self.exchange(h, code: try await Self.code(h, session: ada)))
            #expect(try await Self.verifiedClaims(h, try #require(plain["id_token"] as? String))["groups"] == nil)
            // 李雷 is in no group: an empty array with the scope; refused by the client limited to admins.
            let lilei = try #require(try await h.signIn(user: Fixtures.lilei).session)
            let hers = try Self.json(try await Self.exchange(h, code: try await Self.code(h, session: lilei, scope: "openid groups")))
            #expect(try await Self.verifiedClaims(h, try #require(hers["id_token"] as? String))["groups"] as? [String] == [])
            func limited(_ session: String) async throws -> [String: String] {
                let query = FormEncoding.encode([("response_type", "code"), ("client_id", "admin-app"), ("redirect_uri", Self.app), ("scope", "openid groups"), ("state", "st-9")])
                let answer = try await h.get("/oauth2/authorize?" + query, cookies: [h.sessionCookie: session])
                #expect(answer.status == .found)
                return Dictionary(Fixtures.queryPairs(try #require(answer.location)), uniquingKeysWith: { first, _ in first })
            }
            let refused = try await limited(lilei)
            #expect(refused["error"] == "access_denied" && refused["code"] == nil && refused["state"] == "st-9")
            #expect(try await limited(ada)["code"] != nil)
            // Taken out of the group (the store's groups change; here the configuration's): refused at the next sign-in.
            h.settings.front.access.reload(AccessConfiguration())
            #expect(try await limited(ada)["error"] == "access_denied")
        }
    }
}
