import AppleIDEmulator
import AppleSignIn
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import JOSE
import Logging
@testable import SignInServer
import Testing

/// Apple's return, hardened: error returns are bound to the browser like successful ones, the email comes only
/// from what Apple signed, nothing from outside can forge a log line, and the database is the owner's alone.
@Suite("Hardening of the return")
struct ReturnHardeningTests {
    @Test("an error return without the browser's binding does not use up that browser's sign-in", arguments: ["user_cancelled_authorize", "popup_closed_by_user", "popup_blocked_by_browser"])
    func errorReturnNeedsBinding(error: String) async throws {
        try await withServer { h in
            let started = try await h.start()
            for binding in [nil, "someone-elses-binding"] as [String?] {
                let forged = try await h.callback(["error": error, "state": started.state], binding: binding)
                #expect(forged.status == .badRequest)
                #expect(forged.errorTitle == Fixtures.Heading.expired)
                #expect(try h.database.count("pending_authorizations") == 1, "the pending sign-in was consumed by a return without its binding")
            }
            // The browser that started it still completes its sign-in.
            let fields = try await h.authorize(started.authorizeURL)
            let response = try await h.callback(fields, binding: started.binding)
            #expect(response.status == .seeOther)
            #expect(try h.database.count("sessions") == 1)
        }
    }

    @Test("the email in the posted user JSON is ignored: only an email Apple signed is kept")
    func forgedUserEmailIgnored() async throws {
        try await withServer { h in
            let started = try await h.start()
            // The id_token of a sign-in without the email scope carries no email at all.
            var fields = try await h.authorize(started.authorizeURL, override: ["scope": "name"])
            fields["user"] = #"{"name":{"firstName":"Eve","lastName":"Mallory"},"email":"victim@example.com"}"#
            let response = try await h.callback(fields, binding: started.binding)
            #expect(response.status == .seeOther)
            let user = try #require(try h.database.user(Fixtures.ada))
            #expect(user["email"] as String? == nil, "the unsigned email was stored")
            #expect(user["first_name"] as String? == "Eve", "the first-time name still comes from the user JSON")
            let page = try await h.sessionPage(response.setCookie(h.sessionCookie)?.value)
            #expect(!page.text.contains("victim@example.com"))
        }
    }

    @Test("the email Apple signed wins over a different one in the user JSON")
    func signedEmailWins() async throws {
        try await withServer { h in
            let started = try await h.start()
            var fields = try await h.authorize(started.authorizeURL)
            fields["user"] = #"{"name":{"firstName":"Ada","lastName":"Lovelace"},"email":"victim@example.com"}"#
            #expect(try await h.callback(fields, binding: started.binding).status == .seeOther)
            #expect(try h.database.user(Fixtures.ada)?["email"] as String? == "ada@example.com")
        }
    }

    @Test("values from outside (error, state, a token's kid) cannot start a forged log line")
    func logInjection() async throws {
        try await withServer { h in
            let forgedLine = "\n2026-01-01T00:00:00+0000 critical siwa: FORGED admin signed in"
            _ = try await h.callback(["error": "invalid_request" + forgedLine, "state": "s" + forgedLine], binding: nil)
            let started = try await h.start()
            var fields = try await h.authorize(started.authorizeURL)
            let header = Base64URL.encode(Array(#"{"alg":"RS256","kid":"k\#(forgedLine.replacingOccurrences(of: "\n", with: "\\n"))"}"#.utf8))
            fields["id_token"] = header + "." + (fields["id_token"] ?? "").split(separator: ".").dropFirst().joined(separator: ".")
            _ = try await h.callback(fields, binding: started.binding)
            let lines = h.logs.all
            #expect(!lines.isEmpty)
            for line in lines {
                #expect(!line.contains("\n") && !line.contains("\r"), "a logged value broke the line: \(line)")
            }
            #expect(lines.contains { $0.contains(#"\n2026-01-01T00:00:00+0000 critical siwa: FORGED"#) }, "the value is logged, escaped")
        }
    }

    @Test("the escaping handler writes control characters as escapes and leaves other text alone")
    func escaping() {
        #expect(EscapingLogHandler.escape("a\nb\rc\td\u{1B}[31m\u{7F}李雷") == #"a\nb\rc\td\u{1b}[31m\u{7f}李雷"#)
        #expect(EscapingLogHandler.escape("plain text") == "plain text")
    }

    @Test("the SQLite database and its -wal and -shm files are readable by their owner only, whatever the umask")
    func databaseFileModes() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-modes-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("siwa.sqlite").path
        let previous = umask(0)
        defer { umask(previous) }
        let store = try SQLiteStore(path: path, cipher: TokenCipher(base64Keys: [TokenCipher.generateKey()]))
        try await store.migrate()
        try await store.savePending(PendingAuthorization(state: "s", nonce: "n", returnTo: "/", bindingHash: "b", createdAt: Date(), expiresAt: Date().addingTimeInterval(60)))
        for file in [path, path + "-wal", path + "-shm"] {
            let attributes = try FileManager.default.attributesOfItem(atPath: file)
            let mode = (attributes[.posixPermissions] as? NSNumber)?.intValue ?? -1
            #expect(mode == 0o600, "\(file) has mode \(String(mode, radix: 8))")
        }
    }

    @Test("an existing database readable by others is narrowed to its owner when opened")
    func existingDatabaseNarrowed() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-open-\(UUID().uuidString).sqlite").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect(FileManager.default.createFile(atPath: path, contents: nil, attributes: [.posixPermissions: 0o644]))
        _ = try SQLiteStore(path: path, cipher: TokenCipher(base64Keys: [TokenCipher.generateKey()]))
        let mode = (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue
        #expect(mode == 0o600)
    }
}
