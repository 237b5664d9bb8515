import Foundation
@testable import SignInServer
import TestSupport
import Testing

/// The map behind the session cache (`OldestFirstMap`): what `value(for:)` remembers never outlives a change.
@Suite("The session cache's map")
struct OldestFirstMapTests {
    @Test("generated runs of look-ups, with sets, changes in place and removals of the key looked up or of another, evictions of the key remembered, and clearing: value(for:) gives what the map holds each time, as a plain dictionary with the same steps says")
    func rememberedValueAgreesWithTheMap() {
        var random = SplitMix64(seed: 0x6f6c_6465_7374)
        let keys = (0..<6).map { String(repeating: "\($0)", count: 64) }
        var map = OldestFirstMap<Int>(capacity: 4)
        var reference: [String: Int] = [:]
        var order: [String] = []
        var key = keys[0]
        var remembered = 0
        for step in 0..<20_000 {
            // Runs of one key, as a session's requests come.
            if random.below(3) == 0 { key = keys[random.below(keys.count)] }
            // Changes to the key looked up, or to another: a set of another may evict the one the map remembers.
            let target = random.below(2) == 0 ? key : keys[random.below(keys.count)]
            switch random.below(12) {
            case 0:
                let value = step
                if let evicted = map.set(value, for: target) {
                    #expect(evicted.key == order.first, "step \(step): the oldest is evicted")
                    reference[evicted.key] = nil
                    order.removeFirst()
                }
                order.removeAll { $0 == target }
                order.append(target)
                reference[target] = value
            case 1:
                map.modify(target) { $0 = -step }
                if reference[target] != nil { reference[target] = -step }
            case 2:
                map.remove(target)
                reference[target] = nil
                order.removeAll { $0 == target }
            case 3 where random.below(20) == 0:
                map.removeAll()
                reference.removeAll()
                order.removeAll()
            default:
                break
            }
            let before = map[key]
            let got = map.value(for: key)
            if got != nil, got == before { remembered += 1 }
            #expect(got == reference[key], "step \(step): \(key.prefix(1))")
            #expect(map.value(for: key) == reference[key], "step \(step): asked again")
            #expect(map.count == reference.count, "step \(step)")
        }
        #expect(remembered > 5_000, "the generator rarely found a key: \(remembered)")
    }
}

/// A session's `via` read as who holds it as a bearer token (`SessionRecord.bearerClient`, `isAccessToken`).
@Suite("A session's holder read from its via")
struct BearerClientTests {
    @Test("generated via values, ASCII and not (marks after the colon, singletons that look like ASCII, empty client ids): bearerClient and isAccessToken read from bytes say what hasPrefix and dropFirst say")
    func bearerClientEitherWay() {
        let pieces = ["native:", "token:", "page", "client:", "com.example.app", "web-client", ":", "\u{301}", "\u{212A}", "é", "\u{0600}", "x", "", "NATIVE:", "native", "tok", "en:"]
        var random = SplitMix64(seed: 0x7669_6121)
        var bearers = 0
        for _ in 0..<30_000 {
            let via = random.below(20) == 0 ? nil : random.joined(pieces, count: random.below(4) + 1)
            let record = SessionRecord(idHash: "h", subject: "s", csrfToken: "c", createdAt: Date(timeIntervalSince1970: 0), expiresAt: Date(timeIntervalSince1970: 1), via: via)
            #expect(record.bearerClient == record.bearerClientSpelledOut, "\(String(describing: via))")
            #expect(record.isAccessToken == (via?.hasPrefix("token:") == true), "\(String(describing: via))")
            if record.bearerClient != nil { bearers += 1 }
        }
        #expect(bearers > 3_000, "the generator rarely made a bearer's via: \(bearers)")
    }
}
