@testable import SignInServer
import Testing
import TestSupport

/// `HeaderNames`, the front's sets of field names (hop-by-hop, never passed upstream), asked for every field: its
/// one-bit shortcut must never say "not a member" of a member.
@Suite("Header name sets: the shortcut agrees with the set")
struct HeaderNamesTests {
    @Test("generated names, members and near misses: contains is Set.contains")
    func agreesWithTheSet() {
        let members = Array(UpstreamForwarder.identityAndOverrides.union(UpstreamForwarder.clientAddressClaims)) + Array(AnswerFilter.hopByHop.names)
        let names = HeaderNames(members)
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz-_0123456789".utf8)
        var random = SplitMix64(seed: 0x6865_6164_6572)
        var hits = 0, shortcut = 0
        for round in 0..<40_000 {
            var candidate: String
            if round % 3 == 0 {
                // A member, or a member with one byte changed, added or taken.
                var bytes = Array(random.pick(members).utf8)
                switch random.next() % 4 {
                case 0: break
                case 1: bytes[random.below(bytes.count)] = random.pick(alphabet)
                case 2: bytes.append(random.pick(alphabet))
                default: bytes.removeLast()
                }
                candidate = String(decoding: bytes, as: UTF8.self)
            } else {
                let count = Int(random.next() % 70)
                candidate = String(decoding: (0..<count).map { _ in random.pick(alphabet) }, as: UTF8.self)
            }
            let expected = names.names.contains(candidate)
            #expect(names.contains(candidate) == expected, "\(candidate)")
            if expected { hits += 1 }
        }
        for common in ["accept", "user-agent", "accept-encoding", "accept-language", "cookie", "referer", "cache-control", "sec-fetch-mode", "content-type", "origin"] {
            if !names.contains(common) { shortcut += 1 }
        }
        #expect(hits > 3_000, "the generator rarely made a member: \(hits)")
        #expect(shortcut == 10)
        #expect(names.contains("x-real-ip") && AnswerFilter.hopByHop.contains("te") && !AnswerFilter.hopByHop.contains("") && !names.contains("x-real-ipv"))
    }
}
