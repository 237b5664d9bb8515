@testable import DoorHTTP
import Foundation
@testable import SignInServer
import Testing
import TestSupport

/// The one request model of the door (`RequestTarget`, `SiwaPaths.route`): what every way to the upstream decides
/// on and forwards.
@Suite("The door's request target: read once, normalized once, decided on and forwarded")
struct RequestTargetTests {
    static func target(_ raw: String, host: String? = "site.example") -> RequestTarget? {
        try? RequestTarget(raw, host: host)
    }

    @Test("origin-form targets are kept, with unreserved characters decoded, other encodings in upper case, and characters a path may not hold encoded")
    func normalization() {
        #expect(Self.target("/")?.forwarded == "/")
        #expect(Self.target("/reports/2026?view=full")?.forwarded == "/reports/2026?view=full")
        #expect(Self.target("/%7Eada/%41%62c")?.path == "/~ada/Abc")
        #expect(Self.target("/caf%c3%a9")?.path == "/caf%C3%A9")
        #expect(Self.target("/a%20b")?.path == "/a%20b")
        #expect(Self.target("/x{y}|z\"")?.path == "/x%7By%7D%7Cz%22")
        #expect(Self.target("/search?q={a}&r=%zz") == nil, "a % without two hex digits in the query")
        #expect(Self.target("/search?q={a}|b")?.query == "q=%7Ba%7D%7Cb")
        #expect(Self.target("/search?next=/a?b")?.query == "next=/a?b")
        #expect(Self.target("/p?")?.forwarded == "/p?", "an empty query is kept as sent")
    }

    @Test("dot-segments are removed, one that climbs above / is refused, and so is one with parameters")
    func dotSegments() {
        #expect(Self.target("/a/./b/../c")?.path == "/a/c")
        #expect(Self.target("/a/%2e%2E/b")?.path == "/b", "an encoded dot is a dot")
        #expect(Self.target("/a/b/..")?.path == "/a/")
        #expect(Self.target("/a/.")?.path == "/a/")
        #expect(Self.target("/public/../admin")?.path == "/admin")
        #expect(Self.target("/../secret") == nil)
        #expect(Self.target("/a/../../secret") == nil)
        #expect(Self.target("/%2e%2e/secret") == nil)
        #expect(Self.target("/public/..;/admin") == nil)
        #expect(Self.target("/public/.;x/admin") == nil)
        #expect(Self.target("/a/...")?.path == "/a/...", "three dots are a name")
        #expect(Self.target("/a/.hidden")?.path == "/a/.hidden")
    }

    @Test("what the door refuses: encoded separators and NUL, a backslash, a fragment, bad or non-UTF-8 percent-encoding, bytes outside visible ASCII, other forms")
    func refusals() {
        for raw in [
            "/a%2Fb", "/a%2fb", "/a%5Cb", "/a\\b", "/a%00b", "/admin#.css", "/a?b#c", "/hooks/x%ff", "/public/%ff", "/a%zz", "/a%4", "/a%",
            "/caf\u{e9}", "/a b", "*", "site.example:443", "", "admin",
        ] {
            #expect(Self.target(raw) == nil, "\(raw) was accepted as \(Self.target(raw)?.forwarded ?? "")")
        }
    }

    @Test("absolute-form is taken only when its authority is the Host, then reduced to origin-form")
    func absoluteForm() {
        #expect(Self.target("http://site.example/public/x?q=5")?.forwarded == "/public/x?q=5")
        #expect(Self.target("HTTPS://Site.Example?q=1")?.forwarded == "/?q=1")
        #expect(Self.target("http://site.example")?.forwarded == "/")
        #expect(Self.target("http://x:abc/public/x?q=5", host: "site.example") == nil)
        #expect(Self.target("http://x:abc/public/x?q=5", host: nil) == nil)
        #expect(Self.target("http://[::1/public/x", host: "site.example") == nil)
        #expect(Self.target("http://%zz/public/x", host: "site.example") == nil)
        #expect(Self.target("http://evil.example/public/x", host: "site.example") == nil)
        #expect(Self.target("ftp://site.example/x") == nil)
    }

    @Test("siwa's own paths stay siwa's, as sent or as normalized; the rest is the upstream's, with the normalized target")
    func routing() throws {
        let owned = SiwaPaths(publicDirectory: "/nonexistent")
        #expect(owned.route("/auth/check", host: "h") == .siwa)
        #expect(owned.route("/auth/../admin", host: "h") == .siwa, "the path as sent is siwa's: never forwarded")
        #expect(owned.route("/x/../auth/check", host: "h") == .siwa, "the normalized path is siwa's")
        #expect(owned.route("/x/%2e%2e/healthz", host: "h") == .siwa)
        #expect(owned.route("/reports?x=1", host: "h") == .upstream(try #require(Self.target("/reports?x=1"))))
        guard case .refused = owned.route("/hooks/x%ff?action=delete", host: "h") else {
            Issue.record("a non-UTF-8 encoding was not refused")
            return
        }
    }

