import Foundation
import Testing
import TestSupport

/// siwa's sign-in and session pages, answered by the byte path for a visitor whom memory decides (`SitePages`):
/// over real sockets, every answer is compared with the one the handlers give the same request (a header outside
/// the byte path's subset, `DoorTests.toTheHandlers`, sends it to them), and `siwa_front_fast_path_total{request="page"}`
/// says which of the two answered.
@Suite("siwa's pages from memory", .serialized)
struct PagesFromMemoryTests {
    /// A request's answer with its form token replaced by `TOKEN` when the server made one (a visitor without a
    /// token cookie gets a new one each time): what is left must be the same whichever path answered.
    static func comparable(_ answer: RawSocket.Answer) -> (status: Int, fields: [String], body: String) {
        var fields = answer.fields
        var body = answer.body
        if let made = answer.value("set-cookie")?.firstMatch(of: /^siwa_csrf=([^;]+)/)?.1 {
            fields = fields.map { $0.replacingOccurrences(of: made, with: "TOKEN") }
            body = body.replacingOccurrences(of: String(made), with: "TOKEN")
        }
        return (answer.status, fields, body)
    }

    /// Sessions stay in memory for the whole test (by default for 5 s from their last read, which a loaded machine
    /// can pass between two requests: the byte path then rightly leaves the request to the handlers).
    static let settings: [String: String?] = ["check_cache_seconds": "600"]

    @Test("generated visitors (no cookie, a token cookie, a session in memory, an unknown or empty session, languages): the byte path answers the sign-in and session pages exactly as the handlers do, and leaves to them what memory cannot decide")
    func sameAnswerEitherWay() async throws {
        try await LocalSite.run(settings: Self.settings) { site in
            try await Visit.withClient { visit in
                let ada = try await visit.signIn(site, user: site.user("Ada")).session
                let grace = try await visit.signIn(site, user: site.user("Grace")).session
                let languages: [String?] = [nil, "zh-CN,zh;q=0.9", "en-GB,en;q=0.8", "fr", "zh;q=0.1, en;q=0.9", "*", "zh-Hans"]
                let sessions: [(name: String, value: String?)] = [("none", nil), ("ada", ada), ("grace", grace), ("unknown", "not-a-session-of-ours"), ("empty", "")]
                var generator = SplitMix64(seed: 26)
                var expectedPages = try await BytePathTests.counted("page", site, visit)
                for round in 0..<60 {
                    let path = ["/", "/session", "/auth/session"].randomElement(using: &generator) ?? "/"
                    let language = languages.randomElement(using: &generator) ?? nil
                    let session = sessions.randomElement(using: &generator) ?? sessions[0]
                    let token = Bool.random(using: &generator) ? "fixed-form-token-\(round)" : nil
                    var cookies: [String] = []
                    if Bool.random(using: &generator) { cookies.append("theme=dark") }
                    if let value = session.value { cookies.append("siwa_session=\(value)") }
                    if let token { cookies.append("siwa_csrf=\(token)") }
                    var lines = ["Accept: text/html"]
                    if let language { lines.append("Accept-Language: \(language)") }
                    if !cookies.isEmpty { lines.append("Cookie: " + cookies.joined(separator: "; ")) }
                    let what = "\(path) session \(session.name) language \(language ?? "none") token \(token == nil ? "no" : "yes")"

                    let byHandlers = try await RawSocket.send(port: site.port, path: path, lines: lines + [DoorTests.toTheHandlers])
                    #expect(try await BytePathTests.counted("page", site, visit) == expectedPages, "the handlers' request was answered from memory: \(what)")
                    let byBytes = try await RawSocket.send(port: site.port, path: path, lines: lines)
                    // Memory decides who asks: nobody (no session cookie, or an empty one), or a session it holds.
                    let known = session.name == "ada" || session.name == "grace"
                    let anonymous = session.name == "none" || session.name == "empty"
                    let fromMemory = known || (anonymous && path == "/")
                    if fromMemory { expectedPages += 1 }
                    let counted = try await BytePathTests.counted("page", site, visit)
                    #expect(counted == expectedPages, "answered by the wrong path: \(what)")
                    // One wrong answer is one failure, not one for every request after it.
                    expectedPages = counted

                    let (handlers, bytes) = (Self.comparable(byHandlers), Self.comparable(byBytes))
                    #expect(bytes.status == handlers.status, "\(what)")
                    #expect(bytes.fields == handlers.fields, "other headers from the byte path: \(what)")
                    #expect(bytes.body == handlers.body, "another page from the byte path: \(what)")
                    // What a person sees.
                    if path != "/", !known {
                        #expect(byBytes.status == 401, "the session page without a session says the person is not signed in: \(what)")
                    } else {
                        #expect(byBytes.status == 200, "\(what)")
                        #expect(byBytes.value("content-security-policy") != nil && byBytes.value("x-frame-options") == "DENY", "\(what)")
                        let chinese = language.map { $0.hasPrefix("zh-CN") || $0 == "zh-Hans" } ?? false
                        #expect(byBytes.body.contains("lang=\"zh-Hans\"") == chinese, "the page's language: \(what)")
                    }
                    if path == "/" {
                        if let token {
                            #expect(byBytes.body.contains("data-csrf=\"\(token)\""), "the visitor's own form token: \(what)")
                        } else {
                            #expect(byBytes.value("set-cookie")?.hasPrefix("siwa_csrf=") == true, "a new form token and its cookie: \(what)")
                        }
                    }
                    if path != "/", known {
                        let person = session.name == "ada" ? site.user("Ada") : site.user("Grace")
                        #expect(byBytes.body.contains(person.sub), "the session page of the cookie's own person: \(what)")
                    }
                }
            }
        }
    }

