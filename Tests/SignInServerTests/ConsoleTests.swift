import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import JOSE
@testable import SignInServer
import Testing

/// The operator's console (issue 28, part B).
@Suite("Operator's console")
struct ConsoleTests {
    static func options() -> ServerOptions {
        var options = ServerOptions()
        options.live = true
        options.front = FrontSettings(publicOrigin: "http://localhost", access: AccessControl(AccessConfiguration(groups: ["ops": [.email(Fixtures.adaEmail)]])))
        options.adminGroups = ["ops"]
        return options
    }

    /// Paths below `/auth/admin`: the console's, with a trailing slash, deeper, and ones that do not exist.
    static let below = [
        "/auth/admin", "/auth/admin/", "/auth/admin/groups", "/auth/admin/groups/", "/auth/admin/clients", "/auth/admin/audit?event=sign-in",
        "/auth/admin/person?sub=\(Fixtures.ada)", "//auth//admin//groups", "/auth/admin/secret", "/auth/admin/secret/", "/auth/admin/a/b/c/d",
        "/auth/admin/groups/add", "/auth/admin/.env", "/auth/admin/%2e%2e/x",
    ]

    /// The CSRF token of `session`'s console pages.
    static func csrf(_ h: Harness, _ session: String) async throws -> String {
        let page = try await h.get("/auth/admin/groups", cookies: [h.sessionCookie: session]).text
        let match = try #require(page.firstMatch(of: /name="csrf_token" value="([^"]+)"/))
        return String(match.1)
    }

    @Test("only members of admin_groups: anyone else signed in gets 403 with no hint, someone signed out goes to sign in; no-store; Chinese too")
    func whoMayEnter() async throws {
        try await withServer(Self.options()) { h in
            let signedOut = try await h.get("/auth/admin", headers: Fixtures.browser)
            #expect(signedOut.status == .found && signedOut.location == "/auth/apple?return_to=%2Fauth%2Fadmin")
            let lilei = try #require(try await h.signIn(user: Fixtures.lilei).session)
            for path in ["/auth/admin", "/auth/admin/groups", "/auth/admin/clients", "/auth/admin/audit", "/auth/admin/person?sub=\(Fixtures.ada)"] {
                let refused = try await h.get(path, cookies: [h.sessionCookie: lilei])
                #expect(refused.status == .forbidden, "\(path)")
                #expect(!refused.text.contains("Console") && !refused.text.contains("csrf_token"), "\(path)")
            }
            let ada = try #require(try await h.signIn().session)
            let home = try await h.get("/auth/admin", cookies: [h.sessionCookie: ada])
            #expect(home.status == .ok && home.headers[.cacheControl] == "no-store")
            #expect(home.text.contains("Console") && home.text.contains("Local mode"))
            let chinese = try await h.get("/auth/admin", cookies: [h.sessionCookie: ada], headers: [.acceptLanguage: "zh-CN"])
            #expect(chinese.text.contains("控制台"))
        }
    }

    @Test("below /auth/admin, a person outside admin_groups gets the same 403 page at every path, existing or not, with any method; an operator gets 404 for a path that does not exist")
    func nothingToLearnBelowTheConsole() async throws {
        try await withServer(Self.options()) { h in
            let lilei = try #require(try await h.signIn(user: Fixtures.lilei).session)
            let first = try await h.get("/auth/admin", cookies: [h.sessionCookie: lilei], headers: Fixtures.browser)
            #expect(first.status == .forbidden)
            let methods: [HTTPRequest.Method] = [.get, .post, .put, .delete, .patch, .options, HTTPRequest.Method("PROPFIND") ?? .get]
            for path in Self.below {
                for method in methods {
                    let answer = try await h.request(method, path, cookies: [h.sessionCookie: lilei], headers: Fixtures.browser, body: method == .post ? "csrf_token=x" : nil)
                    #expect(answer.status == .forbidden, "\(method) \(path)")
                    #expect(answer.text == first.text, "\(method) \(path)")
                }
                #expect(try await h.request(.head, path, cookies: [h.sessionCookie: lilei], headers: Fixtures.browser).status == .forbidden, "HEAD \(path)")
            }
            let ada = try #require(try await h.signIn().session)
            #expect(try await h.get("/auth/admin/secret", cookies: [h.sessionCookie: ada], headers: Fixtures.browser).status == .notFound)
            #expect(try await h.get("/auth/admin/groups/", cookies: [h.sessionCookie: ada], headers: Fixtures.browser).status == .ok)
        }
    }

