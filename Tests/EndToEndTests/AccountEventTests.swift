import Foundation
import Testing
import TestSupport

/// Account events for the apps behind siwa (issue 47, part B), with real parts: `siwa serve` on PostgreSQL, its
/// emulator's notifications, the CLI, and an app that checks every delivery with the Python `standardwebhooks`
/// library (`ThirdParty/webhook_receiver.py`), not with siwa's own code.
@Suite("Account events for the apps, signed by the Standard Webhooks convention", .serialized)
struct AccountEventTests {
    /// Every event, for the one app of these tests.
    static let events = ["person.joined", "person.deleted", "person.consent_revoked", "person.email_disabled", "person.email_enabled", "person.groups_changed"]

    /// A received delivery, as the receiver recorded it once the library verified it.
    struct Received: Decodable {
        var id: String?
        var type: String?
        var sub: String?
        var invalid: String?
        var attempt: Int
    }

    /// Runs the receiver on `port` with `secret`, recording into `record`; `body` while it runs.
    static func withReceiver<T>(port: Int, secret: String, record: URL, log: URL, _ body: () async throws -> T) async throws -> T {
        let python = try ExternalTool.authlibPython.executable()
        let script = ExternalTool.thirdPartyScripts.appendingPathComponent("webhook_receiver.py").path
        return try await ChildProcess.withRunning(
            python, arguments: [script, String(port), secret, record.path], output: log,
            ready: { (try? await HTTPProbe.status("http://127.0.0.1:\(port)/receiver-ready")) == 200 }
        ) { _ in try await body() }
    }

