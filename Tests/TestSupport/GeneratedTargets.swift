/// Request targets made of the pieces that parsers of a URL disagree on (dot-segments plain and encoded, encoded
/// separators, bad and non-UTF-8 percent-encodings, fragments, backslashes, blanks, bytes beyond ASCII), from a seed,
/// so that a failing one can be made again: the inputs of the door's differential tests.
public enum GeneratedTargets {
    static let pieces = [
        "/", "/", "/", "a", "b", "public", "admin", ".", "..", "%2e", "%2E", "%2f", "%2F", "%5c", "%00", "%41", "%7e", "%ff", "%c3%a9", "%e9",
        "%", "%z", "%4", ";", ";x", "?", "&", "=", "#", "\\", "//", " ", "\u{e9}", "{", "|", "~", "-", "_", ":", "@", "+", "%25", "%3F", "%23",
    ]

    /// `count` targets from `seed`; one in eight does not start with `/`.
    public static func make(count: Int, seed: UInt64, prefix: String = "") -> [String] {
        var generator = SplitMix64(seed: seed)
        return (0..<count).map { _ in
            var target = generator.next() % 8 == 0 ? "" : "/" + prefix
            target += generator.joined(pieces, count: 1 + Int(generator.next() % 10))
            return target
        }
    }
}

/// A small seeded generator (SplitMix64).
public struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A number from 0 to `bound` - 1, drawn.
    public mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }

    /// One of `choices`, drawn.
    public mutating func pick<Element>(_ choices: [Element]) -> Element {
        choices[below(choices.count)]
    }

    /// `count` of `pieces`, each drawn, joined: the generated inputs of the differential tests.
    public mutating func joined(_ pieces: [String], count: Int) -> String {
        (0..<count).map { _ in pick(pieces) }.joined()
    }
}
