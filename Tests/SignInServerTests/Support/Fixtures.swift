import AppleIDEmulator
import AppleSignIn
import Foundation
import HTTPTypes
import HummingbirdTesting
import JOSE

/// Values every suite shares: return URLs, the emulator's test users, the strings a person reads.
enum Fixtures {
    /// Local mode's return URL as `app.test(.router)` sees the site (its requests carry the authority `localhost`).
    static let localReturnURL = "http://localhost/auth/apple/callback"
    /// An HTTPS return URL, as in Apple mode.
    static let secureReturnURL = "https://app.example.com/auth/apple/callback"
    /// What a browser's navigation to a page asks for (a fetch or an API client asks otherwise).
    static let browser: HTTPFields = [.accept: "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"]

    static let ada = "000123.a1b2c3d4e5f60718293a4b5c6d7e8f90.1234"
    static let lilei = "000456.0f1e2d3c4b5a69788796a5b4c3d2e1f0.5678"
    static let grace = "000789.9a8b7c6d5e4f30211203f4e5d6c7b8a9.9012"
    static let adaEmail = "ada@example.com"
    static let adaRelay = "x7kq2m9p4t@privaterelay.appleid.com"

    /// Headings of the pages, as a person reads them (English).
    enum Heading {
        static let signIn = "Sign in"
        static let session = "You are signed in"
        static let cancelled = "Sign-in cancelled"
        static let expired = "This sign-in link has expired or was already used"
        static let malformed = "The answer from Apple was incomplete"
        static let notVerified = "Apple's answer could not be verified"
        static let unavailable = "Apple could not be reached"
        static let misconfigured = "Sign in with Apple is not set up correctly"
        static let tooLarge = "The sign-in request was too large"
        static let csrf = "This form has expired"
        static let notFound = "Page not found"
        static let signedOut = "You are not signed in"
    }

    /// The query string of `url` as ordered, decoded pairs.
    static func queryPairs(_ url: String) -> [(String, String)] {
        guard let query = url.split(separator: "?", maxSplits: 1).dropFirst().first else { return [] }
        return query.split(separator: "&").map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = try! FormEncoding.decodeComponent(Array(parts[0].utf8))
            let value = parts.count > 1 ? try! FormEncoding.decodeComponent(Array(parts[1].utf8)) : ""
            return (name, value)
        }
    }

    /// The query of `url` as a dictionary.
    static func query(_ url: String) -> [String: String] {
        Dictionary(queryPairs(url), uniquingKeysWith: { $1 })
    }

    /// The hidden inputs of a page's forms, by name (HTML entities decoded).
    static func hiddenFields(_ html: String) -> [String: String] {
        let regex = try! NSRegularExpression(pattern: #"<input type="hidden" name="([^"]+)" value="([^"]*)">"#)
        var fields: [String: String] = [:]
        for match in regex.matches(in: html, range: NSRange(html.startIndex..., in: html)) {
            guard let name = Range(match.range(at: 1), in: html), let value = Range(match.range(at: 2), in: html) else { continue }
            fields[String(html[name])] = TestResponse.unescapeHTML(String(html[value]))
        }
        return fields
    }
}

extension Fixtures {
    /// The audit file at `path` once it holds `expected` (siwa writes the audit trail from a queue, after the answer
    /// that recorded the event may have reached the test), or as it is after `timeout`.
    static func audit(at path: String, holding expected: String, timeout: Duration = .seconds(15)) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        while true {
            let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            if text.contains(expected) || ContinuousClock.now >= deadline { return text }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
}
