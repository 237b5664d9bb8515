import AppleIDEmulator
import Foundation
import Testing
import TestSupport

/// Two Sign in with Apple clients that are not ours, of different families, complete a sign-in against
/// `siwa emulator` (the built binary, as a user runs it) with only Apple's URLs changed: Authlib's OAuth client
/// with Apple's endpoints and issuer as constants, and requests-oauthlib with PyJWT, which reads the discovery
/// document, hard-codes Apple's issuer and keeps verifying across a key rotation with a cached key set.
@Suite("Third-party clients against siwa emulator")
struct ThirdPartyClientTests {
    static let scripts = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("ThirdParty")

    /// The interpreter with the clients installed (scripts/test makes it), or a recorded failure saying how to get one.
    static func python() -> String? {
        guard let python = ProcessInfo.processInfo.environment["SIWA_TEST_PYTHON"], !python.isEmpty else {
            Issue.record("SIWA_TEST_PYTHON is not set: run ./scripts/test, which creates a Python venv with authlib, requests-oauthlib and pyjwt and exports SIWA_TEST_PYTHON")
            return nil
        }
        return python
    }

    /// What every client is configured with: the emulator's built-in web client (its key is public on purpose).
    static let client: [String: String] = [
        "CLIENT_ID": EmulatorConfiguration.testServicesID,
        "TEAM_ID": EmulatorConfiguration.testTeamID,
        "KEY_ID": EmulatorConfiguration.testKeyID,
        "PRIVATE_KEY_PEM": EmulatorConfiguration.testPrivateKeyPEM,
        "REDIRECT_URI": "http://127.0.0.1:8080/auth/apple/callback",
    ]

    static func lastJSONLine(_ output: String) -> [String: Any] {
        let line = output.split(separator: "\n").last.map(String.init) ?? ""
        return (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] ?? [:]
    }

    @Test("Authlib, with Apple's URLs pointed at siwa emulator and Apple's issuer kept, signs in and verifies both id_tokens")
    func authlib() async throws {
        guard let python = Self.python() else { return }
        try await ChildProcess.withSiwaEmulator { base in
            let run = try await ChildProcess.run(URL(fileURLWithPath: python), arguments: [Self.scripts.appendingPathComponent("authlib_apple.py").path], environment: Self.client.merging([
                "APPLE_BASE_URL": base,
                "USER_SUB": "000789.9a8b7c6d5e4f30211203f4e5d6c7b8a9.9012",
            ]) { $1 })
            #expect(run.status == 0, "the Authlib client failed:\n\(run.stderr)\n\(run.stdout)")
            let result = Self.lastJSONLine(run.stdout)
            #expect(result["sub"] as? String == "000789.9a8b7c6d5e4f30211203f4e5d6c7b8a9.9012", "output: \(run.stdout)\n\(run.stderr)")
            #expect(result["email"] as? String == "grace@example.org")
            #expect(result["email_verified"] as? Bool == true)
            #expect(result["first_name"] as? String == "Grace", "the first-time user JSON came back")
            #expect(result["token_type"] as? String == "Bearer")
        }
    }

    @Test("requests-oauthlib with PyJWT reads the discovery document, hard-codes Apple's issuer, and verifies across a key rotation")
    func discoveryClientAcrossRotation() async throws {
        guard let python = Self.python() else { return }
        try await ChildProcess.withSiwaEmulator { base in
            let run = try await ChildProcess.run(URL(fileURLWithPath: python), arguments: [Self.scripts.appendingPathComponent("discovery_pyjwt.py").path], environment: Self.client.merging([
                "APPLE_DISCOVERY_URL": base + "/.well-known/openid-configuration",
                "ROTATE_VIA": base + "/emulator/admin",
                // The client caches the key set for two seconds, so the rotation's lead time is short.
                "JWKS_LIFESPAN": "2",
                // oauthlib refuses plain http unless told this is a local test.
                "OAUTHLIB_INSECURE_TRANSPORT": "1",
                "USER_SUB": "000123.a1b2c3d4e5f60718293a4b5c6d7e8f90.1234",
            ]) { $1 })
            #expect(run.status == 0, "the requests-oauthlib/PyJWT client failed:\n\(run.stderr)\n\(run.stdout)")
            let result = Self.lastJSONLine(run.stdout)
            #expect(result["sub"] as? String == "000123.a1b2c3d4e5f60718293a4b5c6d7e8f90.1234", "output: \(run.stdout)\n\(run.stderr)")
            #expect(result["is_private_email"] as? Bool == true)
            #expect((result["email"] as? String)?.hasSuffix("@privaterelay.appleid.com") == true)
            let kids = result["kids"] as? [String] ?? []
            #expect(kids.count == 3 && kids[0] == kids[1] && kids[1] != kids[2], "signed by the old key until the new one was due: \(kids)")
        }
    }
}
