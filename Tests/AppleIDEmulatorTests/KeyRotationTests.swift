import AppleIDEmulator
import AppleSignIn
import Foundation
import JOSE
import Testing

/// `GET /auth/keys` and key rotation through the admin API.
@Suite("Keys and rotation")
struct KeyRotationTests {
    static func kids(_ emulator: EmulatorHarness) async throws -> [String] {
        let keys = try await emulator.get("/auth/keys").json["keys"] as? [[String: Any]] ?? []
        return keys.compactMap { $0["kid"] as? String }
    }

    @Test("/auth/keys publishes several RSA signing keys as Apple does")
    func keySet() async throws {
        try await withEmulator(initialKeys: 2) { emulator async throws in
            let answer = try await emulator.get("/auth/keys")
            #expect(answer.status == 200)
            #expect(answer.headers["content-type"]?.hasPrefix("application/json") == true)
            // Cacheable for the configured time, as Apple's is; not also marked no-store.
            #expect(answer.headers["cache-control"] == "max-age=\(emulator.emulator.configuration.keySetMaxAge)")
            let keys = try #require(answer.json["keys"] as? [[String: Any]])
            #expect(keys.count >= 2)
            for key in keys {
                #expect(key["kty"] as? String == "RSA")
                #expect(key["alg"] as? String == "RS256")
                #expect(key["use"] as? String == "sig")
                #expect((key["kid"] as? String)?.isEmpty == false)
                #expect(key["e"] as? String == "AQAB")
                let modulus = try #require((key["n"] as? String).flatMap(Base64URL.decode))
                #expect(modulus.count == 256, "2048-bit modulus")
            }
            #expect(Set(keys.compactMap { $0["kid"] as? String }).count == keys.count, "kids are distinct")
        }
    }

    @Test("a new key is published before it signs; once activated it signs, AppleKeySet finds it, and the old key stays published")
    func rotation() async throws {
        try await withEmulator { emulator async throws in
            let keySet = emulator.keySet(refetchAtOnce: true)
            let verifier = try emulator.identityVerifier(keySet: keySet)
            let before = try await emulator.authorize(nonce: "n1")["id_token"]!
            _ = try await verifier.verify(before, nonce: "n1")
            #expect(keySet.fetches == 1)
            let oldKid = try #require(Decode.jwtHeader(before)["kid"] as? String)

            let published = try await emulator.admin(.POST, "keys")
            #expect(published.status == 200)
            let newKid = try #require(published.json["kid"] as? String)
            #expect(newKid != oldKid)
            #expect(try await Self.kids(emulator).contains(newKid), "published at once")
            let meanwhile = try await emulator.authorize(nonce: "n0")["id_token"]!
            #expect(Decode.jwtHeader(meanwhile)["kid"] as? String == oldKid, "a published key does not sign before it is activated")

            #expect(try await emulator.admin(.POST, "keys/\(newKid)/activate").status == 200)
            let kids = try await Self.kids(emulator)
            #expect(kids.contains(newKid))
            #expect(kids.contains(oldKid), "the replaced key stays published for its grace period")
            #expect(try await emulator.admin(.GET, "keys").json["active"] as? String == newKid)

            let after = try await emulator.authorize(nonce: "n2")["id_token"]!
            #expect(Decode.jwtHeader(after)["kid"] as? String == newKid)
            let identity = try await verifier.verify(after, nonce: "n2")
            #expect(identity.subject == Fixtures.ada)
            #expect(keySet.fetches == 2, "one refetch for the new kid")
            // Tokens signed before the rotation still verify.
            _ = try await verifier.verify(before, nonce: "n1")

            // Tokens from the token endpoint and notifications use the new key too.
            let tokens = try await emulator.appleClient().exchange(code: try await emulator.authorize()["code"]!, redirectURI: URL(string: Fixtures.redirectURI))
            #expect(Decode.jwtHeader(tokens.idToken!)["kid"] as? String == newKid)
        }
    }

