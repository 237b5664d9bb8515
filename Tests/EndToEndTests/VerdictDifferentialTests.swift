import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing
import TestSupport

/// One verdict at every door (issue 46): a generated matrix of who asks (no one, a browser's cookie, a person the
/// rules turn away, the iOS app's token, an unknown or malformed token, a token in the query, two `Authorization`
/// fields), where (a public path, a group's, an app's, one that hands the token on, a preflight's) and how (methods, a
/// browser's navigation or a script), sent through every door siwa has in front of one app: `--upstream` over HTTP/1.1
/// and over h2c, nginx's `auth_request` (`/auth/check`), Traefik's `forwardAuth` (`/auth/forward`), and Envoy's
/// `ext_authz` over HTTP and over gRPC, each configured as docs/front.md shows. What a client and the app see is
/// reduced to the verdict (let through as whom, sent to sign in, 401 and why, 403) and must be the same at every door.
@Suite("Every door gives one verdict with one identity")
struct VerdictDifferentialTests {
    static let bundle = BearerUpstreamTests.bundle
    static let rules = """
        [{"paths": ["^/open/"], "policy": "public"},
         {"paths": ["^/team/"], "policy": "allow", "groups": ["admins"]},
         {"paths": ["^/api/ios/"], "policy": "allow", "clients": ["\(bundle)"]},
         {"paths": ["^/api/partner/"], "policy": "allow", "clients": ["com.example.other"]},
         {"paths": ["^/api/pass/"], "policy": "allow", "pass_authorization": true},
         {"paths": ["^/recent/"], "policy": "allow", "max_auth_age": 1},
         {"paths": ["^/api/"], "policy": "allow", "cors_preflight": true}]
        """
    static let settings: [String: String?] = [
        "access_rules": rules, "groups": #"{"admins": ["ada@example.com"]}"#, "allowed_emails": "ada@example.com,grace@example.com",
    ]

    /// Who asks.
    enum Who: CaseIterable {
        case nobody, ada, grace, iosApp, unknownToken, malformedToken, tokenInQuery, twoAuthorizations
    }

    /// How: the method and whether a browser navigates.
    enum How: CaseIterable {
        case navigate, script, post, preflight
    }

    static let paths = ["/open/a", "/team/b", "/api/ios/c", "/api/partner/g", "/api/pass/d", "/api/e", "/plain/f", "/recent/h"]

    /// What a client and the app saw, reduced to the verdict.
    struct Seen: Equatable, CustomStringConvertible {
        var verdict: String
        var user: String?
        var client: String?
        var groups: String?
        var authorization: String?
        var description: String {
            [verdict, user.map { "user=\($0)" }, client.map { "client=\($0)" }, groups.map { "groups=\($0)" }, authorization.map { "authorization=\($0.prefix(12))…" }]
                .compactMap { $0 }.joined(separator: " ")
        }
    }

    static func seen(status: Int, location: String?, challenge: String?, echoed: EchoedRequest?) -> Seen {
        switch status {
        case 200:
            guard let echoed else { return Seen(verdict: "200 without the app") }
            let user = echoed.values("x-auth-request-user").first
            return Seen(
                verdict: user == nil ? "pass" : "allow", user: user, client: echoed.values("x-auth-request-client").first,
                groups: echoed.values("x-auth-request-groups").first, authorization: echoed.values("authorization").first
            )
        case 302 where location?.contains("/auth/apple") == true:
            return Seen(verdict: "sign-in")
        case 400:
            // Refused as malformed: by siwa (`invalid_request`), or by the proxy itself before it asked siwa (nginx
            // answers two Authorization fields with its own 400): the request reaches no one.
            return Seen(verdict: "invalid_request")
        case 401:
            let error = challenge?.firstMatch(of: /error="([a-z_]+)"/).map { String($0.1) }
            // A check (nginx's) says 401 for a request siwa refuses outright; the others 400: the same verdict.
            return Seen(verdict: error == "invalid_request" ? "invalid_request" : "401 \(error ?? "")")
        case 403:
            return Seen(verdict: challenge?.contains("insufficient_scope") == true ? "403 insufficient_scope" : "403")
        default:
            return Seen(verdict: "\(status)")
        }
    }

