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
    static let layers = ["Provider", "Controllers", "Doctor", "Edge", "Front", "Middleware", "Verdict", "Settings", "Views", "Flow", "Access", "Support", "Store", "Metrics"]

    @Test("SignInServer's folders are layers: no folder names a type declared in a folder above it (Front never uses Controllers), and the page lists them in that order")
    func foldersAreLayers() throws {
        let base = Self.root.appendingPathComponent("Sources/SignInServer")
        var declared: [String: String] = [:]
        var extensionMembers: [String: Set<String>] = [:]
        var namesDeclared: [String: Set<String>] = [:]
        var code: [(folder: String, file: String, text: String)] = []
        for path in Self.paths() where path.hasPrefix("Sources/SignInServer/") && path.hasSuffix(".swift") {
            let relative = path.dropFirst("Sources/SignInServer/".count)
            guard let slash = relative.firstIndex(of: "/") else { continue }
            let folder = String(relative[..<slash])
            let text = try String(contentsOf: base.appendingPathComponent(String(relative)), encoding: .utf8)
            for match in text.matches(of: /(?m)^(?:public |package |private |fileprivate )?(?:final )?(?:struct|enum|class|protocol|actor) ([A-Z][A-Za-z0-9]+)/) {
                declared[String(match.output.1)] = declared[String(match.output.1)] ?? folder
            }
            // The members an extension adds to a type of another module or folder (`extension Request { func
            // isPageNavigation }`): a lower folder calling one uses this folder as surely as naming a type of it.
            for member in Self.extensionMembers(text) {
                extensionMembers[member, default: []].insert(folder)
            }
            for name in Self.namesDeclared(text) { namesDeclared[name, default: []].insert(folder) }
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
        // Extension members declared in one folder only, and a name no other folder declares for anything (a property,
        // a case, a local), used as a member (`.name`) by a folder below it.
        var membersChecked = 0
        for (member, homes) in extensionMembers where homes.count == 1 && (namesDeclared[member] ?? []).count <= 1 {
            guard let home = homes.first, let homeRank = Self.layers.firstIndex(of: home) else { continue }
            for (folder, file, text) in code {
                guard let rank = Self.layers.firstIndex(of: folder), homeRank < rank else { continue }
                membersChecked += 1
                let used = text.contains("." + member + "(") || text.contains("." + member + " ") || text.contains("." + member + ")")
                    || text.contains("." + member + "\n") || text.contains("." + member + ",")
                #expect(!used, "\(file) (in \(folder)) uses \(member), which an extension in \(home), a layer above it, declares")
            }
        }
        #expect(membersChecked > 100, "too few extension members checked: \(membersChecked)")
        let page = try String(contentsOf: Self.root.appendingPathComponent("docs/architecture.md"), encoding: .utf8)
        let positions = Self.layers.map { page.range(of: "| `\($0)/`")?.lowerBound ?? page.range(of: "`\($0)/`, ")?.lowerBound }
        #expect(positions.allSatisfy { $0 != nil }, "docs/architecture.md's table does not list every layer")
        let found = positions.compactMap { $0 }
        #expect(found == found.sorted(), "docs/architecture.md lists the layers in another order")
    }

    /// The names of the functions and properties the extensions of `text` declare (`extension X {` at column 0,
    /// members at the next indentation), but `init`s and names of under five letters (too common to tell apart).
    static func extensionMembers(_ text: String) -> Set<String> {
        var members: Set<String> = []
        var inExtension = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("extension ") { inExtension = true; continue }
            if line.hasPrefix("}") { inExtension = false; continue }
            guard inExtension, line.hasPrefix("    "), !line.hasPrefix("     "), !line.contains("private ") else { continue }
            let words = line.split(separator: " ").map(String.init)
            guard let kind = words.firstIndex(where: { $0 == "func" || $0 == "var" || $0 == "let" }), kind + 1 < words.count else { continue }
            let name = String(words[kind + 1].prefix { $0.isLetter || $0.isNumber || $0 == "_" })
            guard let first = name.first, first.isLowercase else { continue }
            if name.count >= 5 { members.insert(name) }
        }
        return members
    }

    /// Every name `text` declares with `func`, `var`, `let` or `case`, at any depth.
    static func namesDeclared(_ text: String) -> Set<String> {
        var names: Set<String> = []
        let words = text.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "(" || $0 == "\t" })
        for (index, word) in words.enumerated() where index + 1 < words.count && (word == "func" || word == "var" || word == "let" || word == "case") {
            names.insert(String(words[index + 1].prefix { $0.isLetter || $0.isNumber || $0 == "_" }))
        }
        return names
    }
}
