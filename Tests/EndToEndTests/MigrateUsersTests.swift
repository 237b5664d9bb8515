import AppleIDEmulator
import Foundation
@testable import SignInServer
@testable import siwa
import Testing

/// `siwa migrate-users`, run as the CLI runs it, against the site's database and the emulator's
/// `/auth/usermigrationinfo`.
@Suite("siwa migrate-users")
struct MigrateUsersTests {
    @Test("records a transfer_sub for every stored user, and a second run has nothing left to do")
    func recordsTransferSubjects() async throws {
        try await LocalSite.run { site in
            // Two of the emulator's users, stored as a sign-in stores them.
            let plan = try ServePlan(values: await LayeredValues(cli: ["db": site.databasePath], configFile: nil, environment: [:]))
            let store = try SQLiteStore(path: site.databasePath, cipher: TokenCipher(base64Keys: plan.settings.dataKeys))
            let subjects = site.users.prefix(2).map(\.sub)
            let now = Date()
            for subject in subjects {
                _ = try await store.completeSignIn(CompletedSignIn(
                    subject: subject, email: nil, isPrivateEmail: false, firstName: nil, lastName: nil, refreshToken: nil,
                    clientID: EmulatorConfiguration.testServicesID, transferSubject: nil,
                    session: SessionRecord(idHash: SignInFlow.hash(UUID().uuidString), subject: subject, csrfToken: "csrf", createdAt: now, expiresAt: now.addingTimeInterval(600)),
                    at: now
                ))
            }
            #expect(Set(try await store.subjectsWithoutTransferSubject(limit: 10)) == Set(subjects))

            let arguments = ["--target-team", "NEWTEAM001", "--db", site.databasePath, "--emulator-port", String(site.emulatorPort)]
            try await MigrateUsersCommand.parse(arguments).run()
            #expect(try await store.subjectsWithoutTransferSubject(limit: 10).isEmpty)
            // Nothing left: the second run asks Apple about no one and succeeds.
            try await MigrateUsersCommand.parse(arguments).run()
        }
    }
}