    @Test("keys/rotate publishes a key that starts signing only after the lead time")
    func rotateWithLead() async throws {
        try await withEmulator { emulator async throws in
            let oldKid = try #require(Decode.jwtHeader(try await emulator.authorize()["id_token"]!)["kid"] as? String)
            let rotated = try await emulator.admin(.POST, "keys/rotate", json: #"{"activate_after_seconds":4}"#)
            #expect(rotated.status == 200)
            let newKid = try #require(rotated.json["kid"] as? String)
            let activatesAt = Date(timeIntervalSince1970: try #require(rotated.json["activates_at"] as? Double))
            #expect(try await Self.kids(emulator).contains(newKid), "published at once")
            // Until the lead time is over the old key signs; then the new one, the old staying published.
            // Each answer was signed at some moment between asking and answering.
            var switched = false
            while !switched, Date() < activatesAt.addingTimeInterval(30) {
                let asked = Date()
                let signer = try #require(Decode.jwtHeader(try await emulator.authorize()["id_token"]!)["kid"] as? String)
                let answered = Date()
                if signer == newKid {
                    switched = true
                    #expect(answered >= activatesAt, "the new key signed before its lead time was over")
                } else {
                    #expect(signer == oldKid)
                    #expect(asked < activatesAt, "the old key still signed after the lead time")
                    try await Task.sleep(for: .milliseconds(250))
                }
            }
            #expect(switched, "the new key never started signing")
            #expect(try await Self.kids(emulator).contains(oldKid))
        }
    }

    @Test("a replaced key leaves the published set once its grace period is over")
    func graceEnds() async throws {
        let grace: TimeInterval = 4
        try await withEmulator(Fixtures.configuration { $0.retiredKeyGrace = Int(grace) }, initialKeys: 1) { emulator async throws in
            let oldKid = try #require(try await Self.kids(emulator).first)
            let newKid = try #require(try await emulator.admin(.POST, "keys").json["kid"] as? String)
            // The grace starts when the emulator activates the key, which is after this moment.
            let beforeActivation = Date()
            #expect(try await emulator.admin(.POST, "keys/\(newKid)/activate").status == 200)
            var unpublished = false
            while !unpublished, Date() < beforeActivation.addingTimeInterval(grace + 20) {
                let kids = try await Self.kids(emulator)
                #expect(kids.last == newKid)
                if kids.contains(oldKid) {
                    try await Task.sleep(for: .milliseconds(250))
                } else {
                    unpublished = true
                    #expect(kids == [newKid])
                    #expect(Date() >= beforeActivation.addingTimeInterval(grace), "the old key left before its grace was over")
                }
            }
            #expect(unpublished, "the old key stayed published after its grace")
        }
    }

    @Test("a retired key leaves the key set and tokens it signed no longer verify")
    func retire() async throws {
        try await withEmulator { emulator async throws in
            let old = try await emulator.authorize(nonce: "n")["id_token"]!
            let oldKid = try #require(Decode.jwtHeader(old)["kid"] as? String)
            _ = try await emulator.identityVerifier().verify(old, nonce: "n")

            let newKid = try #require(try await emulator.admin(.POST, "keys/rotate").json["kid"] as? String)
            let retired = try await emulator.admin(.POST, "keys/\(oldKid)/retire")
            #expect(retired.status == 200)
            let published = try await Self.kids(emulator)
            #expect(!published.contains(oldKid))
            #expect(published.contains(newKid))

            let error = await identityTokenError { _ = try await emulator.identityVerifier().verify(old, nonce: "n") }
            #expect(error?.check == .unknownKey)
            // New tokens still verify.
            let fresh = try await emulator.authorize(nonce: "m")["id_token"]!
            _ = try await emulator.identityVerifier().verify(fresh, nonce: "m")
        }
    }

    @Test("retiring the active key makes the newest remaining key sign")
    func retireActiveKey() async throws {
        try await withEmulator(initialKeys: 2) { emulator async throws in
            let active = Decode.jwtHeader(try await emulator.authorize()["id_token"]!)["kid"] as! String
            #expect(try await emulator.admin(.POST, "keys/\(active)/retire").status == 200)
            let remaining = try await Self.kids(emulator)
            #expect(remaining.count == 1)
            let token = try await emulator.authorize(nonce: "n")["id_token"]!
            #expect(Decode.jwtHeader(token)["kid"] as? String == remaining.first)
            _ = try await emulator.identityVerifier().verify(token, nonce: "n")
        }
    }

    @Test("retiring an unknown key or the last key is refused with 404")
    func retireRefused() async throws {
        try await withEmulator(initialKeys: 1) { emulator async throws in
            #expect(try await emulator.admin(.POST, "keys/no-such-kid/retire").status == 404)
            let only = try await Self.kids(emulator)
            #expect(only.count == 1)
            #expect(try await emulator.admin(.POST, "keys/\(only[0])/retire").status == 404)
            #expect(try await Self.kids(emulator) == only)
        }
    }

    @Test("the admin key list names the published keys")
    func adminKeyList() async throws {
        try await withEmulator { emulator async throws in
            let answer = try await emulator.admin(.GET, "keys")
            #expect(answer.status == 200)
            #expect(answer.json["kids"] as? [String] == (try await Self.kids(emulator)))
            #expect((answer.json["kids"] as? [String])?.last == answer.json["active"] as? String)
        }
    }
}
