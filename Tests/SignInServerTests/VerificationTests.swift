import AppleIDEmulator
import AppleSignIn
import Foundation
import Hummingbird
import HummingbirdTesting
import JOSE
import SignInServer
import Testing

/// Apple's answer must verify: nonce, c_hash, signature, and one `sub` on both channels.
@Suite("Verification of Apple's answer")
struct VerificationTests {
    static func expectNotVerified(_ h: Harness, _ response: TestResponse, sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(response.status == .badRequest, sourceLocation: sourceLocation)
        #expect(response.errorTitle == Fixtures.Heading.notVerified, sourceLocation: sourceLocation)
        try CallbackFailureTests.expectNothingStored(h, response, sourceLocation: sourceLocation)
    }

    @Test("a token carrying another nonce than the one sent is refused before the code is exchanged")
    func wrongNonce() async throws {
        try await withServer { h in
            let started = try await h.start()
            let fields = try await h.authorize(started.authorizeURL, override: ["nonce": RandomToken.generate()])
            let response = try await h.callback(fields, binding: started.binding)
            try Self.expectNotVerified(h, response)
            #expect(try await h.emulatorCounters()["codesExchanged"] == 0)
        }
    }

    @Test("a code swapped for another valid code (c_hash mismatch) is refused")
    func codeSwapped() async throws {
        try await withServer { h in
            let mine = try await h.start()
            let other = try await h.start()
            var fields = try await h.authorize(mine.authorizeURL)
            let otherFields = try await h.authorize(other.authorizeURL)
            fields["code"] = otherFields["code"]
            let response = try await h.callback(fields, binding: mine.binding)
            try Self.expectNotVerified(h, response)
            #expect(try await h.emulatorCounters()["codesExchanged"] == 0)
        }
    }

    @Test("an attacker's own code slipped into the victim's form_post sign-in without an id_token is refused before any exchange")
    func codeInjection() async throws {
        try await withServer { h in
            let victim = try await h.start()
            let attacker = try await h.start()
            let attackerFields = try await h.authorize(attacker.authorizeURL, user: Fixtures.grace)
            // The victim's browser is made to post the victim's state and binding with the attacker's code.
            let response = try await h.callback(["state": victim.state, "code": try #require(attackerFields["code"])], binding: victim.binding)
            #expect(response.status == .badRequest)
            #expect(response.errorTitle == Fixtures.Heading.malformed)
            try CallbackFailureTests.expectNothingStored(h, response)
            #expect(try await h.emulatorCounters()["codesExchanged"] == 0)
        }
    }

    enum Forgery: String, CaseIterable, Sendable {
        /// Signed with another key under the emulator's own kid.
        case foreignKeyKnownKid
        /// Signed with another key under a kid Apple never published.
        case unknownKid
        /// Apple's signature kept, a claim changed.
        case tamperedClaims
        /// `alg: none`, no signature.
        case algNone
        /// Not a JWT at all.
        case garbage
    }

    @Test("a forged or tampered identity token is refused", arguments: Forgery.allCases)
    func forged(_ forgery: Forgery) async throws {
        try await withServer { h in
            let started = try await h.start()
            var fields = try await h.authorize(started.authorizeURL, user: Fixtures.ada)
            let genuine = try #require(fields["id_token"])
            let forger = try Forger()
            switch forgery {
            case .foreignKeyKnownKid:
                fields["id_token"] = forger.resign(genuine, kid: JWT.header(genuine)["kid"] as? String) { $0["sub"] = Fixtures.grace }
            case .unknownKid:
                fields["id_token"] = forger.resign(genuine) { $0["sub"] = Fixtures.grace }
            case .tamperedClaims:
                fields["id_token"] = JWT.tampered(genuine) { $0["sub"] = Fixtures.grace }
            case .algNone:
                let parts = forger.resign(genuine).split(separator: ".")
                let header = Base64URL.encode(Data(#"{"alg":"none","kid":"\#(JWT.header(genuine)["kid"] as! String)"}"#.utf8))
                fields["id_token"] = header + "." + String(parts[1]) + "."
            case .garbage:
                fields["id_token"] = "not-a-token"
            }
            let response = try await h.callback(fields, binding: started.binding)
            try Self.expectNotVerified(h, response)
            #expect(try await h.emulatorCounters()["codesExchanged"] == 0)
        }
    }

    @Test("a token signed with a key Apple publishes, unchanged, is accepted (the control for the sub test)")
    func trustedForgerControl() async throws {
        let forger = try Forger()
        try await withServer(ServerOptions(trustedForger: forger)) { h in
            let started = try await h.start()
            var fields = try await h.authorize(started.authorizeURL, user: Fixtures.grace)
            fields["id_token"] = forger.resign(try #require(fields["id_token"]))
            let response = try await h.callback(fields, binding: started.binding)
            #expect(response.status == .seeOther)
            #expect(response.location == "/session")
        }
    }

    @Test("the front-channel token names user A while the code belongs to user B: refused, nothing stored")
    func subjectMismatch() async throws {
        let forger = try Forger()
        try await withServer(ServerOptions(trustedForger: forger)) { h in
            let started = try await h.start()
            var fields = try await h.authorize(started.authorizeURL, user: Fixtures.grace)
            // Every other claim stays right (nonce, c_hash, aud, iss, exp), so only the sub check can refuse it.
            fields["id_token"] = forger.resign(try #require(fields["id_token"])) { $0["sub"] = Fixtures.ada }
            let response = try await h.callback(fields, binding: started.binding)
            try Self.expectNotVerified(h, response)
            #expect(try await h.emulatorCounters()["codesExchanged"] == 1, "the mismatch is found after the exchange")
            #expect(h.logs.text.contains("sub differs"))
        }
    }

    @Test("a validly signed token for another audience or issuer, or expired, is refused", arguments: ["aud", "iss", "exp"])
    func wrongClaims(claim: String) async throws {
        let forger = try Forger()
        try await withServer(ServerOptions(trustedForger: forger)) { h in
            let started = try await h.start()
            var fields = try await h.authorize(started.authorizeURL)
            fields["id_token"] = forger.resign(try #require(fields["id_token"])) { claims in
                switch claim {
                case "aud": claims["aud"] = "com.example.other"
                case "iss": claims["iss"] = "https://appleid.apple.com.evil.example"
                default: claims["exp"] = Int(Date().timeIntervalSince1970) - 3600
                }
            }
            let response = try await h.callback(fields, binding: started.binding)
            try Self.expectNotVerified(h, response)
        }
    }
}
