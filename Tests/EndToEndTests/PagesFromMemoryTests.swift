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
