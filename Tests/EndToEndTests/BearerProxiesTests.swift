import AppleIDEmulator
import Foundation
import NIOCore
import Testing
import TestSupport

/// The site's iOS app calls its API behind a real nginx (`auth_request`), Traefik (`forwardAuth`) or Caddy
/// (`forward_auth`), each configured with docs/front.md's block as written (ports changed) in front of the echo upstream,
/// siwa judging by the page's rules for apps with a token (`DocSnippetsTests.bearerRules`). What is asserted is what the
/// app's developer and the API's owner see: the status, the challenge, and what reaches the API.
@Suite("Bearer tokens through nginx, Traefik and Caddy, configured as docs/front.md shows")
struct BearerProxiesTests {
    static let bundle = BearerUpstreamTests.bundle

    /// docs/front.md's rules with the emulator's bundle ID for the page's app, after a public rule of the test's own
    /// (`^/open/`): the path a client would like siwa to judge instead of the one the proxy forwards.
    static func rules() throws -> String {
        let page = try DocSnippets.substituting(try DocSnippetsTests.bearerRules.text(), ["com.example.app": bundle])
        let rules = try #require(try JSONSerialization.jsonObject(with: Data(page.utf8)) as? [Any], "\(page)")
        let open: [String: Any] = ["paths": ["^/open/"], "policy": "public"]
        return String(decoding: try JSONSerialization.data(withJSONObject: [open] + rules), as: UTF8.self)
    }

    @Test("nginx auth_request with docs/front.md's block: the iOS app's token reaches its API as the person and the app, without the token unless the rule passes it; another app's API 403 insufficient_scope, an unknown token 401 invalid_token, both with nginx passing siwa's challenge; 401 at once after Apple's account-delete; a preflight passes without identity, a GET claiming to be one or another path does not")
    func nginx() async throws {
        try await Self.withSite { site, app in
            try await NginxFrontTests.withFrontNginx(site: site, app: app) { try await Self.iosClient(site: site, proxy: $0) }
        }
    }

    @Test("Traefik forwardAuth with docs/front.md's block: the same as through nginx (Authorization set from siwa's answer by authResponseHeaders)")
    func traefik() async throws {
        try await Self.withSite { site, app in
            try await DocSnippetsTests.withFrontTraefik(site: site, app: app) { try await Self.iosClient(site: site, proxy: $0) }
        }
    }

    @Test("Caddy forward_auth with docs/front.md's block: the same as through nginx (Authorization set from X-Auth-Request-Authorization, never the client's)")
    func caddy() async throws {
        try await Self.withSite { site, app in
            try await DocSnippetsTests.withFrontCaddy(site: site, app: app) { try await Self.iosClient(site: site, proxy: $0) }
        }
    }

    /// siwa in local mode with `rules()`, and the echo upstream's port.
    static func withSite(_ body: (LocalSite, Int) async throws -> Void) async throws {
        try await withEchoUpstream { app in
            try await LocalSite.run(settings: ["access_rules": try rules()]) { site in try await body(site, app) }
        }
    }

