import Foundation
import SignInServer
import Testing

/// siwa's own signing keys in both stores: kept sealed, listed in order, retired by rotation.
@Suite("Signing key store")
struct SigningKeyStoreTests {
    @Test("keys round-trip, their private halves sealed at rest, and rotation retires the active ones but not the new", arguments: StoreKind.allCases)
    func keys(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Date(timeIntervalSince1970: 1_800_000_000)
            let first = IdentityAssertions.newKey(now: now, activatesAt: now)
            try await store.addSigningKey(first)
            let next = IdentityAssertions.newKey(now: now.addingTimeInterval(10), activatesAt: now.addingTimeInterval(610))
            try await store.addSigningKey(next)
            try await store.retireSigningKeys(activeAt: next.activatesAt, retiresAt: next.activatesAt.addingTimeInterval(3600), except: next.kid)
            let keys = try await store.signingKeys()
            #expect(keys.map(\.kid) == [first.kid, next.kid])
            #expect(keys[0].privateKeyPEM == first.privateKeyPEM)
            #expect(keys[0].retiresAt == next.activatesAt.addingTimeInterval(3600))
            #expect(keys[1].retiresAt == nil)
            let stored = try await fixture.sql.texts("SELECT private_key FROM signing_keys")
            #expect(stored.count == 2)
            #expect(stored.allSatisfy { !($0 ?? "").contains("PRIVATE KEY") })
        }
    }
}
