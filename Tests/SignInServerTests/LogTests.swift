import AppleIDEmulator
import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import SignInServer
import Testing

/// Logs are read by more people than the database: secrets never go there.
@Suite("Nothing secret in logs")
struct LogTests {
    /// A refresh token as the emulator issues them.
    static let refreshTokenPattern = #"r[0-9a-f]{32}\.0\.[a-z]{4,5}\.[A-Za-z0-9_-]{22}"#
    /// The start of every ES256 client secret this server signs (`{"alg":"ES256",`).
    static let clientSecretPrefix = "eyJhbGciOiJFUzI1NiIs"

    static func expectNoSecrets(_ logs: String, besides values: [String], sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(logs.range(of: refreshTokenPattern, options: .regularExpression) == nil, "a refresh token is in the logs", sourceLocation: sourceLocation)
        #expect(!logs.contains(clientSecretPrefix), "a client secret is in the logs", sourceLocation: sourceLocation)
        #expect(!logs.contains(hex(clientSecretPrefix)), "a client secret is in the logs (hex)", sourceLocation: sourceLocation)
        for value in values where !value.isEmpty {
            #expect(!logs.contains(value), "a secret value is in the logs", sourceLocation: sourceLocation)
            // AsyncHTTPClient's trace logs show bodies as hex.
            #expect(!logs.contains(hex(value)), "a secret value is in the logs (hex)", sourceLocation: sourceLocation)
        }
    }

    static func hex(_ text: String) -> String {
        text.utf8.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }

    @Test("a full sign-in, session page and sign-out log neither session id, binding, CSRF token, refresh token nor client secret")
    func fullSignIn() async throws {
        try await withServer { h in
            let signIn = try await h.signIn(hide: true)
            #expect(signIn.response.status == .seeOther)
            let session = try #require(signIn.session)
            let page = try await h.sessionPage(session)
            let csrf = try #require(page.csrfToken)
            let out = try await h.post("/auth/signout", form: "csrf_token=" + csrf, cookies: [h.sessionCookie: session])
            #expect(out.status == .seeOther)

            let logs = h.logs.text
            // The capture works: the sign-in and the sign-out were logged, and the outbound call to Apple traced.
            #expect(logs.contains("signed in"))
            #expect(logs.contains("signed out"))
            #expect(h.logs.all.count > 3)
            // The refresh token as Apple issued it, from the store (where it is sealed).
            let refreshToken = try h.cipher.open(try #require(try h.database.refreshToken(Fixtures.ada)))
            Self.expectNoSecrets(logs, besides: [session, signIn.started.binding, csrf, SignInFlow.hash(session), refreshToken, signIn.fields["code"] ?? "", signIn.fields["id_token"] ?? ""])
        }
    }

    @Test("failures (replay, misconfiguration) log no secret either")
    func failures() async throws {
        let unknownKey = P256.Signing.PrivateKey().pemRepresentation
        try await withServer(ServerOptions(privateKeyPEM: unknownKey)) { h in
            let signIn = try await h.signIn()
            #expect(signIn.response.status == .internalServerError)
            _ = try await h.callback(signIn.fields, binding: signIn.started.binding)
            Self.expectNoSecrets(h.logs.text, besides: [signIn.started.binding, signIn.fields["id_token"] ?? ""])
        }
    }
}
