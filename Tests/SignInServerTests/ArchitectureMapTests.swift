import Foundation
import Testing

/// docs/architecture.md is the map of today's code: every source file and folder it names must exist, so that a
/// file moved or renamed without the map fails here (the page once named `Front/RequestTarget.swift` long after it
/// had moved to `DoorHTTP`).
@Suite("The architecture page names only what exists")
struct ArchitectureMapTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Every path below `Sources/` and `Tests/`, relative to the repository.
    static func paths() -> [String] {
        var found: [String] = []
        for top in ["Sources", "Tests"] {
            let base = root.appendingPathComponent(top)
            guard let walker = FileManager.default.enumerator(atPath: base.path) else { continue }
            while let next = walker.nextObject() as? String { found.append(top + "/" + next) }
        }
        return found
    }

    @Test("every .swift file and every source folder the page names is in the tree")
    func namedPathsExist() throws {
        let page = try String(contentsOf: Self.root.appendingPathComponent("docs/architecture.md"), encoding: .utf8)
        let all = Self.paths()
        // Files: any token ending in .swift, as a suffix of a real path (`Front/FrontDoor.swift`, `App+build.swift`).
        let files = Set(page.matches(of: /[A-Za-z0-9_+\/.-]+\.swift\b/).map { String($0.output) })
        #expect(files.count >= 30, "the map names too few files to be a map: \(files.count)")
        for file in files.sorted() {
            let matched = all.contains { $0 == file || $0.hasSuffix("/" + file) }
            #expect(matched, "docs/architecture.md names \(file), which is not in Sources/ or Tests/")
        }
        // Folders: backticked `Name/` or `Sources/...`, `Tests/...` paths.
        let folders = Set(page.matches(of: /`((?:Sources|Tests)\/[A-Za-z0-9_+\/.-]*|[A-Z][A-Za-z]+\/(?:[A-Z][A-Za-z]+\/?)?)`/).map { String($0.output.1) })
        for folder in folders.sorted() {
            let trimmed = folder.hasSuffix("/") ? String(folder.dropLast()) : folder
            let matched = all.contains { $0 == trimmed || $0.hasSuffix("/" + trimmed) }
            #expect(matched, "docs/architecture.md names the folder \(folder), which is not in Sources/ or Tests/")
        }
    }
}