    /// What the receiver has recorded, read until `done` holds of it or `time` has passed.
    static func received(_ record: URL, within time: Duration, until done: ([Received]) -> Bool) async throws -> [Received] {
        let deadline = ContinuousClock.now + time
        while true {
            let text = (try? String(contentsOf: record, encoding: .utf8)) ?? ""
            let lines = text.split(separator: "\n").compactMap { try? JSONDecoder().decode(Received.self, from: Data($0.utf8)) }
            if done(lines) || ContinuousClock.now > deadline { return lines }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    @Test("each of the six events reaches the app for Ada, in order, with a signature standardwebhooks accepts; Grace's first sign-in while the app is down, then siwa stopped, PostgreSQL restarted and a group change made by the CLI meanwhile: both arrive, in order, once siwa and the app are back")
    func everyEventThroughRestarts() async throws {
        try await withScratchDirectory("siwa-events") { directory in
            let port = try await FreePorts.reserve(1)[0]
            let secret = "whsec_" + Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
            let record = directory.appendingPathComponent("received.jsonl")
            let webhooks = #"[{"name": "books", "url": "http://127.0.0.1:\#(port)/hooks", "secret": "\#(secret)", "events": \#(Self.events)}]"#
            try await AccessRulesEndToEndTests.withFreshPostgresDatabase(exclusive: true) { url in
                let key = Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
                let settings: [String: String?] = ["db": url, "data_key": key, "event_webhooks": webhooks]
                // The CLI reads the same configuration as serve: its changes are written with their events too.
                let cli = ["--db", url, "--data-key", key]
                let cliEnvironment = ["SIWA_EVENT_WEBHOOKS": webhooks]
                func groupsAdd(_ member: String) async throws {
                    let added = try await ChildProcess.run(ChildProcess.siwaExecutable, arguments: ["groups", "add", "finance", member] + cli, environment: cliEnvironment, timeLimit: .seconds(120))
                    #expect(added.status == 0, "\(added.stderr)")
                }

                var grace = ""
                // The app listens first: siwa's own ports are drawn while it holds its port.
                try await Self.withReceiver(port: port, secret: secret, record: record, log: directory.appendingPathComponent("receiver-1.log")) {
                    try await LocalSite.runProcess(settings: settings) { site, process in
                        try await Visit.withClient { visit in
                            let ada = site.user("Ada")
                            grace = site.user("Grace").sub
                            func notify(_ type: String) async throws {
                                let sent = try await visit.send(
                                    site.emulatorOrigin + "/emulator/admin/notify", method: .POST, headers: [("Content-Type", "application/json")],
                                    body: #"{"type": "\#(type)", "sub": "\#(ada.sub)"}"#
                                )
                                #expect(sent.status == 200, "\(sent.text)")
                            }
                            _ = try await visit.signIn(site, user: ada)
                            try await groupsAdd("sub:" + ada.sub)
                            for type in ["email-disabled", "email-enabled", "consent-revoked", "account-delete"] { try await notify(type) }
                            let got = try await Self.received(record, within: .seconds(30)) { $0.count >= 6 }
                            #expect(got.allSatisfy { $0.invalid == nil }, "\(got.compactMap(\.invalid))")
                            #expect(
                                got.map(\.type) == ["person.joined", "person.groups_changed", "person.email_disabled", "person.email_enabled", "person.consent_revoked", "person.deleted"],
                                "\(got.map(\.type)) \(process.logText.suffix(6000))"
                            )
                            #expect(got.allSatisfy { $0.sub == ada.sub })
                            #expect(Set(got.compactMap(\.id)).count == 6, "each event its own webhook-id")
                            let metrics = try await visit.send(site.url("/metrics")).text
                            #expect(metrics.contains(#"siwa_account_event_deliveries_total{outcome="delivered"} 6"#), "\(metrics.split(separator: "\n").filter { $0.contains("account_event") })")

                            // The app goes down: Grace's first sign-in is written with its event, which is not taken.
                            #expect(try await visit.send("http://127.0.0.1:\(port)/down").status == 200)
                            _ = try await visit.signIn(site, user: site.user("Grace"))
                            let retried = try await AccessRulesEndToEndTests.firstAnswer(within: .seconds(10), status: 200) {
                                let text = try await visit.send(site.url("/metrics")).text
                                return Visit.Answer(status: text.contains(#"siwa_account_event_deliveries_total{outcome="retried"}"#) ? 200 : 0, headers: [:], body: .init())
                            }
                            #expect(retried.status == 200, "the delivery to an app that is down was not counted as retried")
                        }
                    }
                }
                // siwa is stopped; PostgreSQL restarts; a change is made meanwhile by the CLI (its event in its transaction).
                let pgCtl = try #require(ProcessInfo.processInfo.environment["SIWA_TEST_PG_CTL"], "SIWA_TEST_PG_CTL: run the tests with ./scripts/test")
                let restarted = try await ChildProcess.run(
                    URL(fileURLWithPath: "/bin/sh"), arguments: ["-c", pgCtl + " restart -m fast -w >" + directory.appendingPathComponent("pgctl.log").path + " 2>&1 </dev/null"],
                    environment: [:], timeLimit: .seconds(60)
                )
                #expect(restarted.status == 0)
                try await groupsAdd("sub:" + grace)

                try await Self.withReceiver(port: port, secret: secret, record: record, log: directory.appendingPathComponent("receiver-2.log")) {
                    try await LocalSite.runProcess(settings: settings) { _, _ in
                        let got = try await Self.received(record, within: .seconds(45)) { lines in lines.filter { $0.sub == grace }.count >= 2 }
                        let graces = got.filter { $0.sub == grace }
                        #expect(graces.map(\.type) == ["person.joined", "person.groups_changed"], "\(graces.map(\.type))")
                        #expect(got.allSatisfy { $0.invalid == nil }, "\(got.compactMap(\.invalid))")
                    }
                }
            }
        }
    }

    @Test("the console shows a delivery given up (its app not configured on this instance) with the reason; once the app is configured, Send again (with the operator's CSRF token) delivers it, verified by standardwebhooks, and the list is empty")
    func consoleSendsAgain() async throws {
        try await withScratchDirectory("siwa-events-console") { directory in
            let port = try await FreePorts.reserve(1)[0]
            let secret = "whsec_" + Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
            let record = directory.appendingPathComponent("received.jsonl")
            func hook(_ name: String) -> String {
                #"{"name": "\#(name)", "url": "http://127.0.0.1:\#(port)/hooks", "secret": "\#(secret)", "events": ["person.groups_changed"]}"#
            }
            let database = directory.appendingPathComponent("siwa.sqlite").path
            let base: [String: String?] = ["db": database, "admin_groups": "ops", "groups": #"{"ops": ["ada@example.com"]}"#]
            try await Self.withReceiver(port: port, secret: secret, record: record, log: directory.appendingPathComponent("receiver.log")) {
                // This instance knows the app `books` only; the CLI (configured elsewhere) writes for `ledger`.
                try await LocalSite.runProcess(settings: base.merging(["event_webhooks": "[\(hook("books"))]"]) { $1 }) { site, _ in
                    let added = try await ChildProcess.run(
                        ChildProcess.siwaExecutable, arguments: ["groups", "add", "finance", "sub:000999.feedface.0001", "--db", database],
                        environment: ["SIWA_EVENT_WEBHOOKS": "[\(hook("ledger"))]"], timeLimit: .seconds(120)
                    )
                    #expect(added.status == 0, "\(added.stderr)")
                    try await Visit.withClient { visit in
                        let cookies = ["siwa_session": try await visit.signIn(site, user: site.user("Ada")).session]
                        let shown = try await AccessRulesEndToEndTests.firstAnswer(within: .seconds(10), status: 200) {
                            let page = try await visit.send(site.url("/auth/admin/events"), cookies: cookies)
                            return page.text.contains("given up") ? page : Visit.Answer(status: 0, headers: page.headers, body: page.body)
                        }
                        #expect(shown.status == 200 && shown.text.contains("no webhook named ledger is configured") && shown.text.contains("person.groups_changed"), "\(shown.text)")
                    }
                }
                try await LocalSite.runProcess(settings: base.merging(["event_webhooks": "[\(hook("books")), \(hook("ledger"))]"]) { $1 }) { site, _ in
                    try await Visit.withClient { visit in
                        let cookies = ["siwa_session": try await visit.signIn(site, user: site.user("Ada")).session]
                        let page = try await visit.send(site.url("/auth/admin/events"), cookies: cookies)
                        let csrf = try #require(page.text.firstMatch(of: /name="csrf_token" value="([^"]+)"/).map { String($0.1) })
                        let id = try #require(page.text.firstMatch(of: /name="id" value="([0-9]+)"/).map { String($0.1) }, "\(page.text)")
                        let form = [("Content-Type", "application/x-www-form-urlencoded")]
                        #expect(try await visit.send(site.url("/auth/admin/events/resend"), method: .POST, headers: form, cookies: cookies, body: "csrf_token=forged&id=\(id)").status == 403)
                        let resent = try await visit.send(site.url("/auth/admin/events/resend"), method: .POST, headers: form, cookies: cookies, body: "csrf_token=\(csrf)&id=\(id)")
                        #expect(resent.status == 303)
                        let got = try await Self.received(record, within: .seconds(15)) { $0.contains { $0.sub == "000999.feedface.0001" } }
                        #expect(got.contains { $0.sub == "000999.feedface.0001" && $0.type == "person.groups_changed" && $0.invalid == nil }, "\(got)")
                        let after = try await AccessRulesEndToEndTests.firstAnswer(within: .seconds(5), status: 200) {
                            let page = try await visit.send(site.url("/auth/admin/events"), cookies: cookies)
                            return page.text.contains("Every account event has been delivered") ? page : Visit.Answer(status: 0, headers: page.headers, body: page.body)
                        }
                        #expect(after.status == 200, "\(after.text)")
                    }
                }
            }
        }
    }
}
