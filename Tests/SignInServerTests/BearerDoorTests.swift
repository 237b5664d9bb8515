import AppleIDEmulator
import AppleSignIn
import AsyncHTTPClient
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import JOSE
@testable import SignInServer
import Testing

extension Harness {
    /// A native app's sign-in as the iOS app makes it: the emulator issues the identity token and code for `bundle`
    /// (what `ASAuthorizationAppleIDProvider` gives the app), the app posts them to siwa and gets its session token.
    func nativeToken(sub: String = Fixtures.ada, bundle: String = EmulatorConfiguration.testBundleID) async throws -> String {
        var request = HTTPClientRequest(url: emulatorURL + "/emulator/admin/native-authorization")
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(data: try JSONSerialization.data(withJSONObject: ["client_id": bundle, "sub": sub])))
        let answer = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let device = try #require(try JSONSerialization.jsonObject(with: Data(try await answer.body.collect(upTo: 1 << 16).readableBytesView)) as? [String: Any])
        let body = try JSONSerialization.data(withJSONObject: ["identityToken": device["identityToken"] ?? "", "authorizationCode": device["authorizationCode"] ?? ""])
        let signedIn = try await self.request(.post, "/auth/api/apple/native", headers: [.contentType: "application/json"], body: String(decoding: body, as: UTF8.self))
        #expect(signedIn.status == .ok, "\(signedIn.text)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(signedIn.text.utf8)) as? [String: Any])
        return try #require(json["session_token"] as? String)
    }

    /// An access token of siwa's OpenID provider, issued to the client `app` of `ProviderTests.options` after the
    /// person of `session` authorized it; and the tokens' JSON.
    func accessToken(session: String) async throws -> [String: Any] {
        let code = try await ProviderTests.code(self, session: session)
        return try ProviderTests.json(try await ProviderTests.exchange(self, code: code))
    }
}

/// Bearer tokens at the door (issue 35, A and B): the site's iOS app and the OpenID provider's clients pass
/// `/auth/check` and `/auth/forward` with the token siwa issued them, under the same rules as browsers, and every
/// client that cannot follow a redirect to Apple is answered in a form it can read (RFC 6750, RFC 9457).
@Suite("Bearer tokens at the door: the iOS app, the provider's clients, scripts")
struct BearerDoorTests {
    static let bundle = EmulatorConfiguration.testBundleID
    static let uri = HTTPField.Name("X-Forwarded-Uri")!
    static let host = HTTPField.Name("X-Forwarded-Host")!
    static let method = HTTPField.Name("X-Forwarded-Method")!
    static let proto = HTTPField.Name("X-Forwarded-Proto")!
    static let requestMethod = HTTPField.Name("Access-Control-Request-Method")!
    static let fetchMode = HTTPField.Name("Sec-Fetch-Mode")!

    static func header(_ response: TestResponse, _ name: String) -> String? {
        HTTPField.Name(name).flatMap { response.headers[$0] }
    }

    static func bearer(_ token: String) -> HTTPFields { [.authorization: "Bearer " + token] }

    /// A front with `rules` (`access_rules` JSON) and the provider's clients.
    static func options(rules: String = "[]", trusted: Bool = false) throws -> ServerOptions {
        var options = ProviderTests.options
        options.front = FrontSettings(
            publicOrigin: "http://localhost", redirects: RedirectPolicy(domains: ["app.localhost"]),
            access: AccessControl(AccessConfiguration(rules: try AccessRule.parse(json: rules)))
        )
        if trusted { options.trustedProxies = ["127.0.0.1"] }
        options.live = trusted
        return options
    }

    @Test("a native app's session token passes /auth/check (202) and /auth/forward (200) with the identity and X-Auth-Request-Client naming its bundle ID; the cookie's answer carries no client")
    func nativeTokenPasses() async throws {
        try await withServer(try Self.options()) { h in
            let token = try await h.nativeToken()
            for (path, status) in [("/auth/check", HTTPResponse.Status.accepted), ("/auth/forward", .ok)] {
                let answer = try await h.get(path, headers: Self.bearer(token))
                #expect(answer.status == status, "\(path): \(answer.text)")
                #expect(Self.header(answer, "X-Auth-Request-User") == Fixtures.ada)
                #expect(Self.header(answer, "X-Auth-Request-Client") == Self.bundle)
                #expect(Self.header(answer, "X-Auth-Request-Authorization") == nil, "the rule does not pass the Authorization field")
            }
            let session = try #require(try await h.signIn().session)
            let browser = try await h.get("/auth/check", cookies: [h.sessionCookie: session])
            #expect(browser.status == .accepted)
            #expect(Self.header(browser, "X-Auth-Request-Client") == nil)
        }
    }