    /// The iOS app of Ada's, then others, calling the API through `proxy`; Ada's account deleted last.
    static func iosClient(site: LocalSite, proxy: RunningProxy) async throws {
        try await Visit.withClient { visit in
            let ada = site.user("Ada")
            let token = try await BearerUpstreamTests.nativeToken(site, visit, sub: ada.sub)
            let bearer = [("Authorization", "Bearer " + token), ("Accept", "application/json")]

            // Its own API: the person and the app, what the client claims under those names replaced; not the token.
            let forged = [("X-Auth-Request-User", "forged-sub"), ("X-Auth-Request-Client", "com.example.forged")]
            let own = try await visit.send(proxy.url("/api/ios/me?x=1"), headers: bearer + forged)
            #expect(own.status == 200, "\(own.text)\n\(proxy.logs())")
            let echoed = try own.echoed()
            #expect(echoed.path == "/api/ios/me?x=1")
            #expect(echoed.values("x-auth-request-user") == [ada.sub])
            #expect(echoed.values("x-auth-request-client") == [bundle])
            #expect(echoed.values("authorization") == [], "the token reached the API, where the identity headers stand for it")
            let assertion = try #require(echoed.values("x-siwa-assertion").first)
            let claims = try BearerUpstreamTests.claims(assertion)
            #expect(claims["azp"] as? String == bundle)
            #expect(claims["aud"] as? String == proxy.origin)
            #expect(claims["sub"] as? String == ada.sub)

            // A rule with pass_authorization: the API gets the token as the app sent it.
            let files = try await visit.send(proxy.url("/api/files/report.pdf"), headers: bearer)
            #expect(files.status == 200, "\(files.text)\n\(proxy.logs())")
            #expect(try files.echoed().values("authorization") == ["Bearer " + token], "\(proxy.logs())")
            #expect(try files.echoed().values("x-auth-request-client") == [bundle])
            // A request no token of siwa's let in keeps its own Authorization (the API's own login on a public route).
            let basic = "Basic " + Data("ops:secret".utf8).base64EncodedString()
            let open = try await visit.send(proxy.url("/open/status"), headers: [("Authorization", basic)])
            #expect(open.status == 200, "\(open.text)\n\(proxy.logs())")
            #expect(try open.echoed().values("authorization") == [basic], "\(proxy.logs())")

            // Another app's API: 403 with the challenge RFC 6750 gives, and the API never asked.
            let partner = try await visit.send(proxy.url("/api/partner/orders"), headers: bearer)
            #expect(partner.status == 403, "\(partner.text)\n\(proxy.logs())")
            #expect(challenge(partner)?.contains(#"error="insufficient_scope""#) == true, "\(partner.headers)")
            #expect((try? partner.echoed()) == nil)

            // A token siwa never issued: 401 invalid_token.
            let unknown = try await visit.send(proxy.url("/api/ios/me"), headers: [("Authorization", "Bearer not-a-token-of-siwa"), ("Accept", "application/json")])
            #expect(unknown.status == 401, "\(unknown.text)\n\(proxy.logs())")
            #expect(challenge(unknown)?.contains(#"error="invalid_token""#) == true, "\(unknown.headers)")
            #expect((try? unknown.echoed()) == nil)
            // A page's fetch() without a session, though it accepts HTML: 401 problem details, not the sign-in.
            let fetch = try await visit.send(proxy.url("/api/reports"), headers: [("Accept", "text/html,*/*"), ("Sec-Fetch-Mode", "cors")])
            #expect(fetch.status == 401, "\(fetch.status) \(fetch.location ?? "")")
            #expect(fetch.headers.first(name: "content-type") == "application/problem+json")
            #expect(challenge(fetch) == #"Bearer realm="siwa""#, "\(fetch.headers)")

            try await preflights(proxy: proxy, visit: visit)

            // Apple says Ada deleted her account: her app's token opens nothing from then on.
            let sent = try await visit.send(
                site.emulatorOrigin + "/emulator/admin/notify", method: .POST, headers: [("Content-Type", "application/json")],
                body: #"{"type": "account-delete", "sub": "\#(ada.sub)"}"#
            )
            #expect(sent.status == 200, "\(sent.text)")
            let after = try await visit.send(proxy.url("/api/ios/me"), headers: bearer)
            #expect(after.status == 401, "\(after.text)\n\(proxy.logs())")
            #expect(challenge(after)?.contains(#"error="invalid_token""#) == true, "\(after.headers)")
            #expect((try? after.echoed()) == nil)
        }
    }

    /// The one challenge `answer` makes: its `WWW-Authenticate`, nil when it has none or two that differ. nginx sends a
    /// 401's challenge twice (`/auth/check`'s, which `auth_request` copies, and `@siwa`'s), the same one.
    static func challenge(_ answer: Visit.Answer) -> String? {
        let challenges = Set(answer.headers["www-authenticate"])
        return challenges.count == 1 ? challenges.first : nil
    }

    /// A CORS preflight to `/api/` reaches the API without a person, by the method the proxy says; a GET that claims
    /// to be one (its own `X-Forwarded-Method`, `X-Original-Method`), or claims another path (`X-Forwarded-Uri`,
    /// `X-Original-URI` naming a public one), is a GET of the path it asks for: 401, the API never asked.
    static func preflights(proxy: RunningProxy, visit: Visit) async throws {
        let cors = [("Origin", "http://web.example"), ("Access-Control-Request-Method", "PUT")]
        let preflight = try await visit.send(proxy.url("/api/reports"), method: .OPTIONS, headers: cors)
        #expect(preflight.status == 200, "\(preflight.text)\n\(proxy.logs())")
        let echoed = try preflight.echoed()
        #expect(echoed.method == "OPTIONS")
        #expect(echoed.values("x-auth-request-user") == [])
        #expect(echoed.values("x-siwa-assertion") == [])
        let notPreflight = try await visit.send(proxy.url("/api/reports"), method: .OPTIONS, headers: [("Origin", "http://web.example")])
        #expect(notPreflight.status == 401)

        for claim in ["X-Forwarded-Method", "X-Original-Method"] {
            let claimed = try await visit.send(proxy.url("/api/reports"), headers: cors + [(claim, "OPTIONS"), ("Accept", "application/json")])
            #expect(claimed.status == 401, "a GET with \(claim): OPTIONS: \(claimed.status) \(claimed.text)")
            #expect((try? claimed.echoed()) == nil, "a GET with \(claim): OPTIONS reached the API without a person")
        }
        for claim in ["X-Forwarded-Uri", "X-Original-URI"] {
            let claimed = try await visit.send(proxy.url("/api/ios/me"), headers: [(claim, "/open/x"), ("Accept", "application/json")])
            #expect(claimed.status == 401, "GET /api/ios/me with \(claim): /open/x: \(claimed.status) \(claimed.text)")
            #expect((try? claimed.echoed()) == nil, "GET /api/ios/me with \(claim): /open/x reached the API without a person")
        }
    }
}
