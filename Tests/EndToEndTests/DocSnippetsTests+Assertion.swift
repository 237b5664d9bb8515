import AppleIDEmulator
import Foundation
import JWTKit
import TestSupport
import Testing

/// docs/front.md's two ways for an upstream to verify `X-Siwa-Assertion`, PyJWT's and jwt-kit's, run as the page
/// shows them against assertions siwa signed: siwa at the page's `https://auth.example.com` (its `public_url`, reached
/// on loopback through the proxy headers a trusted proxy sends), the assertion asked for the page's
/// `https://app.example.com` by `/auth/check` as nginx asks for it.
extension DocSnippetsTests {
    /// Run by `pyJWTBlock`, and by `BrowserSignInTests.verifiedWithPyJWT` for the assertions it checks.
    static let pyJWT = Shown(page: "docs/front.md", language: "python", after: "An upstream verifies it in Python")
    /// Compiled as DocSnippetsTests+JWTKit.swift (`jwtKitBlockIsThisFile`), run by `jwtKitBlock`.
    static let jwtKit = Shown(page: "docs/front.md", language: "swift", after: "and in Swift with jwt-kit 5")

    /// The origins the blocks name: siwa's `public_url` (the assertion's `iss`) and the app's (its `aud`).
    static let pageIssuer = "https://auth.example.com"
    static let pageAudience = "https://app.example.com"

    /// The PyJWT block run with the Python of scripts/test's venv on `token`, as the request's `X-Siwa-Assertion`,
    /// with the key set at `keySet`, and `issuer` and `audience` for the page's: it prints the claims it returns as
    /// one line of JSON after the block. A refused token ends it with PyJWT's exception.
    static func runPyJWTBlock(_ token: String, keySet: String, issuer: String, audience: String) async throws -> ChildProcess.Outcome {
        let block = try DocSnippets.substituting(try pyJWT.text(), [
            pageIssuer + "/.well-known/siwa/jwks.json": keySet, pageIssuer: issuer, pageAudience: audience,
        ])
        // The request of the upstream's web framework, as much of it as the block reads.
        let request = "import os, types\nrequest = types.SimpleNamespace(headers={\"X-Siwa-Assertion\": os.environ[\"SIWA_ASSERTION\"]})\n"
        let program = request + block + "import json\nprint(json.dumps(claims))\n"
        return try await DocSnippets.runPython(program, environment: ["SIWA_ASSERTION": token])
    }

