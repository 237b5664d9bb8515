import Foundation
import TestSupport
import Testing

/// docs/provider-authlib.md as its reader follows it: the client registered with the page's `siwa oidc add-client`,
/// and the page's `app.py` run with the Authlib and Flask of scripts/test, in front of a person who already has a
/// siwa session (the browser's part done by hand, as the Apache blocks' test does).
extension DocSnippetsTests {
    @Test("docs/provider-authlib.md's registration command and app.py: a person with a siwa session signs in to the app and sees their name and email; the app's sign-out, confirmed at siwa, ends the siwa session and comes back to the app, signed out there too")
    func authlibApp() async throws {
        let ports = try await FreePorts.reserve(2)
        let (siwa, app) = ("http://127.0.0.1:\(ports[0])", "http://127.0.0.1:\(ports[1])")
        try await Self.withDirectory("authlib-doc") { directory in
            let database = directory.appendingPathComponent("siwa.sqlite").path

            // The page's registration, the app's origin made this test's.
            let registration = try DocSnippets.substituting(try Self.authlibRegistration.text(), ["https://app.example.com": app])
            let register = try Self.siwaArguments(try DocSnippets.command(in: registration, starting: "siwa oidc add-client"))
            let added = try await ChildProcess.run(ChildProcess.siwaExecutable, arguments: register + ["--db", database], environment: [:], timeLimit: .seconds(30))
            #expect(added.status == 0, "\(added.stderr)")
            let secret = try #require(added.stdout.firstMatch(of: /client_secret: (\S+)/).map { String($0.output.1) }, "\(added.stdout)")

            let program = try DocSnippets.substituting(try Self.authlib.text(), [
                "https://auth.example.com": siwa, "<client_secret>": secret, "<random>": UUID().uuidString,
                "https://app.example.com": app, "port=5000": "port=\(ports[1])",
            ])
            try await DocSnippets.withPythonApp(program, port: ports[1]) { python in
                try await LocalSite.run(settings: ["port": String(ports[0]), "db": database]) { site in
                    try await Visit.withClient { visit in
                        let ada = site.user("Ada")
                        let siwaSession = try await visit.signIn(site, user: ada).session
                        var jar: [String: String] = [:]
                        #expect(try await visit.send(python.url("/")).text.contains("Sign in with Apple"), "\(python.logs())")

                        // The app's sign-in: to siwa's authorize, back with a code (the person is signed in at siwa).
                        let login = try await visit.send(python.url("/login"))
                        Self.remember(login, in: &jar)
                        let authorize = try #require(login.location, "\(login.status) \(login.text)\n\(python.logs())")
                        #expect(authorize.hasPrefix(site.url("/oauth2/authorize?")), "\(authorize)")
                        let code = try await visit.send(authorize, cookies: ["siwa_session": siwaSession])
                        let callback = try #require(code.location, "siwa gave no code: \(code.status) \(code.text)")
                        #expect(callback.hasPrefix(python.url("/callback?")), "\(callback)")
                        let taken = try await visit.send(callback, cookies: jar)
                        Self.remember(taken, in: &jar)
                        #expect(taken.status == 302, "\(taken.text)\n\(python.logs())")
                        let home = try await visit.send(python.url("/"), cookies: jar)
                        #expect(home.text.contains("Signed in as \(ada.firstName) \(ada.lastName) (\(ada.email))"), "\(home.text)\n\(python.logs())")

                        // The app's sign-out: siwa's confirmation, then back to the app, signed out of both.
                        let logout = try await visit.send(python.url("/logout"), cookies: jar)
                        Self.remember(logout, in: &jar)
                        let endSession = try #require(logout.location, "\(logout.status) \(logout.text)\n\(python.logs())")
                        #expect(endSession.hasPrefix(site.url("/oauth2/end-session?")), "\(endSession)")
                        let done = try await Self.confirmEndSession(endSession, site: site, siwaSession: siwaSession, visit: visit)
                        let back = try #require(done.location)
                        #expect(back.hasPrefix(python.url("/")), "\(back)")
                        #expect(try await visit.send(back, cookies: jar).text.contains("Sign in with Apple"))
                        #expect(try await visit.send(site.url("/auth/api/session"), cookies: ["siwa_session": siwaSession]).status == 401)
                    }
                }
            }
        }
    }
}
