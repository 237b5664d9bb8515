import Foundation
import Logging
@testable import SignInServer
import TestSupport
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

/// The assertions handed out again (`IdentityAssertions.recentAssertion`, remembered by person, audience and client,
/// the last one found without hashing).
@Suite("Assertions handed out again")
struct RecentAssertionTests {
    @Test("generated asks for 3 people in changing groups and with a changing record (email hidden or shown, a name given), 2 audiences and 2 clients, interleaved: each assertion handed out again is the one signed for that person as they are now, audience, client and groups (its claims say so), never the last one asked for another or for the person as they were")
    func handedOutAgainForItsOwn() async throws {
        try await StoreFixture.with(.sqlite) { fixture in
            let now = Date()
            let assertions = IdentityAssertions(store: fixture.store, issuer: "https://auth.example.com", logger: Logger(label: "test.recent"))
            try await assertions.prepare(now: now)
            // Each person as their record reads before and after a change: Apple's account events hide or show the
            // email, a first sign-in gives the name; the assertion must say what the identity fields beside it say.
            let versions = (0..<3).map { _ in
                let subject = Records.subject()
                return [
                    UserRecord(subject: subject, email: nil, isPrivateEmail: false, firstName: nil, lastName: nil, createdAt: now, lastSignInAt: now),
                    UserRecord(subject: subject, email: "\(subject.prefix(6))@privaterelay.appleid.com", isPrivateEmail: true, firstName: "Ada", lastName: nil, createdAt: now, lastSignInAt: now),
                    UserRecord(subject: subject, email: "ada@example.com", isPrivateEmail: false, firstName: "Ada", lastName: "Lovelace", createdAt: now, lastSignInAt: now),
                ]
            }
            let audiences = ["https://app.example.com", "https://wiki.example.com"]
            let clients: [String?] = [nil, "ios-app"]
            let groupings: [[String]] = [[], ["admins"]]
            var random = SplitMix64(seed: 0x7265_6365_6e74)
            var signed: [String: (token: String, groups: [String], version: Int)] = [:]
            var reused = 0
            for step in 0..<3_000 {
                let person = versions[random.below(versions.count)], version = random.below(6) == 0 ? random.below(3) : 0
                let user = person[version], audience = audiences[random.below(audiences.count)]
                let client = clients[random.below(clients.count)], groups = groupings[random.below(groupings.count)]
                let asking = Admission.Person(user: user, groups: groups, client: client)
                let key = "\(user.subject) \(audience) \(client ?? "-")"
                if random.below(3) == 0 {
                    let token = try #require(await assertions.assertion(for: asking, audience: audience, now: now))
                    if let known = signed[key], known.groups == groups, known.version == version {
                        #expect(token == known.token, "step \(step): signed again within the reuse time")
                    }
                    signed[key] = (token, groups, version)
                    continue
                }
                let again = assertions.recentAssertion(for: asking, audience: audience, now: now)
                guard let known = signed[key], known.groups == groups, known.version == version else {
                    #expect(again == nil, "step \(step): handed out for \(key) in \(groups), none signed for it")
                    continue
                }
                let token = try #require(again, "step \(step): \(key)")
                #expect(token == known.token, "step \(step): \(key)")
                let claims = try Self.claims(token)
                #expect(claims["sub"] as? String == user.subject && claims["aud"] as? String == audience, "step \(step)")
                #expect(claims["azp"] as? String == client && claims["groups"] as? [String] == groups, "step \(step)")
                #expect(claims["email"] as? String == user.email && claims["is_private_email"] as? Bool == user.isPrivateEmail, "step \(step)")
                #expect(claims["name"] as? String == user.displayName, "step \(step)")
                reused += 1
            }
            #expect(reused > 600, "the generator rarely asked again: \(reused)")
        }
    }

    static func claims(_ token: String) throws -> [String: Any] {
        var payload = String(token.split(separator: ".")[1]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while payload.count % 4 != 0 { payload += "=" }
        let data = try #require(Data(base64Encoded: payload))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }
}
