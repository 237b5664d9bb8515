import AppleIDEmulator
import AppleSignIn
import Foundation
import NIOCore
import Testing

/// Faults injected through `PUT /emulator/admin/faults/{endpoint}` as AppleSignIn's clients see them.
@Suite("Fault injection")
struct FaultInjectionTests {
    static let redirectURL = URL(string: Fixtures.redirectURI)!

    /// Exchanges a fresh code and returns the error, if any.
    /// The default deadline is far beyond any stall of a loaded machine, so that the fault, not the deadline, decides
    /// the outcome (a drop that reached the client after a 10 s deadline was reported, rightly, as a timeout: the
    /// full suite on 2 cores delays the emulator's handler that much). Only the latency test passes a short one.
    static func exchangeError(_ emulator: EmulatorHarness, code: String? = nil, timeout: TimeAmount = .seconds(120)) async throws -> AppleIDClientError? {
        var code = code
        if code == nil { code = try await emulator.authorize()["code"] }
        let client = try emulator.appleClient(timeout: timeout)
        return await appleIDClientError { _ = try await client.exchange(code: code!, redirectURI: redirectURL) }
    }

    @Test("token status 503 is a retryable serverError", arguments: [500, 503])
    func serverError(status: Int) async throws {
        try await withEmulator { emulator async throws in
            try await emulator.fault("token", #"{"status": \#(status)}"#)
            let error = try await Self.exchangeError(emulator)
            #expect(error?.kind == .serverError)
            #expect(error?.isRetryable == true)
        }
    }

    @Test("token latency above the client's timeout is a timeout")
    func latency() async throws {
        try await withEmulator { emulator async throws in
            // The answer would come after 12 s; the call must end before it, cut by its 500 ms timeout (no tighter
            // bound holds on a loaded two-core CI run, where stalls of this kind ended as late as 6.6 s).
            try await emulator.fault("token", #"{"latency_ms": 12000}"#)
            let started = ContinuousClock.now
            let error = try await Self.exchangeError(emulator, timeout: .milliseconds(500))
            #expect(error?.kind == .timeout)
            #expect(ContinuousClock.now - started < .seconds(12))
        }
    }

    @Test("token latency below the client's timeout only delays the answer")
    func latencyWithinTimeout() async throws {
        try await withEmulator { emulator async throws in
            try await emulator.fault("token", #"{"latency_ms": 300}"#)
            let started = ContinuousClock.now
            let error = try await Self.exchangeError(emulator, timeout: .seconds(120))
            #expect(error == nil)
            #expect(ContinuousClock.now - started >= .milliseconds(300))
        }
    }

    @Test("a dropped token connection is connectionFailed")
    func drop() async throws {
        try await withEmulator { emulator async throws in
            try await emulator.fault("token", #"{"drop": true}"#)
            let error = try await Self.exchangeError(emulator)
            #expect(error?.kind == .connectionFailed)
        }
    }

    @Test("a malformed token answer is malformedResponse")
    func malformed() async throws {
        try await withEmulator { emulator async throws in
            try await emulator.fault("token", #"{"malformed": true}"#)
            let error = try await Self.exchangeError(emulator)
            #expect(error?.kind == .malformedResponse)
        }
    }

    @Test("a fault with remaining 1 hits one call, then the endpoint works again")
    func remaining() async throws {
        try await withEmulator { emulator async throws in
            try await emulator.fault("token", #"{"status": 503, "remaining": 1}"#)
            let code = try await emulator.authorize()["code"]!
            #expect(try await Self.exchangeError(emulator, code: code)?.kind == .serverError)
            // The failed call did not consume the code.
            #expect(try await Self.exchangeError(emulator, code: code) == nil)
        }
    }

    @Test("DELETE /emulator/admin/faults clears every fault")
    func clear() async throws {
        try await withEmulator { emulator async throws in
            try await emulator.fault("token", #"{"status": 503}"#)
            try await emulator.fault("keys", #"{"status": 503}"#)
            #expect(try await Self.exchangeError(emulator)?.kind == .serverError)
            #expect(try await Self.exchangeError(emulator)?.kind == .serverError, "a fault without remaining stays")
            let cleared = try await emulator.admin(.DELETE, "faults")
            #expect(cleared.status == 204)
            #expect(try await Self.exchangeError(emulator) == nil)
            #expect(try await emulator.get("/auth/keys").status == 200)
        }
    }

    @Test("a key set fault leaves AppleKeySet with nothing to verify with", arguments: [
        #"{"status": 503}"#, #"{"malformed": true}"#, #"{"drop": true}"#,
    ])
    func keySetUnavailable(fault: String) async throws {
        try await withEmulator { emulator async throws in
            let token = try await emulator.authorize(nonce: "n")["id_token"]!
            try await emulator.fault("keys", fault)
            let keySet = emulator.keySet()
            let error = await identityTokenError { _ = try await emulator.identityVerifier(keySet: keySet).verify(token, nonce: "n") }
            #expect(error?.check == .keySetUnavailable)
            #expect(!keySet.isLoaded)
        }
    }

    @Test("a revoke fault reaches the caller as serverError")
    func revokeFault() async throws {
        try await withEmulator { emulator async throws in
            try await emulator.fault("revoke", #"{"status": 503}"#)
            let error = await appleIDClientError { try await emulator.appleClient().revoke(token: "anything") }
            #expect(error?.kind == .serverError)
        }
    }

    @Test("an authorize fault answers the browser with the injected status")
    func authorizeFault() async throws {
        try await withEmulator { emulator async throws in
            try await emulator.fault("authorize", #"{"status": 503, "remaining": 1}"#)
            let query = EmulatorHarness.authorizeQuery()
            #expect(try await emulator.get("/auth/authorize?" + query).status == 503)
            #expect(try await emulator.get("/auth/authorize?" + query).status == 200)
        }
    }

    @Test("faults on an unknown endpoint are refused with 404")
    func unknownEndpoint() async throws {
        try await withEmulator { emulator async throws in
            let answer = try await emulator.admin(.PUT, "faults/userinfo", json: #"{"status": 503}"#)
            #expect(answer.status == 404)
        }
    }
}
