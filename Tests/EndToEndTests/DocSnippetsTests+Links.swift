import Foundation
import TestSupport
import Testing

/// The links between the pages (issue 29): a page split or a heading renamed must not leave a reader at a page or
/// an anchor that is not there, and every page of docs/ is reached from the README.
extension DocSnippetsTests {
    /// One link of a page: its target as written and the line it is on.
    struct Link: CustomStringConvertible {
        let page: String
        let line: Int
        let target: String
        var description: String { "\(page):\(line) (\(target))" }
    }

    @Test("every link of README.md and docs/ to a file of the package leads to one, every #anchor to a heading of its page, and every page of docs/ is linked from the README")
    func everyLinkLeadsSomewhere() throws {
        let pages = try DocSnippets.pages()
        var checked = 0
        for page in pages {
            for link in try Self.links(in: page) {
                let target = link.target
                if target.hasPrefix("http://") || target.hasPrefix("https://") || target.hasPrefix("mailto:") { continue }
                checked += 1
                let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
                let file = parts[0].isEmpty ? page : Self.resolve(parts[0], from: page)
                let url = DocSnippets.packageDirectory.appendingPathComponent(file)
                #expect(FileManager.default.fileExists(atPath: url.path), "\(link) leads to \(file), which is not there")
                if parts.count == 2 {
                    #expect(file.hasSuffix(".md"), "\(link): an anchor into a file that is not a page")
                    guard file.hasSuffix(".md"), FileManager.default.fileExists(atPath: url.path) else { continue }
                    let anchors = try Self.anchors(of: file)
                    #expect(anchors.contains(parts[1]), "\(link): \(file) has no heading #\(parts[1]); its headings: \(anchors.sorted())")
                }
            }
        }
        #expect(checked > 20, "the links were not found: \(checked)")

        let fromReadme = Set(try Self.links(in: "README.md").map { $0.target.split(separator: "#").first.map(String.init) ?? "" })
        for page in pages where page != "README.md" {
            #expect(fromReadme.contains(page), "\(page) is not linked from the README's documentation")
        }
    }

    /// The links of `page` (`[text](target)`), outside its fenced blocks and code spans.
    static func links(in page: String) throws -> [Link] {
        var links: [Link] = []
        var fenced = false
        for (index, line) in try DocSnippets.text(of: page).split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            if line.hasPrefix("```") {
                fenced.toggle()
                continue
            }
            if fenced { continue }
            let prose = line.replacing(/`[^`]*`/, with: "")
            for match in prose.matches(of: /\]\(([^)\s]+)\)/) {
                links.append(Link(page: page, line: index + 1, target: String(match.output.1)))
            }
        }
        return links
    }

    /// `target` (relative to `page`'s directory) as a path relative to the package: `../README.md` from
    /// `docs/front.md` is `README.md`.
    static func resolve(_ target: String, from page: String) -> String {
        var parts = page.split(separator: "/").dropLast().map(String.init)
        for part in target.split(separator: "/").map(String.init) {
            if part == ".." {
                _ = parts.popLast()
            } else if part != "." {
                parts.append(part)
            }
        }
        return parts.joined(separator: "/")
    }

    /// The anchors GitHub gives the headings of `page`: lowercased, punctuation but `-` and `_` dropped, spaces made
    /// `-`, and `-1`, `-2` … after a repeated one.
    static func anchors(of page: String) throws -> Set<String> {
        var anchors: Set<String> = []
        var seen: [String: Int] = [:]
        var fenced = false
        for line in try DocSnippets.text(of: page).split(separator: "\n") {
            if line.hasPrefix("```") { fenced.toggle() }
            guard !fenced, let heading = line.firstMatch(of: /^#{1,6} +(.+?) *$/) else { continue }
            let slug = String(heading.output.1.lowercased().unicodeScalars.filter {
                CharacterSet.alphanumerics.contains($0) || $0 == "-" || $0 == "_" || $0 == " "
            }.map(Character.init)).replacingOccurrences(of: " ", with: "-")
            let count = seen[slug, default: 0]
            seen[slug] = count + 1
            anchors.insert(count == 0 ? slug : "\(slug)-\(count)")
        }
        return anchors
    }
}
