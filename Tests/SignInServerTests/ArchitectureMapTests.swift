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
        // Files: any token ending in .swift, as a suffix of a real path (`Front/FrontDoor.swift`, `App+build.swift`); a
        // link's target is relative to docs/ (`../Tests/TestSupport/Nginx.swift` is `Tests/TestSupport/Nginx.swift`).
        let files = Set(page.matches(of: /[A-Za-z0-9_+\/.-]+\.swift\b/).map { match in
            let token = String(match.output)
            return token.hasPrefix("../") ? String(token.dropFirst(3)) : token
        })
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

    /// The folders of `SignInServer`, top to bottom, as docs/architecture.md gives them: a folder may use what is below
    /// it, never what is above.
    static let layers = ["Provider", "Controllers", "Doctor", "Edge", "Front", "Middleware", "Settings", "Views", "Flow", "Access", "Support", "Store", "Metrics"]

    @Test("SignInServer's folders are layers: no folder names a type declared in a folder above it (Front never uses Controllers), and the page lists them in that order")
    func foldersAreLayers() throws {
        let base = Self.root.appendingPathComponent("Sources/SignInServer")
        var declared: [String: String] = [:]
        var code: [(folder: String, file: String, text: String)] = []
        for path in Self.paths() where path.hasPrefix("Sources/SignInServer/") && path.hasSuffix(".swift") {
            let relative = path.dropFirst("Sources/SignInServer/".count)
            guard let slash = relative.firstIndex(of: "/") else { continue }
            let folder = String(relative[..<slash])
            let text = try String(contentsOf: base.appendingPathComponent(String(relative)), encoding: .utf8)
            for match in text.matches(of: /(?m)^(?:public |package |private |fileprivate )?(?:final )?(?:struct|enum|class|protocol|actor) ([A-Z][A-Za-z0-9]+)/) {
                declared[String(match.output.1)] = declared[String(match.output.1)] ?? folder
            }
            // Comments and string literals name things without using them.
            let lines = text.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }
            code.append((folder, String(relative), lines.joined(separator: "\n").replacing(/"[^"\n]*"/, with: "\"\"")))
        }
        #expect(Set(code.map(\.folder)).isSubset(of: Set(Self.layers)), "a folder the layers do not place: \(Set(code.map(\.folder)).subtracting(Self.layers))")
        var checked = 0
        for (folder, file, text) in code {
            // The capitalized words of the file: a type is used where its name is one of them.
            let words = Set(text.matches(of: /[A-Za-z0-9_]+/).map { String($0.output) })
            guard let rank = Self.layers.firstIndex(of: folder) else { continue }
            for (type, home) in declared where home != folder {
                guard let homeRank = Self.layers.firstIndex(of: home), homeRank < rank else { continue }
                checked += 1
                let used = words.contains(type)
                #expect(!used, "\(file) (in \(folder)) uses \(type), declared in \(home), a layer above it")
            }
        }
        #expect(checked > 1000, "too few pairs checked: \(checked)")
        let page = try String(contentsOf: Self.root.appendingPathComponent("docs/architecture.md"), encoding: .utf8)
        let positions = Self.layers.map { page.range(of: "| `\($0)/`")?.lowerBound ?? page.range(of: "`\($0)/`, ")?.lowerBound }
        #expect(positions.allSatisfy { $0 != nil }, "docs/architecture.md's table does not list every layer")
        let found = positions.compactMap { $0 }
        #expect(found == found.sorted(), "docs/architecture.md lists the layers in another order")
    }
}
