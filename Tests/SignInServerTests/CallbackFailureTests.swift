import AppleIDEmulator
import AppleSignIn
import Foundation
import Hummingbird
import HummingbirdTesting
import JOSE
import Logging
import SignInServer
import Testing

/// What a person sees when Apple's return cannot be used, and that nothing is stored then.
@Suite("Callback failures")
struct CallbackFailureTests {
    /// Nothing of a sign-in was stored and no session cookie was set.
    static func expectNothingStored(_ h: Harness, _ response: TestResponse, sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(response.setCookie(h.sessionCookie) == nil, "no session cookie", sourceLocation: sourceLocation)
        #expect(try h.database.count("sessions") == 0, sourceLocation: sourceLocation)
        #expect(try h.database.count("users") == 0, sourceLocation: sourceLocation)
        #expect(try h.database.count("refresh_tokens") == 0, sourceLocation: sourceLocation)
    }

    @Test("Cancel at Apple: the cancelled page, 200, no session, the sign-in is used up")
    func cancelled() async throws {
        try await withServer { h in
            let started = try await h.start()
            let fields = try await h.authorize(started.authorizeURL, action: "cancel")
            #expect(fields["error"] == "user_cancelled_authorize")
            let response = try await h.callback(fields, binding: started.binding)
            #expect(response.status == .ok)
            #expect(response.errorTitle == Fixtures.Heading.cancelled)
            #expect(response.element("error-action") == "Try again")
            #expect(try #require(response.setCookie("siwa_binding")).isDeletion)
            #expect(try h.database.count("pending_authorizations") == 0)
            try Self.expectNothingStored(h, response)
        }
    }

    @Test("the popup's popup_closed_by_user is a cancellation too")
    func popupClosed() async throws {
        try await withServer { h in
            let started = try await h.start()
            let response = try await h.callback(["error": "popup_closed_by_user", "state": started.state], binding: started.binding)
            #expect(response.status == .ok)
            #expect(response.errorTitle == Fixtures.Heading.cancelled)
            try Self.expectNothingStored(h, response)
        }
    }

    @Test("another error from Apple stops the sign-in")
    func otherAppleError() async throws {
        try await withServer { h in
            let started = try await h.start()
            let response = try await h.callback(["error": "invalid_request", "state": started.state], binding: started.binding)
            #expect(response.status == .badRequest)
            #expect(response.errorTitle == Fixtures.Heading.notVerified)
            #expect(try h.database.count("pending_authorizations") == 0)
            try Self.expectNothingStored(h, response)
        }
    }

    @Test("a replayed answer (state already used) shows the expired page and creates no session")
    func replay() async throws {
        try await withServer { h in
            let signIn = try await h.signIn()
            #expect(signIn.response.status == .seeOther)
            let replay = try await h.callback(signIn.fields, binding: signIn.started.binding)
            #expect(replay.status == .badRequest)
            #expect(replay.errorTitle == Fixtures.Heading.expired)
            #expect(replay.setCookie("siwa_session") == nil)
            #expect(try h.database.count("sessions") == 1)
        }
    }

    @Test("the same answer posted twice at once signs in once: the state is consumed atomically")
    func concurrentReplay() async throws {
        try await withServer { h in
            let started = try await h.start()
            let fields = try await h.authorize(started.authorizeURL)
            async let first = h.callback(fields, binding: started.binding)
            async let second = h.callback(fields, binding: started.binding)
            let statuses = [try await first.status, try await second.status]
            #expect(statuses.filter { $0 == .seeOther }.count == 1)
            #expect(statuses.filter { $0 == .badRequest }.count == 1)
            #expect(try h.database.count("sessions") == 1)
            #expect(try await h.emulatorCounters()["codesExchanged"] == 1)
        }
    }

    @Test("an unknown state shows the expired page and Apple is never asked")
    func unknownState() async throws {
        try await withServer { h in
            let started = try await h.start()
            var fields = try await h.authorize(started.authorizeURL)
            fields["state"] = RandomToken.generate()
            let response = try await h.callback(fields, binding: started.binding)
            #expect(response.status == .badRequest)
            #expect(response.errorTitle == Fixtures.Heading.expired)
            try Self.expectNothingStored(h, response)
            #expect(try await h.emulatorCounters()["codesExchanged"] == 0)
            // The real pending sign-in is untouched.
            #expect(try h.database.count("pending_authorizations") == 1)
        }
    }

    @Test("a sign-in started more than 10 minutes ago shows the expired page")
    func expiredPending() async throws {
        try await withServer { h in
            let flow = try await h.flow()
            let started = try await flow.start(returnTo: "/session", now: Date().addingTimeInterval(-601))
            let fields = try await h.authorize(started.authorizeURL.absoluteString)
            let response = try await h.callback(fields, binding: started.bindingToken)
            #expect(response.status == .badRequest)
            #expect(response.errorTitle == Fixtures.Heading.expired)
            try Self.expectNothingStored(h, response)
            #expect(try h.database.count("pending_authorizations") == 0, "an expired sign-in is removed when presented")
            #expect(try await h.emulatorCounters()["codesExchanged"] == 0)
        }
    }

