import Foundation

/// The fenced blocks of the package's documentation (README.md, docs/*.md), read the way a reader finds them, so a
/// test runs the very configuration a page shows rather than a copy that can drift from it.
///
/// ```swift
/// let block = try DocSnippets.block("nginx", in: "docs/front.md", after: "**nginx** (siwa on")
/// let mine = try DocSnippets.substituting(block, ["127.0.0.1:8080": "127.0.0.1:\(siwa)", "127.0.0.1:3000": "127.0.0.1:\(app)"])
/// ```
public enum DocSnippets {
    /// One fenced block: its language (the fence's info string, empty when it names none), its text without the
    /// fences, and where it starts.
    public struct Fenced: Sendable, Equatable, CustomStringConvertible {
        /// The page, relative to the package's directory (`docs/front.md`).
        public let page: String
        /// The first word after the opening fence, lowercased (`nginx`, `yaml`, `caddyfile`), or "".
        public let language: String
        /// The lines between the fences, each ending in a newline.
        public let text: String
        /// The line number of the opening fence (1-based).
        public let line: Int
        /// The offset in the page's characters where the opening fence starts.
        let start: Int

        public var description: String { "\(page):\(line) ```\(language)" }
    }

    /// The package's root directory (this file is `Tests/TestSupport/DocSnippets.swift`).
    public static let packageDirectory: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The pages whose blocks a reader copies: README.md and every docs/*.md, by path relative to the package.
    public static func pages() throws -> [String] {
        let docs = try FileManager.default.contentsOfDirectory(atPath: packageDirectory.appendingPathComponent("docs").path)
        return ["README.md"] + docs.filter { $0.hasSuffix(".md") }.sorted().map { "docs/" + $0 }
    }

    /// The text of `page` (relative to the package's directory).
    public static func text(of page: String) throws -> String {
        try String(contentsOf: packageDirectory.appendingPathComponent(page), encoding: .utf8)
    }

    /// Every fenced block of `page`, in order. A fence is a line starting with three backticks; the block ends at
    /// the next line that is three backticks alone. An opening fence without its closing one is an error.
    public static func fencedBlocks(in page: String) throws -> [Fenced] {
        let text = try text(of: page)
        var blocks: [Fenced] = []
        var open: (language: String, line: Int, start: Int)?
        var body = ""
        var offset = 0
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            defer { offset += line.count + 1 }
            if let current = open {
                if line.trimmingCharacters(in: .whitespaces) == "```" {
                    blocks.append(Fenced(page: page, language: current.language, text: body, line: current.line, start: current.start))
                    open = nil
                    body = ""
                } else {
                    body += line + "\n"
                }
            } else if line.hasPrefix("```") {
                let info = line.dropFirst(3).trimmingCharacters(in: .whitespaces)
                open = (String(info.split(separator: " ").first ?? "").lowercased(), index + 1, offset)
            }
        }
        if let open { throw DocSnippetError("\(page):\(open.line): a fenced block that never closes") }
        return blocks
    }

    /// The `nth` (1-based) block in `language` that starts after the first occurrence of `marker` in `page`: the
    /// text a reader copies from under that heading or sentence.
    public static func block(_ language: String, in page: String, after marker: String, nth: Int = 1) throws -> String {
        try fenced(language, in: page, after: marker, nth: nth).text
    }

    /// `block(_:in:after:nth:)` with where the block is.
    public static func fenced(_ language: String, in page: String, after marker: String, nth: Int = 1) throws -> Fenced {
        let text = try text(of: page)
        guard let found = text.range(of: marker) else { throw DocSnippetError("\(page) no longer says \(marker.debugDescription)") }
        let position = text.distance(from: text.startIndex, to: found.lowerBound)
        let candidates = try fencedBlocks(in: page).filter { $0.language == language.lowercased() && $0.start > position }
        guard nth >= 1, candidates.count >= nth else {
            throw DocSnippetError("\(page) has no \(nth == 1 ? "" : "\(nth)th ")```\(language) block after \(marker.debugDescription)")
        }
        return candidates[nth - 1]
    }

    /// `text` with every key of `replacements` replaced by its value. Each key must occur in `text` (a page that
    /// no longer names what the test substitutes is an error, not a silent no-op), and no `<placeholder>` may be
    /// left unfilled.
    public static func substituting(_ text: String, _ replacements: KeyValuePairs<String, String>) throws -> String {
        var result = text
        for (from, to) in replacements {
            guard result.contains(from) else { throw DocSnippetError("the block no longer contains \(from.debugDescription):\n\(text)") }
            result = result.replacingOccurrences(of: from, with: to)
        }
        let left = placeholders(in: result)
        guard left.isEmpty else { throw DocSnippetError("placeholders left unfilled: \(left.joined(separator: ", "))\n\(result)") }
        return result
    }

    /// The `<placeholder>`s of `text` (lower-case words in angle brackets, as the pages write what a reader fills in;
    /// `<Location /protected>` is not one).
    public static func placeholders(in text: String) -> [String] {
        text.matches(of: /<[a-z][a-z0-9_]*>/).map { String($0.output) }
    }
}

extension DocSnippets {
    /// The words of the first command in `block` (a ```sh block's text) that starts with `prefix`, as sh would pass
    /// them: lines ending in `\` joined to the next, a word starting with `#` and the rest of the line dropped.
    public static func command(in block: String, starting prefix: String) throws -> [String] {
        guard let line = lines(of: block).first(where: { $0.trimmingCharacters(in: .whitespaces).hasPrefix(prefix) }) else {
            throw DocSnippetError("no command starting \(prefix.debugDescription) in:\n\(block)")
        }
        return try words(of: line)
    }

    /// Every command of `block` (a ```sh block's text), in order, each read as `command(in:starting:)` reads one; a
    /// line that is blank or only a comment (the output a page shows under a command) is none.
    public static func commands(in block: String) throws -> [[String]] {
        try lines(of: block).map(words(of:)).filter { !$0.isEmpty }
    }

    /// The lines of `block` with each ending in `\` joined to the next, as sh reads them.
    static func lines(of block: String) -> [String] {
        block.replacingOccurrences(of: "\\\n", with: " ").split(separator: "\n").map(String.init)
    }

    /// The command lines of `block` (a ```sh block's text) as sh reads them, lines ending in `\` joined to the next,
    /// blank and comment-only lines left out: for a command `words(of:)` cannot read (one with `$(…)` or `>>`), which
    /// a test then hands to sh itself.
    public static func commandLines(in block: String) -> [String] {
        lines(of: block).filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty && !$0.trimmingCharacters(in: .whitespaces).hasPrefix("#") }
    }

    /// A command's leading `NAME=value` words, which sh puts in the command's environment, and the words after them.
    public static func environmentAndCommand(_ words: [String]) -> (environment: [String: String], command: [String]) {
        var environment: [String: String] = [:]
        var rest = words[...]
        while let word = rest.first, let match = word.wholeMatch(of: /([A-Za-z_][A-Za-z0-9_]*)=(.*)/) {
            environment[String(match.output.1)] = String(match.output.2)
            rest = rest.dropFirst()
        }
        return (environment, Array(rest))
    }

    /// The session a block shows (a ```console block, or a ```sh one written with prompts): each `$ ` line's command,
    /// with the lines it prints under it.
    public static func session(in block: String) -> [(command: String, output: [String])] {
        var session: [(command: String, output: [String])] = []
        for line in block.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if line.hasPrefix("$ ") {
                session.append((String(line.dropFirst(2)), []))
            } else if !session.isEmpty, !line.isEmpty {
                session[session.count - 1].output.append(line)
            }
        }
        return session
    }

    /// A command line split into words as sh splits it: blanks between words, `'…'` and `"…"` quoting. What sh would
    /// expand or unescape (`$`, a backquote, a backslash outside single quotes) is an error rather than a guess, so a
    /// test never runs other words than the reader's shell would.
    public static func words(of line: String) throws -> [String] {
        var words: [String] = []
        var word = ""
        var inWord = false
        var quote: Character?
        for character in line {
            if let open = quote, character == open {
                quote = nil
            } else if quote == "'" {
                word.append(character)
            } else if "$`\\".contains(character) {
                throw DocSnippetError("\(line.debugDescription): \(character) means something to sh that this reading does not do")
            } else if quote != nil {
                word.append(character)
            } else if character == "'" || character == "\"" {
                quote = character
                inWord = true
            } else if character == " " || character == "\t" {
                if inWord { words.append(word) }
                word = ""
                inWord = false
            } else if character == "#", !inWord {
                break
            } else {
                word.append(character)
                inWord = true
            }
        }
        guard quote == nil else { throw DocSnippetError("\(line.debugDescription): a quote that never closes") }
        if inWord { words.append(word) }
        return words
    }

    /// Runs `program`, a Python web app a page shows, as its reader runs it (`python app.py`), with the Python of
    /// scripts/test's venv (Authlib, Flask), while `body` runs; it must listen on `port` and answer `GET /`. Stopped by
    /// its pid at the end. The signal mask this process's threads block is cleared for it first, or it would never
    /// see the SIGTERM that stops it (the page's program is not changed for that).
    public static func withPythonApp<T>(_ program: String, port: Int, _ body: (RunningProxy) async throws -> T) async throws -> T {
        let launcher = "import runpy, signal, sys; signal.pthread_sigmask(signal.SIG_SETMASK, []); runpy.run_path(sys.argv[1], run_name='__main__')"
        return try await ProxyHarness.run(.authlibPython, port: port, { directory, _ in
            ProxyLaunch(
                files: ["app.py": program], arguments: ["-c", launcher, directory.appendingPathComponent("app.py").path],
                environment: ["PYTHONUNBUFFERED": "1"], logFiles: []
            )
        }, ready: { app in
            (try? await HTTPProbe.status(app.url("/"))) == 200
        }, body)
    }
}

extension DocSnippets {
    /// Runs `program`, a Python script a page shows, to its end with the Python of scripts/test's venv (PyJWT,
    /// Authlib), as `python script.py` from a file of its own; `environment` is added to this process's.
    public static func runPython(_ program: String, environment: [String: String] = [:]) async throws -> ChildProcess.Outcome {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-doc-python-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let script = directory.appendingPathComponent("snippet.py")
        try program.write(to: script, atomically: true, encoding: .utf8)
        return try await ChildProcess.run(try ExternalTool.authlibPython.executable(), arguments: [script.path], environment: environment, timeLimit: .seconds(30))
    }
}

/// A page does not hold the block a test looks for, or the block no longer reads as the test expects.
public struct DocSnippetError: Error, CustomStringConvertible {
    /// What is missing and where.
    public let description: String

    init(_ description: String) {
        self.description = description
    }
}
