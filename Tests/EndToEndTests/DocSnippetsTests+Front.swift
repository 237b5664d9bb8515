import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// docs/front.md's commands, each block's every command run by the built `siwa` as a reader types it: only the socket's
/// path (a directory of this test's for `/run/siwa`), the app's port (the echo upstream's for 3000) and siwa's ports
/// and store (through `SIWA_PORT`, `SIWA_EMULATOR_PORT` and `SIWA_DB`, the command naming none) are this test's own.
extension DocSnippetsTests {
    @Test("docs/front.md's socket command: siwa serve --socket listens on that socket and on no TCP port, the socket is mode 0660, /healthz and the page's curl --unix-socket …/readyz answer over it, and browsers are sent to --public-url, where Apple returns a sign-in started through the socket; without --public-url it does not start")
    func frontSocket() async throws {
        try await Self.withDirectory("socket") { directory in
            let socket = directory.appendingPathComponent("siwa.sock").path
            let block = try DocSnippets.substituting(try Self.frontSocket.text(), ["/run/siwa/siwa.sock": socket])
            let commands = try DocSnippets.commands(in: block).map(Self.siwaArguments)
            #expect(commands.map { $0.first } == ["serve"], "the block's commands changed, and this test runs one siwa serve: \(commands)")
            let arguments = try #require(commands.first)
            let publicURL = try #require(arguments.firstIndex(of: "--public-url").map { arguments[$0 + 1] }, "\(arguments)")
            let origin = "http+unix://" + Self.hostEncoded(socket)

            try await Self.withSiwaServe(arguments, ready: { _ in
                (try? await Visit.withClient { try await $0.send(origin + "/healthz") })?.status == 200
            }) { site, siwa in
                var status = stat()
                #expect(lstat(socket, &status) == 0 && status.st_mode & S_IFMT == S_IFSOCK, "nothing listens at \(socket)")
                #expect(status.st_mode & 0o777 == 0o660, "the socket's mode is \(String(status.st_mode & 0o777, radix: 8)), not owner and group only")
                #expect((try? await HTTPProbe.status(site.url("/healthz"))) == nil, "siwa listens on SIWA_PORT \(site.port) as well as on the socket")

                // The health check the page gives under the block, as written but for the socket's path.
                let page = try DocSnippets.text(of: Self.frontSocket.page)
                let check = try #require(page.firstMatch(of: /`(curl --unix-socket \/run\/siwa\/siwa\.sock [^`]+)`/).map { String($0.output.1) }, "the page no longer shows its curl")
                let curl = try DocSnippets.words(of: check.replacingOccurrences(of: "/run/siwa/siwa.sock", with: socket))
                let checked = try await ChildProcess.run(URL(fileURLWithPath: "/usr/bin/env"), arguments: curl, environment: [:], timeLimit: .seconds(30))
                #expect(checked.status == 0 && checked.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "ready", "\(check): \(checked.status) \(checked.stdout) \(checked.stderr)")

                try await Visit.withClient { visit in
                    let health = try await visit.send(origin + "/healthz")
                    #expect(health.status == 200 && health.text.trimmingCharacters(in: .whitespacesAndNewlines) == "ok", "\(health.status) \(health.text)")
                    // Where browsers reach it: what it prints; a request naming another host is sent there.
                    #expect(try await Self.printedURL(siwa) == publicURL + "/", "\(siwa.logText)")
                    let elsewhere = try await visit.send(origin + "/auth/apple", headers: [("Accept", "text/html")])
                    #expect(elsewhere.status == 302 && elsewhere.location?.hasPrefix(publicURL + "/auth/apple?") == true, "\(elsewhere.status) \(elsewhere.location ?? "")")
                    // The socket's peer is believed as a proxy (no trusted_proxies): with the forwarded origin the page's nginx
                    // block sends, a sign-in starts, and Apple is to send the person back to public_url.
                    let host = try #require(URLComponents(string: publicURL)?.host)
                    let started = try await visit.send(origin + "/auth/apple", headers: [("Accept", "text/html"), ("X-Forwarded-Proto", "https"), ("X-Forwarded-Host", host)])
                    let authorize = try #require(started.location.flatMap(URLComponents.init(string:)), "\(started.status) \(started.text)")
                    #expect(authorize.string?.hasPrefix(site.emulatorOrigin + "/") == true, "\(started.location ?? "")")
                    let returnTo = authorize.queryItems?.first { $0.name == "redirect_uri" }?.value
                    #expect(returnTo == publicURL + "/auth/apple/callback", "Apple would send the person to \(returnTo ?? "nowhere")")
                }
            }

            // The page: "and so does `socket` without `public_url`".
            let alone = Array(arguments.prefix { $0 != "--public-url" })
            let ports = try await FreePorts.reserve(2)
            let refused = try await ChildProcess.run(
                ChildProcess.siwaExecutable, arguments: alone,
                environment: ["SIWA_PORT": String(ports[0]), "SIWA_EMULATOR_PORT": String(ports[1]), "SIWA_DB": directory.appendingPathComponent("alone.sqlite").path],
                timeLimit: .seconds(30)
            )
            #expect(refused.status != 0, "siwa \(alone.joined(separator: " ")) started: \(refused.stdout)")
            #expect(refused.stderr.contains("public_url"), "\(refused.stderr)")
        }
    }