    @Test("an invitation's link (open, revoked, expired, unknown, not a token, a second segment, a query), opened by generated visitors with and without siwa in front of an upstream: the byte path answers it for a person not signed in exactly as the handlers do, once the store was read lately, and leaves a person signed in, an odd target and the upstream's / to them")
    func invitationPagesEitherWay() async throws {
        for inFront in [false, true] {
            let body: (LocalSite, Visit) async throws -> Void = { site, visit in
                let store = ["--db", site.databasePath]
                let environment = ["SIWA_PUBLIC_URL": site.origin]
                func token(_ link: String) -> String { String(link.dropFirst(site.url("/auth/invite/").count)) }
                let open = token(try await InvitationTests.create(["--group", "finance", "--uses", "5", "--note", "Books <2026> & \"more\""], store: store, environment: environment))
                let revoked = try await InvitationTests.create(["--group", "finance", "--note", "to revoke"], store: store, environment: environment)
                let listed = try await InvitationTests.siwa(["list"] + store, environment: environment)
                let revokedID = try #require(listed.stdout.firstMatch(of: /(inv_[0-9a-f]+)[^\n]*"to revoke"/).map { String($0.1) }, "\(listed.stdout)")
                _ = try await InvitationTests.siwa(["revoke", revokedID] + store, environment: environment)
                let expired = token(try await InvitationTests.create(["--group", "finance", "--expires", "1s"], store: store, environment: environment))
                try await Task.sleep(for: .milliseconds(1_100))
                let ada = try await visit.signIn(site, user: site.user("Ada")).session
                let tokens = [open, token(revoked), expired, String(repeating: "A", count: 43), "short", "a-b_c"]
                let odd = ["/auth/invite/\(open)/", "/auth/invite/\(open)?x=1", "/auth/invite/%41\(open.dropFirst())", "/auth/invite/"]
                let languages: [String?] = [nil, "zh-CN,zh;q=0.9", "en-GB,en;q=0.8"]
                let sessions: [(name: String, value: String?)] = [("none", nil), ("ada", ada), ("unknown", "not-a-session-of-ours"), ("empty", "")]
                var generator = SplitMix64(seed: 47)
                var fromMemory = 0
                var before = try await BytePathTests.counted("page", site, visit)
                for round in 0..<48 {
                    let path = round % 6 == 5 ? (odd.randomElement(using: &generator) ?? odd[0]) : "/auth/invite/" + (tokens.randomElement(using: &generator) ?? open)
                    let language = languages.randomElement(using: &generator) ?? nil
                    let session = sessions.randomElement(using: &generator) ?? sessions[0]
                    var lines = ["Accept: text/html"]
                    if let language { lines.append("Accept-Language: \(language)") }
                    if let value = session.value { lines.append("Cookie: siwa_session=\(value)") }
                    let what = "\(inFront ? "in front of an upstream" : "alone"): \(path) session \(session.name) language \(language ?? "none")"
                    // The handlers read the store, and remember what it said for the byte path.
                    let byHandlers = try await RawSocket.send(port: site.port, path: path, lines: lines + [DoorTests.toTheHandlers])
                    #expect(try await BytePathTests.counted("page", site, visit) == before, "the handlers' request was answered from memory: \(what)")
                    let byBytes = try await RawSocket.send(port: site.port, path: path, lines: lines)
                    let counted = try await BytePathTests.counted("page", site, visit)
                    let anonymous = session.name == "none" || session.name == "empty"
                    let plain = !odd.contains(path)
                    if counted > before {
                        #expect(anonymous && plain, "memory answered what the handlers must: \(what)")
                        fromMemory += 1
                    } else {
                        // Only a token read more than two seconds ago (a loaded machine) may go to the handlers: what
                        // cannot be a token ("short", "a-b_c") is answered without the store, always from memory.
                        #expect(!(anonymous && plain && tokens.dropFirst(4).contains(String(path.dropFirst("/auth/invite/".count)))), "not from memory: \(what)")
                    }
                    before = counted
                    let (handlers, bytes) = (Self.comparable(byHandlers), Self.comparable(byBytes))
                    #expect(bytes.status == handlers.status, "\(what)")
                    #expect(bytes.fields == handlers.fields, "other headers from the byte path: \(what)")
                    #expect(bytes.body == handlers.body, "another page from the byte path: \(what)")
                    // What a person sees.
                    let shown = path.dropFirst("/auth/invite/".count)
                    if shown == open, !(session.name == "unknown") {
                        #expect(byBytes.status == 200 && byBytes.body.contains("Books &lt;2026&gt; &amp; &quot;more&quot;"), "\(what): \(byBytes.head)")
                        #expect(byBytes.body.contains(session.name == "ada" ? "name=\"csrf_token\"" : "/auth/apple?invite=\(open)"), "\(what)")
                    } else if shown == token(revoked) || shown == expired {
                        #expect(byBytes.status == 410, "\(what): \(byBytes.head)")
                    } else if tokens.dropFirst(3).contains(String(shown)) {
                        #expect(byBytes.status == 404, "\(what): \(byBytes.head)")
                    }
                    if byBytes.status < 500 {
                        let chinese = language?.hasPrefix("zh-CN") ?? false
                        #expect(byBytes.body.contains("lang=\"zh-Hans\"") == chinese, "the page's language: \(what)")
                    }
                }
                #expect(fromMemory >= 8, "\(inFront ? "in front of an upstream" : "alone"): only \(fromMemory) of 48 answered from memory")
                // In front of an upstream, / is the upstream's, /auth/session siwa's (from memory for a session it holds).
                if inFront {
                    let root = try await RawSocket.send(port: site.port, path: "/", lines: ["Cookie: siwa_session=\(ada)"])
                    #expect(!root.body.contains("id=\"siwa-button\""), "siwa's sign-in page in place of the upstream's /")
                    _ = try await RawSocket.send(port: site.port, path: "/auth/session", lines: ["Cookie: siwa_session=\(ada)"])
                    let pages = try await BytePathTests.counted("page", site, visit)
                    let session = try await RawSocket.send(port: site.port, path: "/auth/session", lines: ["Cookie: siwa_session=\(ada)"])
                    #expect(session.status == 200 && session.body.contains(site.user("Ada").sub))
                    #expect(try await BytePathTests.counted("page", site, visit) == pages + 1, "/auth/session was not answered from memory in front of an upstream")
                }
            }
            if inFront {
                try await UpstreamProxyTests.withEchoSite(Self.settings, body)
            } else {
                try await LocalSite.run(settings: Self.settings) { site in try await Visit.withClient { visit in try await body(site, visit) } }
            }
        }
    }

