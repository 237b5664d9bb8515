import DoorHTTP
import Foundation
import Testing

/// `containsBytes`, the byte search the byte path and the verdict use in place of Foundation's `contains` and
/// `lowercased`, held to Foundation's answers on generated texts (ASCII letters in both cases, the needle's pieces,
/// non-ASCII letters whose UTF-8 bytes must not fold).
@Suite("A byte search")
struct ContainsBytesTests {
    @Test("generated texts and needles: the same answer as Foundation's contains, exact and with ASCII case folded")
    func agreesWithFoundation() {
        var generator = SystemRandomNumberGenerator()
        let pieces = ["access", "_token", "ACCESS", "Token", "text/", "html", "TEXT/HTML", "=", "&", "a", "é", "É", "ß", "ı", " ", ""]
        let needles = ["access_token", "text/html", "application/json", "a", "é", ""]
        for _ in 0..<5_000 {
            let text = (0..<Int.random(in: 0...6, using: &generator)).map { _ in pieces.randomElement(using: &generator) ?? "" }.joined()
            let needle = needles.randomElement(using: &generator) ?? "a"
            let exact = needle.isEmpty || text.contains(needle)
            #expect(text.containsBytes(needle) == exact, "\(text) ∋ \(needle)")
            // ASCII folding only: a non-ASCII letter's case is not folded, as no field or query token needs it.
            let asciiLower = String(decoding: text.utf8.map { $0 >= 65 && $0 <= 90 ? $0 | 0x20 : $0 }, as: UTF8.self)
            let folded = needle.isEmpty || asciiLower.contains(needle.lowercased())
            #expect(text.containsBytes(needle, caseInsensitive: true) == folded, "\(text) ∋ \(needle), any case")
        }
    }
}