    @Test("below /auth/admin, someone signed out gets the same answer at every path, existing or not: a browser is sent to sign in and back to it, anything else is told 401")
    func signedOutBelowTheConsole() async throws {
        try await withServer(Self.options()) { h in
            for path in Self.below {
                let navigation = try await h.get(path, headers: Fixtures.browser)
                #expect(navigation.status == .found, "\(path)")
                #expect(navigation.location == "/auth/apple?return_to=" + FormEncoding.encode(path), "\(path)")
                #expect(try await h.request(.head, path, headers: Fixtures.browser).location == navigation.location, "HEAD \(path)")
                for other in [
                    try await h.get(path), try await h.get(path, headers: [.accept: "application/json"]),
                    try await h.post(path, form: "csrf_token=x", headers: Fixtures.browser), try await h.request(.delete, path, headers: Fixtures.browser),
                ] {
                    #expect(other.status == .unauthorized, "\(path)")
                    #expect(other.location == nil, "\(path)")
                }
            }
        }
    }

    @Test("signed out, a browser opening a console page is sent to sign in; once Apple's sign-in completes, the operator lands on that page")
    func signInAndBackToTheConsole() async throws {
        try await withServer(Self.options()) { h in
            let asked = try await h.get("/auth/admin/groups", headers: Fixtures.browser)
            let location = try #require(asked.location)
            let signIn = try await h.signIn(startingAt: location)
            #expect(signIn.response.status == .seeOther && signIn.response.location == "/auth/admin/groups")
            let session = try #require(signIn.session)
            let landed = try await h.get(signIn.response.location ?? "", cookies: [h.sessionCookie: session], headers: Fixtures.browser)
            #expect(landed.status == .ok && landed.text.contains("Console") && landed.text.contains("ops"))
        }
    }

    @Test("people: found by name, email or sub; their sessions ended one or all by an operator (the next check is 401), audited naming the operator")
    func people() async throws {
        try await withServer(Self.options()) { h in
            let lilei = try #require(try await h.signIn(user: Fixtures.lilei).session)
            let ada = try #require(try await h.signIn().session)
            let found = try await h.get("/auth/admin?q=lilei%40example.cn", cookies: [h.sessionCookie: ada]).text
            #expect(found.contains(Fixtures.lilei) && !found.contains(Fixtures.ada))
            #expect(try await h.get("/auth/admin?q=000456", cookies: [h.sessionCookie: ada]).text.contains("lilei@example.cn"))
            #expect(try await h.get("/auth/admin?q=nobody-at-all", cookies: [h.sessionCookie: ada]).text.contains("id=\"nobody\""))
            let person = try await h.get("/auth/admin/person?sub=" + FormEncoding.encode(Fixtures.lilei), cookies: [h.sessionCookie: ada]).text
            #expect(person.contains("lilei@example.cn") && person.contains("id=\"end-all\"") && person.contains("in use"))
            let csrf = try await Self.csrf(h, ada)
            // Without the token: refused, nothing ended.
            #expect(try await h.post("/auth/admin/end", form: "sub=\(FormEncoding.encode(Fixtures.lilei))&sid=all", cookies: [h.sessionCookie: ada]).status == .forbidden)
            #expect(try await h.get("/auth/check", cookies: [h.sessionCookie: lilei]).status == .accepted)
            let ended = try await h.post("/auth/admin/end", form: "sub=\(FormEncoding.encode(Fixtures.lilei))&sid=all&csrf_token=" + FormEncoding.encode(csrf), cookies: [h.sessionCookie: ada])
            #expect(ended.status == .seeOther)
            #expect(try await h.get("/auth/check", cookies: [h.sessionCookie: lilei]).status == .unauthorized)
            let audit = try await h.get("/auth/admin/audit?event=sessions-ended", cookies: [h.sessionCookie: ada]).text
            #expect(audit.contains("by ada@example.com") && audit.contains(Fixtures.lilei))
            #expect(h.logs.text.contains("actor=ada@example.com"))
        }
    }