    @Test("a token siwa does not take gets 401 with WWW-Authenticate Bearer error=invalid_token: unknown, a browser's session id, after its session ended; the page's answer is problem details, the check's is empty")
    func invalidTokens() async throws {
        try await withServer(try Self.options()) { h in
            let browserSession = try #require(try await h.signIn().session)
            let token = try await h.nativeToken()
            #expect(try await h.get("/auth/check", headers: Self.bearer(token)).status == .accepted)
            // The app's session ends (its sign-out, as a person's would): the token is refused at once.
            #expect(try await h.store.deleteSession(idHash: SignInFlow.hash(token)))
            for bad in ["unknown-" + RandomToken.generate(), browserSession, token, BearerCredential.accessTokenPrefix + RandomToken.generate()] {
                let check = try await h.get("/auth/check", headers: Self.bearer(bad))
                #expect(check.status == .unauthorized)
                #expect(check.body.readableBytes == 0)
                let challenge = try #require(check.headers[.wwwAuthenticate])
                #expect(challenge.hasPrefix("Bearer realm=\"siwa\""))
                #expect(challenge.contains("error=\"invalid_token\""))
                let forward = try await h.get("/auth/forward", headers: Self.bearer(bad).merging([.accept: "text/html"]))
                #expect(forward.status == .unauthorized, "a bearer is never sent to sign in")
                #expect(forward.location == nil)
                #expect(forward.headers[.contentType] == "application/problem+json")
                #expect(forward.text.contains("invalid_token"))
                #expect(forward.headers[.wwwAuthenticate]?.contains("error=\"invalid_token\"") == true)
            }
            // No token value reaches a log line.
            #expect(!h.logs.text.contains(token) && !h.logs.text.contains(browserSession))
        }
    }