    @Test("a session ended at siwa is not shown from memory: its session page says the person is not signed in, and the sign-in page no longer says signed in")
    func endedSessionNotFromMemory() async throws {
        try await LocalSite.run(settings: Self.settings) { site in
            try await Visit.withClient { visit in
                let session = try await visit.signIn(site, user: site.user("Ada")).session
                let cookie = "Cookie: siwa_session=\(session)"
                // The first view may be the handlers' (they put the session in memory); the second is from memory.
                _ = try await RawSocket.send(port: site.port, path: "/session", lines: [cookie])
                let earlier = try await BytePathTests.counted("page", site, visit)
                let before = try await RawSocket.send(port: site.port, path: "/session", lines: [cookie])
                #expect(before.status == 200 && before.body.contains(site.user("Ada").sub))
                let pages = try await BytePathTests.counted("page", site, visit)
                #expect(pages == earlier + 1, "the second view was not answered from memory")
                let done = try await visit.signOut(site, cookies: ["siwa_session": session])
                #expect(done.status == 303 || done.status == 302)
                let after = try await RawSocket.send(port: site.port, path: "/session", lines: [cookie])
                #expect(after.status == 401, "\(after.head)")
                let signIn = try await RawSocket.send(port: site.port, path: "/", lines: [cookie])
                #expect(signIn.status == 200)
                #expect(!signIn.body.contains("href=\"/auth/session\""), "the sign-in page still offered the ended session: \(signIn.body)")
                #expect(try await BytePathTests.counted("page", site, visit) == pages, "memory answered for an ended session")
            }
        }
    }
}
