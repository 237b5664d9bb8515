import Foundation
import Logging
@testable import SignInServer
import Testing

/// The first signing key, made at the moment it is first needed, signs at that moment (found by docs/apis.md's run:
/// a device grant's first id_token on a site started without clients was "no key can sign the id_token now").
@Suite("The first signing key signs at once")
struct FirstKeyTests {
    @Test("40 first keys, each made for an assertion at a time of its own: every one signs at that time (a date read back from the store can be a hair later than written, so a key active from exactly then would not)")
    func firstKeySignsAtOnce() async throws {
        var unsigned = 0
        for index in 0..<40 {
            try await StoreFixture.with(.sqlite) { fixture in
                let now = Date(timeIntervalSinceReferenceDate: 786_000_000 + Double(index) * 7.000_123_457)
                let assertions = IdentityAssertions(store: fixture.store, issuer: "https://auth.example.com", logger: Logger(label: "test.first-key"))
                let user = UserRecord(subject: Records.subject(), email: nil, isPrivateEmail: false, firstName: nil, lastName: nil, createdAt: now, lastSignInAt: now)
                if await assertions.assertion(for: Admission.Person(user: user, groups: [], client: nil), audience: "https://app.example.com", now: now) == nil { unsigned += 1 }
            }
        }
        #expect(unsigned == 0, "\(unsigned) of 40 first keys could not sign at the moment they were made for")
    }
}
