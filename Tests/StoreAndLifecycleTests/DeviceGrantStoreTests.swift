import Foundation
@testable import SignInServer
import Testing

/// The device flow's grants and the clients' new fields (issue 35) in both stores: saved, decided, polled as RFC 8628
/// says, taken once across two instances, and ended with their session; services and a rotated secret kept.
@Suite("Device grants and services in both stores")
struct DeviceGrantStoreTests {
    static func grant(_ code: String, user: String, client: String = "cli", at now: Date, lifetime: TimeInterval = 600) -> DeviceGrantRecord {
        DeviceGrantRecord(
            deviceCodeHash: SignInFlow.hash(code), userCode: user, clientID: client, scope: "openid offline_access", createdAt: now,
            expiresAt: now.addingTimeInterval(lifetime), interval: 5
        )
    }

    @Test("a grant is pending, then slow_down when polled sooner than its interval (5 s more each time), then taken once after approval; another client's poll, a redeemed grant and an unknown code are unknown", arguments: StoreKind.allCases)
    func pollsAndApproval(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            let sub = Records.subject()
            let grant = Self.grant("device-1", user: "BCDFGHJK", at: now)
            #expect(try await store.saveDeviceGrant(grant, now: now))
            // The user code is held while the grant lives.
            #expect(try await store.saveDeviceGrant(Self.grant("device-2", user: "BCDFGHJK", at: now), now: now) == false)
            #expect(try await store.pendingDeviceGrant(userCode: "BCDFGHJK", now: now)?.clientID == "cli")

            #expect(try await store.pollDeviceGrant(hash: grant.deviceCodeHash, clientID: "cli", now: now) == .pending)
            #expect(try await store.pollDeviceGrant(hash: grant.deviceCodeHash, clientID: "cli", now: now.addingTimeInterval(1)) == .slowDown(interval: 10))
            #expect(try await store.pollDeviceGrant(hash: grant.deviceCodeHash, clientID: "cli", now: now.addingTimeInterval(2)) == .slowDown(interval: 15))
            #expect(try await store.pollDeviceGrant(hash: grant.deviceCodeHash, clientID: "cli", now: now.addingTimeInterval(20)) == .pending)
            #expect(try await store.pollDeviceGrant(hash: grant.deviceCodeHash, clientID: "other", now: now) == .unknown)

            #expect(try await store.decideDeviceGrant(userCode: "BCDFGHJK", approve: true, subject: sub, sessionID: "sid-1", authTime: now, now: now.addingTimeInterval(21)))
            #expect(try await store.decideDeviceGrant(userCode: "BCDFGHJK", approve: false, subject: sub, sessionID: "sid-1", authTime: now, now: now.addingTimeInterval(21)) == false)
            #expect(try await store.pendingDeviceGrant(userCode: "BCDFGHJK", now: now) == nil)
            guard case .approved(let taken) = try await store.pollDeviceGrant(hash: grant.deviceCodeHash, clientID: "cli", now: now.addingTimeInterval(22)) else {
                Issue.record("an approved grant is taken")
                return
            }
            #expect(taken.subject == sub && taken.sessionID == "sid-1" && taken.scope == "openid offline_access")
            #expect(try await store.pollDeviceGrant(hash: grant.deviceCodeHash, clientID: "cli", now: now.addingTimeInterval(23)) == .unknown)
            #expect(try await store.pollDeviceGrant(hash: SignInFlow.hash("never-issued"), clientID: "cli", now: now) == .unknown)

            // Refused, and expired.
            let refused = Self.grant("device-3", user: "CDFGHJKL", at: now)
            #expect(try await store.saveDeviceGrant(refused, now: now))
            #expect(try await store.decideDeviceGrant(userCode: "CDFGHJKL", approve: false, subject: sub, sessionID: "sid-1", authTime: now, now: now))
            #expect(try await store.pollDeviceGrant(hash: refused.deviceCodeHash, clientID: "cli", now: now) == .denied)
            let short = Self.grant("device-4", user: "DFGHJKLM", at: now, lifetime: 10)
            #expect(try await store.saveDeviceGrant(short, now: now))
            #expect(try await store.pollDeviceGrant(hash: short.deviceCodeHash, clientID: "cli", now: now.addingTimeInterval(11)) == .expired)
            // An expired grant gives its user code up.
            #expect(try await store.saveDeviceGrant(Self.grant("device-5", user: "DFGHJKLM", at: now.addingTimeInterval(11)), now: now.addingTimeInterval(11)))
        }
    }

    @Test("20 parallel polls of one approved grant on two store instances: exactly one gets it", arguments: StoreKind.allCases)
    func parallelPolls(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let stores = [fixture.store, try await fixture.open(keys: [fixture.key])]
            let now = Support.now()
            let grant = Self.grant("device-race", user: "FGHJKLMN", at: now)
            #expect(try await stores[0].saveDeviceGrant(grant, now: now))
            #expect(try await stores[1].decideDeviceGrant(userCode: "FGHJKLMN", approve: true, subject: Records.subject(), sessionID: "sid", authTime: now, now: now))
            let outcomes = try await withThrowingTaskGroup(of: DevicePoll.self) { group in
                for index in 0..<20 {
                    let store = stores[index % 2]
                    group.addTask { try await store.pollDeviceGrant(hash: grant.deviceCodeHash, clientID: "cli", now: now) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(outcomes.filter { if case .approved = $0 { true } else { false } }.count == 1)
            #expect(outcomes.filter { $0 == .unknown }.count == 19)
        }
    }

    @Test("an approved grant not yet taken ends with its session, and with the person's account", arguments: StoreKind.allCases)
    func endsWithItsSession(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            let sub = Records.subject()
            let sessionID = "benchsession-device-" + UUID().uuidString
            _ = try await store.completeSignIn(Records.signIn(sub, at: now, sessionID: sessionID))
            let sid = SessionRecord.publicID(idHash: SignInFlow.hash(sessionID))
            let grant = Self.grant("device-end", user: "GHJKLMNP", at: now)
            #expect(try await store.saveDeviceGrant(grant, now: now))
            #expect(try await store.decideDeviceGrant(userCode: "GHJKLMNP", approve: true, subject: sub, sessionID: sid, authTime: now, now: now))
            #expect(try await store.deleteSession(idHash: SignInFlow.hash(sessionID)))
            #expect(try await store.pollDeviceGrant(hash: grant.deviceCodeHash, clientID: "cli", now: now) == .unknown)
        }
    }

    @Test("a service and a device client keep their fields; a rotated secret keeps the replaced one with its end", arguments: StoreKind.allCases)
    func clientFields(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            var service = ProviderClientRecord(clientID: "billing", secretHash: SignInFlow.hash("one"), redirectURIs: [], createdAt: now)
            service.isService = true
            var device = ProviderClientRecord(clientID: "cli", redirectURIs: [], isPublic: true, createdAt: now)
            device.deviceFlow = true
            device.issInErrors = false
            #expect(try await store.addProviderClient(service))
            #expect(try await store.addProviderClient(device))
            let until = now.addingTimeInterval(3600)
            #expect(try await store.rotateProviderSecret(clientID: "billing", secretHash: SignInFlow.hash("two"), until: until))
            #expect(try await store.rotateProviderSecret(clientID: "cli", secretHash: SignInFlow.hash("x"), until: until) == false, "a public client has no secret")
            let stored = try await store.providerClients()
            let billing = try #require(stored.first { $0.clientID == "billing" })
            #expect(billing.isService && billing.secretHash == SignInFlow.hash("two") && billing.previousSecretHash == SignInFlow.hash("one"))
            #expect(billing.previousSecretUntil.map { abs($0.timeIntervalSince(until)) < 0.01 } == true)
            #expect(stored.first { $0.clientID == "cli" }.map { $0.deviceFlow && !$0.issInErrors && !$0.isService } == true)
        }
    }
}
