import Foundation
import NIOHTTP1
import Testing
import TestSupport

/// Invitations (issue 47, part A) with real parts: `siwa invite` as the operator runs it, a real `siwa serve` in front
/// of the echo upstream with its emulator, and two instances sharing PostgreSQL.
@Suite("Invitations: a person let in by their Apple Account, not their email")
struct InvitationTests {
    /// `/books/` is for `finance` alone; the 403 page names whom to ask.
    static let rules = #"[{"paths": ["^/books/"], "policy": "allow", "groups": ["finance"]}]"#
    static let form = [("Content-Type", "application/x-www-form-urlencoded")]
    static let navigation = [("Accept", "text/html"), ("Sec-Fetch-Mode", "navigate")]

    /// `siwa invite …` run as the operator runs it, with the site's configuration in the environment (`public_url`,
    /// where a link points; `audit_log`).
    static func siwa(_ arguments: [String], environment: [String: String] = [:]) async throws -> ChildProcess.Outcome {
        try await ChildProcess.run(ChildProcess.siwaExecutable, arguments: ["invite"] + arguments, environment: environment, timeLimit: .seconds(120))
    }

    /// The link `siwa invite create` printed (stdout's one line).
    static func create(_ arguments: [String], store: [String], environment: [String: String] = [:]) async throws -> String {
        let made = try await siwa(["create"] + arguments + store, environment: environment)
        #expect(made.status == 0, "\(made.stdout)\(made.stderr)")
        return made.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The href of the invitation page's Sign in with Apple button, absolute.
    static func button(_ page: Visit.Answer, on site: LocalSite) throws -> String {
        try #require(page.text.firstMatch(of: /id="siwa-button"/) != nil ? page.text.firstMatch(of: /href="(\/auth\/apple\?invite=[^"]+)"/).map { site.url(String($0.1)) } : nil, "\(page.text)")
    }

    @Test("Li Lei hides her email and is refused /books/ (the 403 page says access comes by invitation, and whom to ask); siwa invite create prints a link for two; she accepts it signed in with one press, Ada signs in with Apple from it: both reach /books/ as themselves; Grace, third, is told it has been used and is still refused; a revoked link and a made-up one say so; the audit log has every step")
    func inviteByLink() async throws {
        try await withScratchDirectory("siwa-invite") { directory in
            let audit = directory.appendingPathComponent("audit.jsonl").path
            let settings: [String: String?] = ["access_rules": Self.rules, "invitation_contact": "grace@example.org", "audit_log": audit]
            try await UpstreamProxyTests.withEchoSite(settings) { site, visit in
                let (lilei, ada, grace) = (site.user("李"), site.user("Ada"), site.user("Grace"))
                let store = ["--db", site.databasePath]
                let configuration = ["SIWA_PUBLIC_URL": site.origin, "SIWA_AUDIT_LOG": audit]
                let books = site.url("/books/2026")

                // Li Lei, signed in with her email hidden, is refused: the page says how access comes.
                let lileiSession = try await visit.signIn(site, user: lilei, hideEmail: true).session
                let refused = try await visit.send(books, headers: Self.navigation, cookies: ["siwa_session": lileiSession])
                #expect(refused.status == 403)
                #expect(refused.text.contains("Access to this site comes by invitation") && refused.text.contains("grace@example.org"), "\(refused.text)")

                let link = try await Self.create(["--group", "finance", "--uses", "2", "--note", "Grace invites you to the books"], store: store, environment: configuration)
                #expect(link.hasPrefix(site.url("/auth/invite/")), "\(link)")

                // Signed in: the page shows who invites to what, and accepting is one press.
                let offer = try await visit.send(link, cookies: ["siwa_session": lileiSession])
                #expect(offer.status == 200)
                #expect(offer.text.contains("Grace invites you to the books") && offer.text.contains("finance") && offer.text.contains(lilei.relayEmail), "\(offer.text)")
                let csrf = try #require(offer.text.firstMatch(of: /name="csrf_token" value="([^"]+)"/).map { String($0.1) })
                let forged = try await visit.send(link, method: .POST, headers: Self.form, cookies: ["siwa_session": lileiSession], body: "csrf_token=forged")
                #expect(forged.status == 403, "an accept without the session's CSRF token changes nothing")
                let accepted = try await visit.send(link, method: .POST, headers: Self.form, cookies: ["siwa_session": lileiSession], body: "csrf_token=\(csrf)")
                #expect(accepted.status == 303)
                let outcome = try await visit.send(site.url(try #require(accepted.location)), cookies: ["siwa_session": lileiSession])
                #expect(outcome.text.contains("You are in") && outcome.text.contains("finance"), "\(outcome.text)")
                let lileiThrough = try await visit.send(books, headers: Self.navigation, cookies: ["siwa_session": lileiSession])
                #expect(lileiThrough.status == 200)
                #expect(try lileiThrough.echoed().values("x-auth-request-user") == [lilei.sub])
                #expect(try lileiThrough.echoed().values("x-auth-request-email").first?.hasSuffix("@privaterelay.appleid.com") == true)

                // Ada, signed out: the page's button signs her in with Apple, and she lands on what became of it.
                let anonymous = try await visit.send(link)
                let start = try Self.button(anonymous, on: site)
                let adaIn = try await visit.signIn(site, user: ada, start: start, hideEmail: true)
                let landed = try #require(adaIn.returnedTo)
                #expect(landed.hasPrefix("/auth/invite?id=inv_"), "\(landed)")
                #expect(try await visit.send(site.url(landed), cookies: ["siwa_session": adaIn.session]).text.contains("You are in"))
                #expect(try await visit.send(books, headers: Self.navigation, cookies: ["siwa_session": adaIn.session]).status == 200)

                // Grace, third, from the same link: told it has been used; nothing changed for her.
                let graceIn = try await visit.signIn(site, user: grace, start: start)
                let told = try await visit.send(site.url(try #require(graceIn.returnedTo)), cookies: ["siwa_session": graceIn.session])
                #expect(told.status == 410 && told.text.contains("This invitation has been used"), "\(told.status) \(told.text)")
                #expect(try await visit.send(books, headers: Self.navigation, cookies: ["siwa_session": graceIn.session]).status == 403)
                #expect(try await visit.send(link).status == 410)

                // A revoked link, a made-up one.
                let revocable = try await Self.create(["--group", "finance"], store: store, environment: configuration)
                let listed = try await Self.siwa(["list"] + store, environment: configuration)
                #expect(listed.stdout.contains("used  2/2  finance"), "\(listed.stdout)")
                let id = try #require(listed.stdout.split(separator: "\n").first { $0.contains("open") }.map { String($0.prefix { $0 != " " }) })
                #expect(try await Self.siwa(["revoke", id] + store, environment: configuration).status == 0)
                let withdrawn = try await visit.send(revocable, cookies: ["siwa_session": graceIn.session])
                #expect(withdrawn.status == 410 && withdrawn.text.contains("This invitation was withdrawn"), "\(withdrawn.text)")
                #expect(try await visit.send(revocable, method: .POST, headers: Self.form, cookies: ["siwa_session": graceIn.session], body: "csrf_token=\(csrf)").status == 403)
                let madeUp = try await visit.send(site.url("/auth/invite/" + String(repeating: "A", count: 43)))
                #expect(madeUp.status == 404 && madeUp.text.contains("This invitation link is not valid"))
                #expect(try await visit.send(site.url("/auth/invite/%2e%2e")).status == 404)

                // The audit trail: made, used (by sub, with the groups), refused (why), revoked; never the link's token.
                let lines = try await Self.auditLines(audit, until: { $0.contains { $0["event"] as? String == "invite.revoked" } })
                let events = lines.compactMap { $0["event"] as? String }.filter { $0.hasPrefix("invite.") }
                #expect(events.filter { $0 == "invite.created" }.count == 2 && events.contains("invite.revoked"), "\(events)")
                let redeemed = lines.filter { $0["event"] as? String == "invite.redeemed" }
                #expect(Set(redeemed.compactMap { $0["sub"] as? String }) == [lilei.sub, ada.sub])
                #expect(redeemed.allSatisfy { ($0["reason"] as? String)?.contains("groups=finance") == true })
                let refusedLine = lines.first { $0["event"] as? String == "invite.refused" }
                #expect(refusedLine?["sub"] as? String == grace.sub && (refusedLine?["reason"] as? String)?.hasSuffix("used") == true, "\(String(describing: refusedLine))")
                let token = String(link.split(separator: "/").last ?? "")
                #expect(!(try String(contentsOfFile: audit, encoding: .utf8)).contains(token))
            }
        }
    }

    @Test("the console: Ada, an operator, makes an invitation for finance (the link shown once, not on the next view), Li Lei signs in from it with her email hidden and the list says one of one used; a second one Ada revokes shows withdrawn; a form without her CSRF token changes nothing; someone not in admin_groups gets 403")
    func consoleInvitations() async throws {
        let settings: [String: String?] = ["access_rules": Self.rules, "admin_groups": "ops", "groups": #"{"ops": ["ada@example.com"]}"#]
        try await UpstreamProxyTests.withEchoSite(settings) { site, visit in
            let (ada, lilei) = (site.user("Ada"), site.user("李"))
            let operatorSession = try await visit.signIn(site, user: ada).session
            let cookies = ["siwa_session": operatorSession]
            let page = try await visit.send(site.url("/auth/admin/invitations"), cookies: cookies)
            #expect(page.status == 200)
            let csrf = try #require(page.text.firstMatch(of: /name="csrf_token" value="([^"]+)"/).map { String($0.1) })
            let create = site.url("/auth/admin/invitations/create")
            #expect(try await visit.send(create, method: .POST, headers: Self.form, cookies: cookies, body: "csrf_token=x&groups=finance&uses=1").status == 403)
            let refused = try await visit.send(create, method: .POST, headers: Self.form, cookies: cookies, body: "csrf_token=\(csrf)&groups=Finance&uses=1")
            #expect(refused.text.contains("a group name is lower-case"), "\(refused.text)")

            let made = try await visit.send(create, method: .POST, headers: Self.form, cookies: cookies, body: "csrf_token=\(csrf)&groups=finance&uses=1&expires=2d&note=Welcome+to+the+books")
            let link = try #require(made.text.firstMatch(of: /id="invitation-link">[^<]*<code>([^<]+)<\/code>/).map { String($0.1) }, "\(made.text)")
            #expect(link.hasPrefix(site.url("/auth/invite/")))
            #expect(try await !visit.send(site.url("/auth/admin/invitations"), cookies: cookies).text.contains(link), "the link is shown once")

            let anonymous = try await visit.send(link)
            #expect(anonymous.text.contains("Welcome to the books"))
            let lileiIn = try await visit.signIn(site, user: lilei, start: try Self.button(anonymous, on: site), hideEmail: true)
            #expect(try await visit.send(site.url("/books/"), headers: Self.navigation, cookies: ["siwa_session": lileiIn.session]).status == 200)
            let listed = try await visit.send(site.url("/auth/admin/invitations"), cookies: cookies).text
            #expect(listed.contains("<td>1/1</td>") && listed.contains(">used<"), "\(listed)")

            let second = try await visit.send(create, method: .POST, headers: Self.form, cookies: cookies, body: "csrf_token=\(csrf)&groups=finance&uses=3")
            let secondLink = try #require(second.text.firstMatch(of: /id="invitation-link">[^<]*<code>([^<]+)<\/code>/).map { String($0.1) })
            let id = try #require(second.text.firstMatch(of: /name="id" value="(inv_[0-9a-f]+)"/).map { String($0.1) })
            let revoked = try await visit.send(site.url("/auth/admin/invitations/revoke"), method: .POST, headers: Self.form, cookies: cookies, body: "csrf_token=\(csrf)&id=\(id)")
            #expect(revoked.status == 303)
            #expect(try await visit.send(secondLink).text.contains("This invitation was withdrawn"))
            #expect(try await visit.send(site.url("/auth/admin/invitations"), cookies: cookies).text.contains(">revoked<"))

            // Li Lei is no operator: the console is closed to her.
            #expect(try await visit.send(site.url("/auth/admin/invitations"), cookies: ["siwa_session": lileiIn.session]).status == 403)
        }
    }

    /// The audit log's lines as JSON objects, read until `done` holds of them (the trail writes off the request's path).
    static func auditLines(_ path: String, until done: ([[String: Any]]) -> Bool) async throws -> [[String: Any]] {
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            let lines = text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            if done(lines) || ContinuousClock.now > deadline { return lines }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    @Test("two instances sharing PostgreSQL, one invitation with one use: Ada signs in from it on A and Grace on B at once; one joins, the other is told it has been used, and the member is let in on both instances within a second")
    func lastUseOnTwoInstances() async throws {
        try await AccessRulesEndToEndTests.withFreshPostgresDatabase { url in
            let key = Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
            // Groups polled every 600 s: only PostgreSQL's NOTIFY brings the new member to the other instance in time.
            let settings: [String: String?] = ["db": url, "data_key": key, "check_cache_seconds": "600", "allowed_groups": "finance"]
            try await LocalSite.runProcess(settings: settings) { a, _ in
                try await LocalSite.runProcess(settings: settings) { b, _ in
                    try await Visit.withClient { visit in
                        let link = try await Self.create(["--group", "finance", "--uses", "1"], store: ["--db", url, "--data-key", key])
                        let token = String(link.split(separator: "/").last ?? "")
                        let (ada, grace) = (a.user("Ada"), a.user("Grace"))
                        async let adaIn = visit.signIn(a, user: ada, start: a.url("/auth/apple?invite=" + token))
                        async let graceIn = visit.signIn(b, user: grace, start: b.url("/auth/apple?invite=" + token))
                        let people = [(a, try await adaIn), (b, try await graceIn)]
                        var joined: [(site: LocalSite, session: String)] = []
                        var told = 0
                        for (site, signedIn) in people {
                            let page = try await visit.send(site.url(try #require(signedIn.returnedTo)), cookies: ["siwa_session": signedIn.session])
                            if page.status == 200, page.text.contains("You are in") { joined.append((site, signedIn.session)) }
                            if page.status == 410, page.text.contains("This invitation has been used") { told += 1 }
                        }
                        #expect(joined.count == 1 && told == 1, "joined \(joined.count), told \(told)")
                        let member = try #require(joined.first)
                        for site in [a, b] {
                            // Within 10 s, where polling would take check_cache_seconds (600).
                            let check = try await AccessRulesEndToEndTests.firstAnswer(within: .seconds(10), status: 202) {
                                try await visit.send(site.url("/auth/check"), cookies: ["siwa_session": member.session])
                            }
                            #expect(check.status == 202, "the new member was not let in on \(site.url("/")) within 10 s")
                            #expect(check.headers["X-Auth-Request-Groups"] == ["finance"])
                        }
                    }
                }
            }
        }
    }
}