    @Test("a bearer in the wrong place is refused before any rule, even a public one: two Authorization fields, access_token in the original query (any case or encoding); a malformed value is invalid_request")
    func wrongPlaces() async throws {
        try await withServer(try Self.options(rules: #"[{"paths": ["^/open"], "policy": "public"}]"#, trusted: true)) { h in
            let token = try await h.nativeToken()
            var two = Self.bearer(token)
            two.append(HTTPField(name: .authorization, value: "Bearer " + token))
            let twice = try await h.get("/auth/forward", headers: two.merging([Self.uri: "/open/x", Self.host: "app.localhost"]))
            #expect(twice.status == .badRequest)
            #expect(twice.headers[.wwwAuthenticate]?.contains("error=\"invalid_request\"") == true)
            // nginx turns any status but 401 and 403 into a 500: the check says 401 with the same challenge.
            let checked = try await h.get("/auth/check", headers: two)
            #expect(checked.status == .unauthorized)
            #expect(checked.headers[.wwwAuthenticate]?.contains("error=\"invalid_request\"") == true)
            for query in ["access_token=abc", "a=1&ACCESS_TOKEN=abc", "access%5Ftoken=abc", "x=1&access_token"] {
                let answer = try await h.get("/auth/forward", headers: [Self.uri: "/open/x?" + query, Self.host: "app.localhost"])
                #expect(answer.status == .badRequest, "\(query)")
                #expect(answer.text.contains("access_token"))
            }
            // The client's own X-Forwarded-Uri beside the proxy's X-Original-URI (nginx passes both): the token in
            // either is refused.
            let original = HTTPField.Name("X-Original-URI")!
            let hidden = try await h.get("/auth/forward", headers: [Self.uri: "/open/x", original: "/open/x?access_token=abc", Self.host: "app.localhost"])
            #expect(hidden.status == .badRequest)
            // Near names are not the token's parameter; a public path passes them.
            for query in ["my_access_token=1", "access_tokens=1", "token=1"] {
                #expect(try await h.get("/auth/forward", headers: [Self.uri: "/open/x?" + query, Self.host: "app.localhost"]).status == .ok, "\(query)")
            }
            for value in ["Bearer", "Bearer a b", "Bearer ä", "bearer ===", "Bearer " + String(repeating: "a", count: 5000)] {
                let answer = try await h.get("/auth/check", headers: [.authorization: value])
                #expect(answer.status == .unauthorized, "\(value.prefix(20))")
                #expect(answer.headers[.wwwAuthenticate]?.contains("invalid_request") == true, "\(value.prefix(20))")
            }
            // Another scheme is not siwa's: the cookie (none here) decides, and the challenge names Bearer.
            let basic = try await h.get("/auth/check", headers: [.authorization: "Basic YTpi"])
            #expect(basic.status == .unauthorized)
            #expect(basic.headers[.wwwAuthenticate] == "Bearer realm=\"siwa\"")
        }
    }

    @Test("two credentials a proxy joined into one Authorization field (Envoy joins its inline headers with a comma) are refused as two fields are, on a public path too, generated over schemes, spacing and order; one credential, a Digest one's commas included, is read as before")
    func joinedCredentials() async throws {
        var generator = SystemRandomNumberGenerator()
        let tokens = ["abc", "siwa_at_" + String(repeating: "x", count: 20), "a-b.c_d~e+f/g==", "Zm9vOmJhcg=="]
        let separators = [",", ", ", " ,", " , ", ",\t"]
        for _ in 0..<500 {
            let bearer = "Bearer " + tokens.randomElement(using: &generator)!
            let other = ["Bearer " + tokens.randomElement(using: &generator)!, "Basic " + tokens.randomElement(using: &generator)!, "bearer " + tokens.randomElement(using: &generator)!]
                .randomElement(using: &generator)!
            let pair = Bool.random(using: &generator) ? [bearer, other] : [other, bearer]
            let value = pair.joined(separator: separators.randomElement(using: &generator)!)
            guard case .refused(let problem) = BearerCredential.read(authorization: [value], query: nil) else {
                Issue.record("\(value) was not refused: \(BearerCredential.read(authorization: [value], query: nil))")
                continue
            }
            #expect(problem.code == .invalidRequest)
        }
        for single in ["Bearer abc", "Digest username=\"a\", realm=\"b\", nonce=\"c\"", "Basic YTpi", "Bearer abc,", "Digest a=\"Bearer x\", b=c"] {
            if case .refused = BearerCredential.read(authorization: [single], query: nil) { Issue.record("\(single) refused") }
        }
        try await withServer(try Self.options(rules: #"[{"paths": ["^/open"], "policy": "public"}]"#, trusted: true)) { h in
            let token = try await h.nativeToken()
            let joined = try await h.get("/auth/forward", headers: [.authorization: "Bearer \(token),Bearer \(token)", Self.uri: "/open/x", Self.host: "app.localhost"])
            #expect(joined.status == .badRequest)
            #expect(joined.headers[.wwwAuthenticate]?.contains("error=\"invalid_request\"") == true)
        }
    }

    @Test("an access token of siwa's provider passes as its client; revoked by the client, or its session signed out, it is refused at once; sent as a cookie it opens nothing")
    func providerAccessToken() async throws {
        try await withServer(try Self.options()) { h in
            let session = try #require(try await h.signIn().session)
            let tokens = try await h.accessToken(session: session)
            let access = try #require(tokens["access_token"] as? String)
            #expect(access.hasPrefix("siwa_at_"))
            let passed = try await h.get("/auth/check", headers: Self.bearer(access))
            #expect(passed.status == .accepted)
            #expect(Self.header(passed, "X-Auth-Request-Client") == "app")
            #expect(try await h.get("/auth/check", cookies: [h.sessionCookie: access]).status == .unauthorized)
            // Revoked by its client (RFC 7009).
            let revoke = try await h.post("/oauth2/revoke", form: FormEncoding.encode([("token", access)]), headers: ProviderTests.basic("app", ProviderTests.secret))
            #expect(revoke.status == .ok)
            #expect(try await h.get("/auth/check", headers: Self.bearer(access)).status == .unauthorized)
            // A second grant ends with the session it began in: the person signs out.
            let second = try #require(try await h.accessToken(session: session)["access_token"] as? String)
            #expect(try await h.get("/auth/check", headers: Self.bearer(second)).status == .accepted)
            #expect(try await h.store.deleteSession(idHash: SignInFlow.hash(session)))
            #expect(try await h.get("/auth/check", headers: Self.bearer(second)).status == .unauthorized)
            #expect(try await h.get("/oauth2/userinfo", headers: Self.bearer(second)).status == .unauthorized)
        }
    }

    @Test("a rule that names clients admits its own app and no other, nor a browser; a token the rules refuse gets 403 with error=insufficient_scope")
    func clientsRule() async throws {
        let rules = #"[{"paths": ["^/api/ios/"], "policy": "allow", "clients": ["\#(Self.bundle)"]}, {"paths": ["^/api/web/"], "policy": "allow", "clients": ["app"]}]"#
        try await withServer(try Self.options(rules: rules, trusted: true)) { h in
            let native = try await h.nativeToken()
            let session = try #require(try await h.signIn().session)
            let access = try #require(try await h.accessToken(session: session)["access_token"] as? String)
            func check(_ path: String, _ headers: HTTPFields, cookies: [String: String] = [:]) async throws -> TestResponse {
                try await h.get("/auth/check", cookies: cookies, headers: headers.merging([Self.uri: path, Self.host: "app.localhost"]))
            }
            #expect(try await check("/api/ios/me", Self.bearer(native)).status == .accepted)
            #expect(try await check("/api/web/me", Self.bearer(access)).status == .accepted)
            let otherApp = try await check("/api/ios/me", Self.bearer(access))
            #expect(otherApp.status == .forbidden)
            #expect(otherApp.headers[.wwwAuthenticate]?.contains("error=\"insufficient_scope\"") == true)
            #expect(try await check("/api/web/me", Self.bearer(native)).status == .forbidden)
            let browser = try await check("/api/ios/me", [:], cookies: [h.sessionCookie: session])
            #expect(browser.status == .forbidden)
            #expect(browser.headers[.wwwAuthenticate] == nil, "a cookie's 403 names no bearer")
        }
    }

    @Test("the same URL answers a browser's navigation with the sign-in and every script with 401 problem details and WWW-Authenticate, generated over the fields scripts send")
    func scriptsGet401() async throws {
        try await withServer(try Self.options(trusted: true)) { h in
            let original: HTTPFields = [Self.uri: "/reports", Self.host: "app.localhost", Self.proto: "http"]
            let navigation = try await h.get("/auth/forward", headers: original.merging(Fixtures.browser))
            #expect(navigation.status == .found)
            #expect(navigation.location?.hasPrefix("http://localhost/auth/apple?rd=") == true)
            let navigate = try await h.get("/auth/forward", headers: original.merging(Fixtures.browser).merging([Self.fetchMode: "navigate"]))
            #expect(navigate.status == .found)
            var markers: [(String, String)] = [("Sec-Fetch-Mode", "cors"), ("Sec-Fetch-Mode", "no-cors"), ("Sec-Fetch-Mode", "same-origin"), ("Sec-Fetch-Mode", "websocket")]
            markers += [("X-Requested-With", "XMLHttpRequest"), ("HX-Request", "true"), ("X-Inertia", "true"), ("X-Up-Version", "3.0"), ("Turbo-Frame", "main"), ("X-PJAX", "true")]
            markers.append(("Authorization", "Bearer " + RandomToken.generate()))
            for (name, value) in markers {
                for spelling in [name, name.lowercased(), name.uppercased()] {
                    let answer = try await h.get("/auth/forward", headers: original.merging(Fixtures.browser).merging([HTTPField.Name(spelling)!: value]))
                    #expect(answer.status == .unauthorized, "\(spelling): \(value)")
                    #expect(answer.location == nil)
                    #expect(answer.headers[.contentType] == "application/problem+json", "\(spelling)")
                    #expect(answer.headers[.wwwAuthenticate]?.hasPrefix("Bearer realm=\"siwa\"") == true)
                }
            }
            let check = try await h.get("/auth/check", headers: original)
            #expect(check.status == .unauthorized)
            #expect(check.headers[.wwwAuthenticate] == "Bearer realm=\"siwa\"")
        }
    }

    @Test("a CORS preflight passes a rule with cors_preflight without identity, by the original method a trusted proxy says; a client's own claim of OPTIONS, or a rule without it, needs a person")
    func corsPreflight() async throws {
        let rules = #"[{"paths": ["^/api/"], "policy": "allow", "cors_preflight": true}, {"paths": ["^/other/"], "policy": "allow"}]"#
        try await withServer(try Self.options(rules: rules, trusted: true)) { h in
            let preflight: HTTPFields = [Self.host: "app.localhost", .origin: "http://web.localhost", Self.requestMethod: "PUT"]
            let passed = try await h.get("/auth/check", headers: preflight.merging([Self.uri: "/api/items", Self.method: "OPTIONS"]))
            #expect(passed.status == .accepted)
            #expect(Self.header(passed, "X-Auth-Request-User") == nil)
            #expect(try await h.get("/auth/check", headers: preflight.merging([Self.uri: "/api/items", Self.method: "GET"])).status == .unauthorized)
            #expect(try await h.get("/auth/check", headers: preflight.merging([Self.uri: "/other/items", Self.method: "OPTIONS"])).status == .unauthorized)
            var withoutOrigin = preflight
            withoutOrigin[.origin] = nil
            #expect(try await h.get("/auth/check", headers: withoutOrigin.merging([Self.uri: "/api/items", Self.method: "OPTIONS"])).status == .unauthorized)
        }
    }

    @Test("a check's answer names the Authorization the upstream is to get, as X-Auth-Request-Authorization and as Authorization (Traefik copies a field under its own name only): the token on a pass_authorization rule, none for a token its rule keeps, the request's own on a public rule and for a cookie")
    func upstreamAuthorization() async throws {
        let rules = #"[{"paths": ["^/files/"], "policy": "allow", "pass_authorization": true}, {"paths": ["^/open/"], "policy": "public"}]"#
        try await withServer(try Self.options(rules: rules, trusted: true)) { h in
            let token = try await h.nativeToken()
            let session = try #require(try await h.signIn().session)
            let basic = "Basic b3BzOnNlY3JldA=="
            let cases: [(uri: String, authorization: String, cookie: Bool, upstream: String?)] = [
                ("/files/a", "Bearer " + token, false, "Bearer " + token),
                ("/api/a", "Bearer " + token, false, nil),
                ("/open/a", basic, false, basic),
                ("/api/a", basic, true, basic),
            ]
            for (uri, authorization, cookie, upstream) in cases {
                for path in ["/auth/check", "/auth/forward"] {
                    let answer = try await h.get(
                        path, cookies: cookie ? [h.sessionCookie: session] : [:], headers: [Self.host: "app.localhost", Self.uri: uri, .authorization: authorization]
                    )
                    #expect(answer.status.code / 100 == 2, "\(path) \(uri): \(answer.status) \(answer.text)")
                    #expect(Self.header(answer, "X-Auth-Request-Authorization") == upstream, "\(path) \(uri) \(authorization.prefix(6))")
                    #expect(answer.headers[.authorization] == upstream, "\(path) \(uri) \(authorization.prefix(6))")
                }
            }
        }
    }

    @Test("a proxy names the original request by one field of each pair and passes the client's others on: when X-Forwarded-Uri and X-Original-URI, or X-Forwarded-Method and X-Original-Method, differ, siwa believes neither, so a client behind nginx cannot have a public path or a preflight judged in place of its request")
    func disagreeingOriginals() async throws {
        let rules = #"[{"paths": ["^/open/"], "policy": "public"}, {"paths": ["^/api/"], "policy": "allow", "cors_preflight": true}]"#
        try await withServer(try Self.options(rules: rules, trusted: true)) { h in
            let original = HTTPField.Name("X-Original-URI")!
            let originalMethod = HTTPField.Name("X-Original-Method")!
            func check(_ fields: HTTPFields) async throws -> HTTPResponse.Status {
                try await h.get("/auth/check", headers: fields.merging([Self.host: "app.localhost"])).status
            }
            // What nginx's auth_request sends: its own X-Original-URI, and the client's X-Forwarded-Uri.
            let alone = try await check([original: "/open/x"])
            #expect(alone == .accepted)
            #expect(try await check([original: "/api/x", Self.uri: "/open/x"]) == .unauthorized)
            #expect(try await check([original: "/api/x", Self.uri: "/api/x"]) == .unauthorized)
            #expect(try await check([original: "/open/x", Self.uri: "/open/x"]) == .accepted)
            // A preflight only when the method the proxy wrote says OPTIONS.
            let cors: HTTPFields = [original: "/api/x", .origin: "http://web.localhost", Self.requestMethod: "PUT"]
            #expect(try await check(cors.merging([originalMethod: "OPTIONS"])) == .accepted)
            #expect(try await check(cors.merging([originalMethod: "options", Self.method: "OPTIONS"])) == .accepted)
            #expect(try await check(cors.merging([originalMethod: "GET", Self.method: "OPTIONS"])) == .unauthorized)
            #expect(try await check(cors.merging([originalMethod: "OPTIONS", Self.method: "GET"])) == .unauthorized)
        }
    }
}

extension HTTPFields {
    /// These fields with `other`'s set over them.
    func merging(_ other: HTTPFields) -> HTTPFields {
        var merged = self
        for field in other { merged[field.name] = field.value }
        return merged
    }
}