    @Test("docs/front.md's --upstream command: /health (GET) and /webhooks/ (POST) reach the app without a sign-in and without an identity, and only with those methods; elsewhere a browser is sent to the sign-in and an API client gets 401, nothing of the app's; a person of example.com reaches the app with who they are and an assertion, one of example.org or example.cn gets the 403 page")
    func frontUpstream() async throws {
        try await withEchoUpstream { app in
            let block = try DocSnippets.substituting(try Self.frontUpstream.text(), ["http://127.0.0.1:3000": "http://127.0.0.1:\(app)"])
            let commands = try DocSnippets.commands(in: block).map(Self.siwaArguments)
            #expect(commands.map { $0.first } == ["serve"], "the block's commands changed, and this test runs one siwa serve: \(commands)")
            try await Self.withSiwaServe(try #require(commands.first)) { site, siwa in
                try await Visit.withClient { visit in
                    // The skipped routes: the app answers, nobody is named to it, signed in or not.
                    let health = try await visit.send(site.url("/health"))
                    #expect(health.status == 200, "\(health.text)\n\(siwa.logText)")
                    #expect(try health.echoed().path == "/health")
                    #expect(try health.echoed().values("x-auth-request-user") == [])
                    let hook = try await visit.send(site.url("/webhooks/apple"), method: .POST, headers: [("Content-Type", "application/json")], body: #"{"event":1}"#)
                    #expect(hook.status == 200, "\(hook.text)")
                    #expect(try hook.echoed().method == "POST")
                    #expect(try hook.echoed().path == "/webhooks/apple")
                    #expect(try hook.echoed().bodyBytes == 11)
                    #expect(try hook.echoed().values("x-siwa-assertion") == [])
                    // Each route is its method's alone.
                    #expect(try await visit.send(site.url("/health"), method: .POST).status == 401)
                    let hookRead = try await visit.send(site.url("/webhooks/apple"), headers: [("Accept", "application/json")])
                    #expect(hookRead.status == 401 && (try? hookRead.echoed()) == nil, "GET /webhooks/ is not skipped: \(hookRead.status)")

                    // Anything else: a browser goes to the sign-in, an API client is told 401; the app is not asked.
                    let page = site.url("/reports?year=2026")
                    let anonymous = try await visit.send(page, headers: [("Accept", "text/html")])
                    #expect(anonymous.status == 302)
                    let signIn = try #require(anonymous.location)
                    #expect(signIn.hasPrefix(site.url("/auth/apple?")), "\(signIn)")
                    let api = try await visit.send(site.url("/api/reports"), headers: [("Accept", "application/json")])
                    #expect(api.status == 401)
                    #expect(api.headers.first(name: "content-type")?.hasPrefix("application/problem+json") == true, "\(api.headers)")
                    #expect((try? api.echoed()) == nil)

                    // --allowed-email-domains example.com: Ada passes with her identity and an assertion.
                    let ada = site.user("Ada")
                    let adas = try await visit.signIn(site, user: ada, start: signIn)
                    #expect(adas.returnedTo == page)
                    let shown = try await visit.send(page, headers: [("Accept", "text/html")], cookies: ["siwa_session": adas.session])
                    #expect(shown.status == 200, "\(shown.text)")
                    #expect(try shown.echoed().path == "/reports?year=2026")
                    #expect(try shown.echoed().values("x-auth-request-user") == [ada.sub])
                    #expect(try shown.echoed().values("x-auth-request-email") == [ada.email])
                    #expect(try shown.echoed().values("x-siwa-assertion").count == 1)

                    // Grace (example.org) and 李雷 (example.cn) are signed in but not let in.
                    for name in ["Grace", "李"] {
                        let user = site.user(name)
                        let session = try await visit.signIn(site, user: user).session
                        let refused = try await visit.send(page, headers: [("Accept", "text/html")], cookies: ["siwa_session": session])
                        #expect(refused.status == 403, "\(user.email): \(refused.status)")
                        #expect((try? refused.echoed()) == nil, "\(user.email) reached the app")
                        #expect(refused.text.contains(user.email), "the 403 page does not say whom \(user.email) is signed in as")
                    }
                }
            }
        }
    }

    /// `socket`'s path as the host of an `http+unix://` URL (async-http-client's), every `/` percent-encoded.
    static func hostEncoded(_ socket: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return socket.addingPercentEncoding(withAllowedCharacters: allowed) ?? socket
    }
}
