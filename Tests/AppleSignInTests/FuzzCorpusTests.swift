import Foundation
import FuzzTargets
import Testing

/// Replays the committed fuzz corpora (Fuzz/Corpus) through the fuzz targets' property checks: every input
/// libFuzzer kept, and every hand-made seed, still parses or is refused without violating a property. A
/// violation traps the test process, as it would crash the fuzzer.
@Suite("Fuzz corpora")
struct FuzzCorpusTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test("each target's committed corpus replays without a property violation", arguments: FuzzTarget.allCases)
    func replay(target: FuzzTarget) throws {
        let directory = FuzzTarget.corpusDirectory(for: target, root: Self.root)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { !$0.hasPrefix(".") }
        // The corpus is the point: a missing or emptied directory must fail, not pass vacuously.
        #expect(names.count >= 7, "Fuzz/Corpus/\(target.rawValue) holds \(names.count) inputs")
        var accepted: Set<String> = []
        for name in names.sorted() {
            let data = try #require(FileManager.default.contents(atPath: directory.appendingPathComponent(name).path))
            if target.run(Array(data)) { accepted.insert(name) }
        }
        // The seeds that are what Apple sends must get through, or the target only ever fuzzes the refusals.
        let expected: [FuzzTarget: [String]] = [
            .callback: ["seed-first-sign-in", "seed-returning", "seed-cancel"],
            .jwt: ["seed-valid", "seed-aud-array", "seed-nonce-hex", "seed-no-nonce-unsupported", "seed-bools"],
            .user: ["seed-full", "seed-email-only", "seed-unicode", "seed-extra-keys"],
        ]
        for name in expected[target] ?? [] {
            #expect(accepted.contains(name), "\(name) was refused")
        }
        // And the ones Apple would never send must not.
        let refused: [FuzzTarget: [String]] = [
            .callback: ["seed-duplicate", "seed-bad-escape", "seed-not-utf8"],
            .jwt: ["seed-expired", "seed-future-iat", "seed-no-nonce", "seed-aud-extra", "seed-token-alg-none", "seed-token-hs256", "seed-dup-key",
                   // Found by libFuzzer: a leading zero, a number beyond Double, an iat of 1.3e111 (trapped).
                   "seed-found-leading-zero", "seed-found-infinite-number", "seed-found-huge-iat"],
            .user: ["seed-wrong-types", "seed-deep"],
        ]
        for name in refused[target] ?? [] {
            #expect(!accepted.contains(name), "\(name) was accepted")
        }
    }
}