    @Test("SignInFlow.complete refuses a pending sign-in past its 10 minutes")
    func expiredByClock() async throws {
        try await withServer { h in
            let flow = try await h.flow()
            let started = try await flow.start(returnTo: "/session")
            let fields = try await h.authorize(started.authorizeURL.absoluteString)
            let payload = CallbackPayload(code: fields["code"], idToken: fields["id_token"], state: fields["state"])
            await #expect(throws: SignInFailure.expired) {
                try await flow.complete(payload, bindingToken: started.bindingToken, logger: h.logs.logger, now: Date().addingTimeInterval(SignInFlow.pendingLifetime + 1))
            }
            #expect(try h.database.count("sessions") == 0)
        }
    }

    @Test("no binding cookie: the expired page, nothing stored, the code not exchanged")
    func missingBinding() async throws {
        try await withServer { h in
            let started = try await h.start()
            let fields = try await h.authorize(started.authorizeURL)
            let response = try await h.callback(fields, binding: nil)
            #expect(response.status == .badRequest)
            #expect(response.errorTitle == Fixtures.Heading.expired)
            try Self.expectNothingStored(h, response)
            #expect(try await h.emulatorCounters()["codesExchanged"] == 0)
        }
    }

    @Test("a binding cookie that is not the one that started this sign-in: the expired page, nothing stored")
    func wrongBinding() async throws {
        try await withServer { h in
            let victim = try await h.start()
            let attacker = try await h.start()
            let fields = try await h.authorize(victim.authorizeURL)
            for binding in [attacker.binding, RandomToken.generate(), ""] {
                let response = try await h.callback(fields, binding: binding)
                #expect(response.status == .badRequest)
                #expect(response.errorTitle == Fixtures.Heading.expired)
                try Self.expectNothingStored(h, response)
            }
            #expect(try await h.emulatorCounters()["codesExchanged"] == 0)
            // The refused posts did not use up the victim's sign-in: their own browser still completes it.
            let own = try await h.callback(fields, binding: victim.binding)
            #expect(own.status == .seeOther)
            #expect(own.setCookie(h.sessionCookie) != nil)
        }
    }

    @Test(
        "a malformed answer shows the malformed page, 400",
        arguments: [
            "state=a&state=b&code=c",
            "state=%ZZ&code=c",
            "state=abc&code=%E0%A4%A",
            "state=abc&code=%FF%FE",
            "state=abc&code=c&user=%7Bnot%20json",
            "state=abc&code=c&id_token=" + String(repeating: "x", count: 17 * 1024),
        ]
    )
    func malformed(body: String) async throws {
        try await withServer { h in
            let started = try await h.start()
            let response = try await h.post("/auth/apple/callback", form: body, cookies: [h.bindingCookie: started.binding])
            #expect(response.status == .badRequest)
            #expect(response.errorTitle == Fixtures.Heading.malformed)
            try Self.expectNothingStored(h, response)
        }
    }

    @Test(
        "missing fields show the malformed page, 400",
        arguments: ["", "code=abc", "state=STATE", "state=&code=abc", "state=STATE&code=", "id_token=abc&user=%7B%7D", "state=STATE&code=abc"]
    )
    func missingFields(body: String) async throws {
        try await withServer { h in
            let started = try await h.start()
            let response = try await h.post(
                "/auth/apple/callback", form: body.replacingOccurrences(of: "STATE", with: started.state), cookies: [h.bindingCookie: started.binding]
            )
            #expect(response.status == .badRequest)
            #expect(response.errorTitle == Fixtures.Heading.malformed)
            try Self.expectNothingStored(h, response)
        }
    }

    @Test("a malformed query (GET callback) shows the malformed page")
    func malformedQuery() async throws {
        try await withServer { h in
            let response = try await h.get("/auth/apple/callback?state=%ZZ&code=1")
            #expect(response.status == .badRequest)
            #expect(response.errorTitle == Fixtures.Heading.malformed)
        }
    }

    @Test("a callback body over 64 KiB shows the too-large page, 413")
    func oversized() async throws {
        try await withServer { h in
            let started = try await h.start()
            let body = "state=\(started.state)&code=abc&padding=" + String(repeating: "a", count: 70 * 1024)
            let response = try await h.post("/auth/apple/callback", form: body, cookies: [h.bindingCookie: started.binding])
            #expect(response.status == .contentTooLarge)
            #expect(response.errorTitle == Fixtures.Heading.tooLarge)
            try Self.expectNothingStored(h, response)
        }
    }

    @Test("a code already used at Apple (invalid_grant) shows the expired page")
    func codeAlreadyUsed() async throws {
        try await withServer { h in
            let started = try await h.start()
            let fields = try await h.authorize(started.authorizeURL)
            // Someone else (an attacker who saw the code) redeems it first.
            let apple = h.settings.apple
            let client = AppleIDClient(configuration: apple, httpClient: .shared, secrets: ClientSecretSigner(configuration: apple))
            _ = try await client.exchange(code: try #require(fields["code"]), redirectURI: h.settings.returnURL)
            let response = try await h.callback(fields, binding: started.binding)
            #expect(response.status == .badRequest)
            #expect(response.errorTitle == Fixtures.Heading.expired)
            try Self.expectNothingStored(h, response)
        }
    }
}