    @Test("groups: a member added in the console is in force at once (李雷 may then use it), removed likewise; a bad member is refused with its reason")
    func groups() async throws {
        try await withServer(Self.options()) { h in
            let ada = try #require(try await h.signIn().session)
            let lilei = try #require(try await h.signIn(user: Fixtures.lilei).session)
            let csrf = try await Self.csrf(h, ada)
            #expect(try await h.get("/auth/admin", cookies: [h.sessionCookie: lilei]).status == .forbidden)
            let added = try await h.post("/auth/admin/groups/add", form: "group=ops&member=lilei%40example.cn&csrf_token=" + FormEncoding.encode(csrf), cookies: [h.sessionCookie: ada])
            #expect(added.status == .seeOther)
            #expect(try await h.get("/auth/admin", cookies: [h.sessionCookie: lilei]).status == .ok)
            let listed = try await h.get("/auth/admin/groups", cookies: [h.sessionCookie: ada]).text
            #expect(listed.contains("lilei@example.cn") && listed.contains("store") && listed.contains("configuration"))
            _ = try await h.post("/auth/admin/groups/remove", form: "group=ops&member=lilei%40example.cn&csrf_token=" + FormEncoding.encode(csrf), cookies: [h.sessionCookie: ada])
            #expect(try await h.get("/auth/admin", cookies: [h.sessionCookie: lilei]).status == .forbidden)
            let bad = try await h.post("/auth/admin/groups/add", form: "group=ops&member=nobody&csrf_token=" + FormEncoding.encode(csrf), cookies: [h.sessionCookie: ada])
            #expect(bad.status == .ok && bad.text.contains("id=\"error\"") && bad.text.contains("a member is an email"))
        }
    }

    @Test("OpenID clients: added with the secret shown once (the list never shows it again, the store keeps its hash), removed; both audited")
    func clients() async throws {
        try await withServer(Self.options()) { h in
            let ada = try #require(try await h.signIn().session)
            let csrf = try await Self.csrf(h, ada)
            let added = try await h.post(
                "/auth/admin/clients/add", form: "client_id=wiki&redirect_uri=" + FormEncoding.encode("https://wiki.example.com/cb") + "&csrf_token=" + FormEncoding.encode(csrf),
                cookies: [h.sessionCookie: ada]
            )
            let match = try #require(added.text.firstMatch(of: /id="secret">[^<]*<code>([^<]+)<\/code>/))
            let secret = String(match.1)
            #expect(secret.count >= 40)
            let stored = try #require(try await h.store.providerClients().first { $0.clientID == "wiki" })
            #expect(stored.secretHash == ProviderSettings.hash(secret))
            let again = try await h.get("/auth/admin/clients", cookies: [h.sessionCookie: ada]).text
            #expect(again.contains("wiki") && !again.contains(secret))
            #expect(!h.logs.text.contains(secret))
            _ = try await h.post("/auth/admin/clients/remove", form: "client_id=wiki&csrf_token=" + FormEncoding.encode(csrf), cookies: [h.sessionCookie: ada])
            #expect(try await h.store.providerClients().contains { $0.clientID == "wiki" } == false)
            let audit = try await h.get("/auth/admin/audit?who=ada", cookies: [h.sessionCookie: ada]).text
            #expect(audit.contains("client-added") && audit.contains("client-removed"))
        }
    }
}
