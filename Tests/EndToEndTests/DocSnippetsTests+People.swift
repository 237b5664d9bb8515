import Foundation
import SignInServer
import TestSupport
import Testing

/// docs/people.md as a reader uses it: its `siwa invite create` command run by the built `siwa`, its `event_webhooks`
/// read by siwa's own reading of the key, and its Python receiver given a delivery siwa signed (and one forged).
extension DocSnippetsTests {
    @Test("docs/people.md: siwa invite create as written prints a link at public_url; the event_webhooks example is read with all six events; the Python receiver as written accepts a body siwa signed with the example's secret and refuses a forged one")
    func peoplePage() async throws {
        try await Self.withDirectory("people-page") { directory in
            let command = try Self.siwaArguments(try #require(DocSnippets.commands(in: try Self.peopleInvite.fenced().text).first))
            #expect(command.prefix(2) == ["invite", "create"], "\(command)")
            let made = try await ChildProcess.run(
                ChildProcess.siwaExecutable, arguments: command,
                environment: ["SIWA_DB": directory.appendingPathComponent("siwa.sqlite").path, "SIWA_PUBLIC_URL": "https://auth.example.com"], timeLimit: .seconds(60)
            )
            #expect(made.status == 0, "\(made.stderr)")
            #expect(made.stdout.hasPrefix("https://auth.example.com/auth/invite/") && made.stderr.contains("finance"), "\(made.stdout)\(made.stderr)")

            let configuration = try Self.peopleWebhooks.fenced().text
            let object = try #require(try JSONSerialization.jsonObject(with: Data(configuration.utf8)) as? [String: Any])
            let list = String(decoding: try JSONSerialization.data(withJSONObject: try #require(object["event_webhooks"])), as: UTF8.self)
            let webhooks = try EventWebhook.list(fromJSON: list)
            #expect(webhooks.count == 1 && webhooks[0].events.count == AccountEventType.allCases.count)

            // The receiver as written, given what siwa sends.
            let receiver = try Self.peopleReceiver.fenced().text
            let body = #"{"data":{"sub":"000123.a1b2.1234"},"timestamp":"2026-11-28T20:00:00.000Z","type":"person.deleted"}"#
            let timestamp = Int(Date().timeIntervalSince1970)
            let signature = AccountEvents.signature(id: "msg_doc", timestamp: timestamp, body: body, secret: webhooks[0].secret)
            let forged = AccountEvents.signature(id: "msg_doc", timestamp: timestamp, body: body, secret: Array("another secret of 32 bytes long!".utf8))
            let program = receiver + """

                import sys
                body = \(String(reflecting: body)).encode()
                def headers(signature):
                    return {"webhook-id": "msg_doc", "webhook-timestamp": "\(timestamp)", "webhook-signature": signature}
                print(receive(body, headers("\(signature)"))["type"])
                try:
                    receive(body, headers("\(forged)"))
                    print("forged accepted")
                except Exception as error:
                    print("forged refused:", type(error).__name__)
                """
            let ran = try await DocSnippets.runPython(program)
            #expect(ran.status == 0, "\(ran.stderr)")
            #expect(ran.stdout == "person.deleted\nforged refused: WebhookVerificationError\n", "\(ran.stdout)\(ran.stderr)")
        }
    }
}
