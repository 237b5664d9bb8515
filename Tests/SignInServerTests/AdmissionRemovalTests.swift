import Foundation
import HTTPTypes
@testable import SignInServer
import Testing
import TestSupport

/// What a door that cannot strip a client's fields itself (Envoy's `headers_to_remove`, `x-envoy-auth-headers-to-remove`)
/// is told to remove: generated over the whole family of identity names a client may forge, in any case and with `_`
/// for `-`, beside names that only look alike.
@Suite("The fields Envoy is told to remove, generated")
struct AdmissionRemovalTests {
    static let user = UserRecord(
        subject: "000123.abc", email: "ada@example.com", isPrivateEmail: false, firstName: "Ada", lastName: "L", createdAt: Date(), lastSignInAt: Date(),
        emailForwardingDisabled: false, linkRevokedAt: nil
    )

    /// `name` in a random case, with its dashes as underscores half the time.
    static func spelled(_ name: String, _ generator: inout some RandomNumberGenerator) -> String {
        let dashed = Bool.random(using: &generator) ? name : name.replacingOccurrences(of: "-", with: "_")
        return String(dashed.map { Bool.random(using: &generator) ? Character($0.uppercased()) : $0 })
    }

    @Test("every identity claim the client makes, and every identity name siwa owns but does not set, is named for removal (Authorization too when it does not go on); names that only look alike, and the fields siwa sets, are not; 500 generated requests, with a person and on a public rule")
    func generatedClaims() throws {
        var generator = SystemRandomNumberGenerator()
        let family = ["x-auth-request-user", "x-auth-request-groups", "x-auth-request-access-token", "x-auth-request-x", "x-siwa-assertion", "x-siwa-anything",
                      "remote-user", "remote-email", "remote-groups", "remote-name", "x-remote-user", "x-remote-email", "x-remote-groups"]
        let lookalikes = ["x-auth-requests", "x-auth-request", "x-siwas-assertion", "remote-users", "x-remote", "x-forwarded-user", "cookie", "accept"]
        for round in 0..<500 {
            var fields = HTTPFields()
            var claimed: Set<String> = []
            for _ in 0..<Int.random(in: 0...6, using: &generator) {
                let name = Self.spelled(family.randomElement(using: &generator)!, &generator)
                fields.append(HTTPField(name: try #require(HTTPField.Name(name)), value: "forged"))
                claimed.insert(name.lowercased())
            }
            for _ in 0..<Int.random(in: 0...3, using: &generator) {
                fields.append(HTTPField(name: try #require(HTTPField.Name(Self.spelled(lookalikes.randomElement(using: &generator)!, &generator))), value: "x"))
            }
            let person = round % 2 == 0 ? Admission.Person(user: Self.user, groups: round % 4 == 0 ? ["admins"] : [], client: nil) : nil
            let drops = round % 3 == 0
            let admission = Admission(person: person, authorization: nil, dropsAuthorization: drops)
            let set = admission.identityFields(assertion: person == nil ? nil : "a.b.c")
            let removed = admission.removedNames(given: set, from: fields)
            let setNames = Set(set.map { $0.name.canonicalName })
            for name in claimed where !setNames.contains(name) {
                #expect(removed.contains(name), "round \(round): the client's \(name) is not removed: \(removed)")
            }
            for name in IdentityHeaders.all.map(\.canonicalName) where !setNames.contains(name) {
                #expect(removed.contains(name), "round \(round): \(name), which siwa did not set, is not removed: \(removed)")
            }
            #expect(removed.allSatisfy { !setNames.contains($0) }, "round \(round): a field siwa sets is removed: \(removed)")
            #expect(removed.allSatisfy { name in !lookalikes.contains { $0 == name.replacingOccurrences(of: "_", with: "-") } }, "round \(round): \(removed)")
            #expect(removed.contains("authorization") == drops, "round \(round): \(removed)")
            #expect(Set(removed).count == removed.count, "round \(round): named twice: \(removed)")
        }
    }

    @Test("claimsIdentity read byte by byte says what the Unicode reading (lowercased, _ as -) says, on 20,000 generated names: the family and its look-alikes in any case and spelling, random tokens, and names with bytes past ASCII (the Kelvin sign folds to k)")
    func bytewiseReadingAgrees() {
        var generator = SplitMix64(seed: 46)
        let stems = ["x-auth-request-", "x-siwa-", "remote-user", "remote-email", "remote-groups", "remote-name", "x-remote-user", "x-remote-email",
                     "x-remote-groups", "x-auth-request", "x-siwas-", "remote-users", "x-remote", "accept", "x-forwarded-user", ""]
        let tails = ["", "user", "groups", "x", "-", "_", "\u{212A}", "é", "\u{0130}", "1"]
        let alphabet = Array("abcxyzAUTHREQSIW-_.!#$%&'*+^`|~0123456789\u{212A}\u{017F}ıİé")
        var agreed = 0
        for round in 0..<20_000 {
            var name: String
            if round % 4 == 3 {
                name = String((0..<Int.random(in: 0...20, using: &generator)).map { _ in alphabet.randomElement(using: &generator) ?? "a" })
            } else {
                let stem = stems.randomElement(using: &generator) ?? ""
                name = String((stem + (tails.randomElement(using: &generator) ?? "")).map { character -> Character in
                    switch Int.random(in: 0..<4, using: &generator) {
                    case 0: return Character(character.uppercased())
                    case 1 where character == "-": return "_"
                    case 2 where character == "k": return "\u{212A}"
                    default: return character
                    }
                })
            }
            let bytewise = IdentityHeaders.claimsIdentity(name)
            #expect(bytewise == IdentityHeaders.claimsIdentitySpelledOut(name), "\(name.debugDescription)")
            if bytewise { agreed += 1 }
        }
        // Both readings were asked of names that claim an identity, not only of names that do not.
        #expect(agreed > 2_000)
    }
}