    /// The claims PyJWT's block returned for `token`, nil when it refused the token (`refusal` says why).
    static func claimsFromPyJWT(_ token: String, keySet: String) async throws -> (claims: [String: Any]?, refusal: String) {
        let run = try await runPyJWTBlock(token, keySet: keySet, issuer: pageIssuer, audience: pageAudience)
        guard run.status == 0 else { return (nil, run.stderr) }
        let line = run.stdout.split(separator: "\n").last.map(String.init) ?? ""
        return (try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], run.stderr)
    }

    @Test("docs/front.md's PyJWT block: it returns the claims of the assertion siwa signed for the app (the person's sub and email), and refuses one whose claims were changed and one siwa signed for another site")
    func pyJWTBlock() async throws {
        try await Self.withPageAssertions { site, assertions in
            let ada = site.user("Ada")
            let genuine = try await Self.claimsFromPyJWT(assertions.genuine, keySet: assertions.keySetURL)
            #expect(genuine.claims?["sub"] as? String == ada.sub, "\(genuine.refusal)")
            #expect(genuine.claims?["email"] as? String == ada.email)

            let tampered = try await Self.claimsFromPyJWT(assertions.tampered, keySet: assertions.keySetURL)
            #expect(tampered.claims == nil, "a changed assertion was accepted: \(tampered.claims ?? [:])")
            #expect(tampered.refusal.contains("InvalidSignatureError"), "\(tampered.refusal)")

            let elsewhere = try await Self.claimsFromPyJWT(assertions.forAnotherSite, keySet: assertions.keySetURL)
            #expect(elsewhere.claims == nil, "another site's assertion was accepted: \(elsewhere.claims ?? [:])")
            #expect(elsewhere.refusal.contains("InvalidAudienceError"), "\(elsewhere.refusal)")
        }
    }

    @Test("docs/front.md's jwt-kit block, compiled: it gives the person of the assertion siwa signed for the app, and refuses one whose claims were changed and one siwa signed for another site")
    func jwtKitBlock() async throws {
        try await Self.withPageAssertions { site, assertions in
            func person(_ token: String) async throws -> SiwaAssertion {
                try await SiwaAssertion.person(in: UpstreamRequest(headers: ["X-Siwa-Assertion": token]), jwksText: assertions.keySet)
            }
            let ada = site.user("Ada")
            let genuine = try await person(assertions.genuine)
            #expect(genuine.sub.value == ada.sub)
            #expect(genuine.email == ada.email)
            #expect(genuine.name == "\(ada.firstName) \(ada.lastName)")

            /// What jwt-kit's refusal of `token` was, nil when the block accepted it.
            func refusal(_ token: String) async throws -> JWTError.ErrorType? {
                do {
                    _ = try await person(token)
                    return nil
                } catch let error as JWTError {
                    return error.errorType
                }
            }
            #expect(try await refusal(assertions.tampered) == .signatureVerificationFailed, "a changed assertion")
            #expect(try await refusal(assertions.forAnotherSite) == .claimVerificationFailure, "another site's assertion")
        }
    }

    @Test("the jwt-kit block docs/front.md shows is the code DocSnippetsTests+JWTKit.swift compiles")
    func jwtKitBlockIsThisFile() throws {
        let file = try String(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("DocSnippetsTests+JWTKit.swift"), encoding: .utf8)
        let parts = file.components(separatedBy: "// docs/front.md's jwt-kit block, from here…\n").dropFirst().map {
            $0.components(separatedBy: "// …to here.").first ?? ""
        }
        try #require(parts.count == 2, "DocSnippetsTests+JWTKit.swift no longer marks the block's two parts")
        #expect(parts[0] + "\n" + Self.dedented(parts[1]) == (try Self.jwtKit.text()))
    }

    /// `text` with the blanks its lines start with taken off as far as its first line's reach, and the line the
    /// closing marker starts dropped (it holds only blanks).
    static func dedented(_ text: String) -> String {
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        if lines.last?.allSatisfy({ $0 == " " }) == true { lines.removeLast() }
        let indent = lines.first?.prefix { $0 == " " }.count ?? 0
        return lines.map { $0.dropFirst(min(indent, $0.prefix { $0 == " " }.count)) + "\n" }.joined()
    }

    /// Assertions siwa signed, for the blocks to judge.
    struct PageAssertions {
        /// Where siwa's key set is fetched (the page's URL, on loopback), and its body.
        var keySetURL: String
        var keySet: String
        /// Ada's, for `https://app.example.com`.
        var genuine: String
        /// The same with Grace's `sub` put in its payload, its signature left as it was.
        var tampered: String
        /// Ada's, for `https://other.example.com`.
        var forAnotherSite: String
    }

    /// Runs `body` with siwa at the page's `public_url` and the assertions it signs for Ada, as a proxy on loopback
    /// (trusted) asks for them with the app's origin in `X-Forwarded-Proto` and `-Host`.
    static func withPageAssertions(_ body: (LocalSite, PageAssertions) async throws -> Void) async throws {
        try await LocalSite.run(settings: ["public_url": pageIssuer]) { site in
            #expect(site.origin == pageIssuer)
            let local = "http://127.0.0.1:\(site.port)"
            try await Visit.withClient { visit in
                let session = try await signInBehindProxy(site, local: local, user: site.user("Ada"), visit: visit)
                func assertion(for origin: String) async throws -> String {
                    let host = try #require(URLComponents(string: origin)?.host)
                    let check = try await visit.send(
                        local + "/auth/check", headers: [("X-Forwarded-Proto", "https"), ("X-Forwarded-Host", host)], cookies: [session.name: session.value]
                    )
                    // 202: the person is let in (nginx takes any 2xx).
                    #expect(check.status == 202, "\(check.status) \(check.text)")
                    return try #require(check.headers.first(name: "x-siwa-assertion"), "no assertion for \(origin): \(check.headers)")
                }
                let genuine = try await assertion(for: pageAudience)
                let keySetURL = local + "/.well-known/siwa/jwks.json"
                try await body(site, PageAssertions(
                    keySetURL: keySetURL, keySet: try await visit.send(keySetURL).text, genuine: genuine,
                    tampered: try tamper(genuine, sub: site.user("Ada").sub, with: site.user("Grace").sub),
                    forAnotherSite: try await assertion(for: "https://other.example.com")
                ))
            }
        }
    }

    /// `token` with `sub` replaced by `other` in its payload, its header and signature kept.
    static func tamper(_ token: String, sub: String, with other: String) throws -> String {
        let parts = token.split(separator: ".").map(String.init)
        try #require(parts.count == 3, "not a compact JWS: \(token)")
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        let payload = String(decoding: try #require(Data(base64Encoded: base64)), as: UTF8.self)
        try #require(payload.contains(sub), "\(payload)")
        let changed = Data(payload.replacingOccurrences(of: sub, with: other).utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        return [parts[0], changed, parts[2]].joined(separator: ".")
    }

    /// `user` signed in at siwa on `local` as a browser does through a proxy at siwa's HTTPS `public_url`: the proxy's
    /// `X-Forwarded-Proto` and `-Host` on the start and on Apple's return. Returns the session cookie.
    static func signInBehindProxy(_ site: LocalSite, local: String, user: EmulatorConfiguration.User, visit: Visit) async throws -> (name: String, value: String) {
        let host = try #require(URLComponents(string: site.origin)?.host)
        let proxy = [("X-Forwarded-Proto", "https"), ("X-Forwarded-Host", host)]
        let started = try await visit.send(local + "/auth/apple", headers: proxy)
        let authorize = try #require(started.location, "the sign-in did not start: \(started.status) \(started.text)")
        let binding = try #require(started.setCookie("__Host-siwa_binding"), "\(started.headers)")
        let consent = try await visit.send(authorize + "&emulator_user=\(user.sub)&emulator_email=share&emulator_action=continue&emulator_respond=json")
        let fields = try #require((try JSONSerialization.jsonObject(with: Data(consent.body.readableBytesView)) as? [String: Any])?["fields"] as? [String: String], "\(consent.text)")
        let form = fields.sorted { $0.key < $1.key }.map { "\($0.key)=\(Visit.formEncode($0.value))" }.joined(separator: "&")
        let returned = try await visit.send(
            local + "/auth/apple/callback", method: .POST, headers: proxy + [("Content-Type", "application/x-www-form-urlencoded")],
            cookies: ["__Host-siwa_binding": binding], body: form
        )
        let session = try #require(returned.setCookie("__Host-siwa_session"), "the return set no session: \(returned.status) \(returned.text)")
        return ("__Host-siwa_session", session)
    }
}
