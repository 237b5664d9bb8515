import AppleIDEmulator
import Foundation
import Testing
import TestSupport

/// `siwa verify-notification`, run as a user runs it: a notification Apple signed is verified like an
/// identity token, `exp` included, and a refusal names the check that failed.
@Suite("siwa verify-notification")
struct VerifyNotificationCommandTests {
    @Test("a notification is accepted while fresh; past its exp the command names the exp check and exits non-zero")
    func expiry() async throws {
        let emulator = try AppleIDEmulator()
        let signedAt = Date()
        let notification = try await emulator.signNotification(type: "consent-revoked", subject: "000123.a1b2c3d4e5f60718293a4b5c6d7e8f90.1234", clientID: EmulatorConfiguration.testServicesID, now: signedAt)
        let jwks = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-jwks-\(UUID().uuidString).json")
        try await emulator.publishedKeySetJSON().write(to: jwks)
        defer { try? FileManager.default.removeItem(at: jwks) }

        func verify(at time: Date) async throws -> ChildProcess.Outcome {
            try await ChildProcess.run(ChildProcess.siwaExecutable, arguments: [
                "verify-notification", notification.jws, "--audience", EmulatorConfiguration.testServicesID,
                "--jwks", jwks.path, "--at", String(Int(time.timeIntervalSince1970)),
            ], environment: [:])
        }
        let fresh = try await verify(at: signedAt.addingTimeInterval(3_600))
        #expect(fresh.status == 0, "\(fresh.stderr)")
        #expect(fresh.stdout.contains("consent-revoked"))

        let stale = try await verify(at: signedAt.addingTimeInterval(86_400 + 120))
        #expect(stale.status != 0)
        #expect(stale.stderr.contains("exp check failed"), "stderr: \(stale.stderr)")
        #expect(stale.stdout.isEmpty)
    }
}