    @Test("generated paths: the first-segment filter never turns away a path the full reading finds siwa's")
    func ownedFilterAgrees() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-public-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("css"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        for file in ["css/site.css", "logo.png"] { FileManager.default.createFile(atPath: directory.appendingPathComponent(file).path, contents: Data()) }
        let owned = SiwaPaths(publicDirectory: directory.path)
        let pieces = ["/", "/", "//", "auth", "check", "oauth2", "token", ".well-known", "siwa", "openid-configuration", "healthz", "readyz",
                      "metrics", "button.css", "css", "site.css", "logo.png", "envoy.service.auth.v3.Authorization", "Check", "app", "Auth",
                      "auth.", "a", "%2e", "..", "", "x/"]
        var random = SplitMix64(seed: 0x6f77_6e65_6431)
        var siwas = 0, turnedAway = 0
        for _ in 0..<30_000 {
            let count = Int(random.next() % 6) + 1
            let path = (random.next() % 8 == 0 ? "" : "/") + random.joined(pieces, count: count)
            let full = owned.containsAfterNormalizing(path)
            let filtered = owned.mayHold(path[...])
            if full { siwas += 1; #expect(filtered, "\(path) is siwa's but the filter turned it away") }
            if !filtered { turnedAway += 1 }
            #expect(owned.contains(path) == full, "\(path)")
        }
        #expect(siwas > 1_000 && turnedAway > 5_000, "the generator made \(siwas) of siwa's paths and \(turnedAway) the filter turns away")
        #expect(owned.contains("/css/site.css") && owned.contains("//logo.png/") && !owned.contains("/css/other.css") && !owned.contains("/"))
    }

    @Test("generated targets: an accepted one reads back as itself, holds nothing the door refuses, and async-http-client sends exactly its bytes")
    func generatedTargetsAgree() {
        var accepted = 0
        for raw in GeneratedTargets.make(count: 5000, seed: 0x5157_4144_4f4f_5221) {
            guard let target = Self.target(raw) else { continue }
            accepted += 1
            let forwarded = target.forwarded
            #expect(Self.target(forwarded) == target, "\(raw) → \(forwarded) does not read back as itself")
            #expect(forwarded.hasPrefix("/"))
            #expect(forwarded.utf8.allSatisfy { (0x21...0x7E).contains($0) && $0 != UInt8(ascii: "#") && $0 != UInt8(ascii: "\\") })
            let lowered = target.path.lowercased()
            #expect(!lowered.contains("%2f") && !lowered.contains("%5c") && !lowered.contains("%00") && !lowered.contains("%2e"), "\(raw) → \(target.path)")
            let segments = target.path.split(separator: "/", omittingEmptySubsequences: false)
            #expect(!segments.contains(".") && !segments.contains(".."), "\(raw) → \(target.path)")
            // What async-http-client puts on the request line for this URL (its `URL.uri`): the same bytes.
            #expect(Self.asyncHTTPClientURI("http://upstream.example/app" + forwarded) == "/app" + forwarded, "\(raw): the client would send another target")
        }
        #expect(accepted > 500, "the generator rarely made an acceptable target: \(accepted)")
    }

    @Test("generated paths: the shortcut for a path that is already normalized gives what the full normalization gives, refusals included")
    func shortcutAgreesWithTheLoop() {
        // Pieces that make plain paths most of the time, and every kind of path the shortcut must leave to the loop.
        let pieces = ["/", "/", "a", "b", ".", "..", ".a", ";", ":", "@", "~", "-", "=", "%2e", "%41", "%2F", "%", "\\", "{", "%c3%a9", "//"]
        var random = SplitMix64(seed: 0x7061_7468_7331)
        var plain = 0
        for _ in 0..<20_000 {
            let count = Int(random.next() % 8) + 1
            let path = "/" + random.joined(pieces, count: count)
            let bytes = Array(path.utf8)[...]
            let quick = Result { () throws(RequestTarget.Refusal) in try RequestTarget.normalizedPath(bytes) }
            let full = Result { () throws(RequestTarget.Refusal) in try RequestTarget.normalizedPath(bytes, shortcut: false) }
            #expect(quick == full, "\(path)")
            if case .success(let normalized) = full, normalized == path { plain += 1 }
        }
        #expect(plain > 1_000, "the generator rarely made a path that is already normalized: \(plain)")
    }

    /// async-http-client 1.37's `URL.uri` (`HTTPHandler.swift`), which builds the request line of every request it sends.
    static func asyncHTTPClientURI(_ string: String) -> String? {
        guard let url = URL(string: string) else { return nil }
        let path = url.path.isEmpty ? "/" : (URLComponents(url: url, resolvingAgainstBaseURL: true)?.percentEncodedPath ?? url.path)
        return url.query.map { path + "?" + $0 } ?? path
    }
}