    @Test("the generated matrix gives one verdict and one identity through --upstream (HTTP/1.1 and h2c), nginx, Traefik, and Envoy over HTTP and gRPC")
    func oneVerdict() async throws {
        try await withEchoUpstream { app in
            try await LocalSite.run(settings: Self.settings.merging(["upstream": "http://127.0.0.1:\(app)"]) { $1 }) { site in
                try await NginxFrontTests.withFrontNginx(site: site, app: app) { nginx in
                    try await DocSnippetsTests.withFrontTraefik(site: site, app: app) { traefik in
                        try await EnvoyExtAuthzTests.withFrontEnvoy(.http, site: site, app: app) { envoyHTTP in
                            try await EnvoyExtAuthzTests.withFrontEnvoy(.grpc, site: site, app: app) { envoyGRPC in
                                try await Visit.withClient { visit in
                                    let doors: [(String, String)] = [
                                        ("--upstream", site.origin), ("nginx /auth/check", nginx.origin), ("Traefik /auth/forward", traefik.origin),
                                        ("Envoy ext_authz HTTP", envoyHTTP.origin), ("Envoy ext_authz gRPC", envoyGRPC.origin),
                                    ]
                                    try await Self.run(site: site, doors: doors, visit: visit, logs: { nginx.logs() + traefik.logs() + envoyHTTP.logs() + envoyGRPC.logs() })
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// One case of the matrix: the method, the target, the fields who asks sends (a session's cookie apart: `cookie`).
    static func asked(_ who: Who, _ how: How, path: String, ada: String, grace: String, token: String) -> (method: HTTPMethod, target: String, headers: [(String, String)], cookie: String?) {
        var headers: [(String, String)] = []
        var cookie: String?
        var target = path
        switch who {
        case .nobody: break
        case .ada: cookie = ada
        case .grace: cookie = grace
        case .iosApp: headers.append(("Authorization", "Bearer " + token))
        case .unknownToken: headers.append(("Authorization", "Bearer not-a-token-of-siwa"))
        case .malformedToken: headers.append(("Authorization", "Bearer a b"))
        case .tokenInQuery: target += "?access_token=" + token
        case .twoAuthorizations: headers += [("Authorization", "Bearer " + token), ("Authorization", "Bearer " + token)]
        }
        var method = HTTPMethod.GET
        switch how {
        case .navigate: headers += [("Accept", "text/html"), ("Sec-Fetch-Mode", "navigate")]
        case .script: headers += [("Accept", "application/json"), ("Sec-Fetch-Mode", "cors")]
        case .post: method = .POST; headers.append(("Content-Type", "application/json"))
        case .preflight:
            method = .OPTIONS
            headers += [("Origin", "https://web.example.com"), ("Access-Control-Request-Method", "POST")]
        }
        return (method, target, headers, cookie)
    }

    static func run(site: LocalSite, doors: [(String, String)], visit: Visit, logs: () -> String) async throws {
        let ada = try await visit.signIn(site, user: site.user("Ada")).session
        let grace = try await visit.signIn(site, user: site.user("Grace")).session
        let token = try await BearerUpstreamTests.nativeToken(site, visit, sub: site.user("Ada").sub)
        // Every sign-in above is older than /recent/'s max_auth_age (1 s) from here on.
        try await Task.sleep(for: .milliseconds(1200))
        var kinds: Set<String> = []
        var cases = 0
        for who in Who.allCases {
            for how in How.allCases {
                for path in paths {
                    let (method, target, headers, cookie) = Self.asked(who, how, path: path, ada: ada, grace: grace, token: token)
                    let cookies = cookie.map { ["siwa_session": $0] } ?? [:]
                    var answers: [(String, Seen)] = []
                    for (door, origin) in doors {
                        let answer = try await visit.send(origin + target, method: method, headers: headers, cookies: cookies, body: method == .POST ? "{}" : nil)
                        let echoed = answer.status == 200 ? try? answer.echoed() : nil
                        answers.append((door, seen(status: answer.status, location: answer.location, challenge: answer.headers.first(name: "www-authenticate"), echoed: echoed)))
                    }
                    let h2 = try await Curl.fetch(
                        site.origin + target, method: method.rawValue,
                        headers: headers.map { "\($0.0): \($0.1)" } + (cookies["siwa_session"].map { ["Cookie: siwa_session=\($0)"] } ?? []),
                        body: method == .POST ? "{}" : nil, extra: ["--http2-prior-knowledge"]
                    )
                    let h2Echoed = h2.status == 200 ? try? EchoedRequest(json: ByteBuffer(string: h2.body)) : nil
                    answers.append(("--upstream over h2c", seen(status: h2.status, location: h2.header("location"), challenge: h2.header("www-authenticate"), echoed: h2Echoed)))
                    cases += 1
                    let reference = answers[0].1
                    kinds.insert(reference.verdict)
                    for (door, seen) in answers.dropFirst() {
                        // nginx's auth_request passes no page: its error_page sends a navigation siwa answered 401 to
                        // sign in, which for a sign-in too old is siwa's page with the same button.
                        if door == "nginx /auth/check", how == .navigate, reference.verdict == "401 insufficient_user_authentication", seen.verdict == "sign-in" { continue }
                        #expect(seen == reference, "\(who) \(how) \(method) \(target): \(door) gave \(seen), --upstream \(reference)\n\(answers.map { "\($0.0): \($0.1)" }.joined(separator: "\n"))")
                    }
                }
            }
        }
        #expect(cases == Who.allCases.count * How.allCases.count * paths.count)
        // The matrix reaches every verdict a door can give, so that agreeing means something.
        for kind in ["pass", "allow", "sign-in", "401 ", "401 invalid_token", "invalid_request", "403", "403 insufficient_scope", "401 insufficient_user_authentication"] {
            #expect(kinds.contains(kind), "no case came to \(kind): \(kinds.sorted())\n\(logs().suffix(2000))")
        }
    }
}
