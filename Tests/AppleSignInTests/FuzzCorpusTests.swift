import Foundation
import FuzzTargets
import Testing

/// Replays the committed fuzz corpora (Fuzz/Corpus) through the fuzz targets' property checks: every input
/// libFuzzer kept, and every hand-made seed, still parses or is refused without violating a property. A
/// violation fails the test, naming the input and the property, and the replay goes on with the next input.
@Suite("Fuzz corpora")
struct FuzzCorpusTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test("each target's committed corpus replays without a property violation", arguments: FuzzTarget.allCases)
    func replay(target: FuzzTarget) async throws {
        let directory = FuzzTarget.corpusDirectory(for: target, root: Self.root)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { !$0.hasPrefix(".") }
        // The corpus is the point: a missing or emptied directory must fail, not pass vacuously.
        #expect(names.count >= 7, "Fuzz/Corpus/\(target.rawValue) holds \(names.count) inputs")
        var accepted: Set<String> = []
        for name in names.sorted() {
            let data = try #require(FileManager.default.contents(atPath: directory.appendingPathComponent(name).path))
            switch await Self.offPool({ target.run(Array(data)) }) {
            case .accepted: accepted.insert(name)
            case .refused: break
            case .violated(let message): Issue.record("Fuzz/Corpus/\(target.rawValue)/\(name): property violated: \(message)")
            }
        }
        // The seeds that are what Apple sends must get through, or the target only ever fuzzes the refusals.
        let expected: [FuzzTarget: [String]] = [
            .callback: ["seed-first-sign-in", "seed-returning", "seed-cancel"],
            .jwt: ["seed-valid", "seed-aud-array", "seed-nonce-hex", "seed-no-nonce-unsupported", "seed-bools"],
            .user: ["seed-full", "seed-email-only", "seed-unicode", "seed-extra-keys"],
            .request: ["seed-get-browser", "seed-post-length", "seed-check-forwarded", "seed-pipelined", "seed-odd-target", "seed-http10",
                       // Found by libFuzzer: a length with a blank after it (the check read NIO's value with the blank).
                       "seed-found-length-blank"],
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
            .request: ["seed-chunked", "seed-two-hosts", "seed-bare-lf", "seed-absolute-form", "seed-obs-fold", "seed-cl-te",
                       // Found by libFuzzer: a tab after a length's digits, which NIO's parser refuses and the byte path took.
                       "seed-found-length-tab"],
        ]
        for name in refused[target] ?? [] {
            #expect(!accepted.contains(name), "\(name) was accepted")
        }
    }

    /// Runs `work` on a thread of its own. The jwt target waits for async verification with a semaphore (as the
    /// libFuzzer driver must); on Swift's cooperative pool, two cores wide here, two such waits at once would
    /// block every thread the awaited work needs, and the whole test process would hang.
    static func offPool<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: work()) }.start()
        }
    }

    @Test("a property violation is reported as the input's outcome, not a trap, so the replay goes on")
    func violationDoesNotTrap() async {
        let user = await Self.offPool { FuzzTarget.user.run(Array(#"{"name":{"firstName":"Ada"}}"#.utf8)) }
        let outcomes = [
            FuzzOutcome.evaluate { () throws(PropertyViolation) -> Bool in
                try FuzzChecks.check(1 + 1 == 3, "arithmetic holds")
                return true
            },
            user,
        ]
        #expect(outcomes == [.violated("arithmetic holds"), .accepted])
    }
}
