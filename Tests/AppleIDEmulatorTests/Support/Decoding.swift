import AppleSignIn
import Foundation
import JOSE
import Testing
import TestSupport

/// Reading what a client receives: JWT parts, HTML pages, Apple's error codes.
enum Decode {
    /// The header of a compact JWS as a JSON object.
    static func jwtHeader(_ token: String) -> [String: Any] {
        json(Base64URL.decode(token.split(separator: ".")[0])!)
    }

    /// The claims of a compact JWS as a JSON object (unverified).
    static func jwtClaims(_ token: String) -> [String: Any] {
        json(Base64URL.decode(token.split(separator: ".")[1])!)
    }

    static func json(_ data: Data) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:]
    }

    static func json(_ text: String) -> [String: Any] {
        json(Data(text.utf8))
    }

    /// The `user` JSON Apple sends on the first authorization.
    static func user(_ text: String?) -> (firstName: String?, lastName: String?, email: String?)? {
        guard let text else { return nil }
        let object = json(text)
        let name = object["name"] as? [String: Any]
        return (name?["firstName"] as? String, name?["lastName"] as? String, object["email"] as? String)
    }

    /// The Apple error code shown on the emulator's authorize error page.
    static func errorPageCode(_ html: String) -> String? {
        guard let range = html.range(of: #"id="error-code">([^<]*)<"#, options: .regularExpression) else { return nil }
        let match = html[range]
        return String(match.dropFirst(#"id="error-code">"#.count).dropLast())
    }

    /// The `action` of the first form and its hidden fields, HTML-unescaped.
    static func form(_ html: String) -> (method: String?, action: String?, fields: [String: String]) {
        let method = firstCapture(#"<form method="([^"]*)""#, in: html)
        let action = firstCapture(#"<form method="[^"]*" action="([^"]*)""#, in: html).map(unescapeHTML)
        var fields: [String: String] = [:]
        let regex = try! NSRegularExpression(pattern: #"<input type="hidden" name="([^"]*)" value="([^"]*)">"#)
        let nsRange = NSRange(html.startIndex..., in: html)
        for match in regex.matches(in: html, range: nsRange) {
            let name = String(html[Range(match.range(at: 1), in: html)!])
            let value = String(html[Range(match.range(at: 2), in: html)!])
            fields[unescapeHTML(name)] = unescapeHTML(value)
        }
        return (method, action, fields)
    }

    private static func firstCapture(_ pattern: String, in text: String) -> String? {
        HTMLText.capture(pattern, in: text)
    }

    static func unescapeHTML(_ text: String) -> String {
        HTMLText.unescape(text)
    }

    /// The query (or fragment) of a redirect as a dictionary.
    static func parameters(_ text: String) -> [String: String] {
        var result: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = try! FormEncoding.decodeComponent(Array(parts[0].utf8))
            result[name] = parts.count > 1 ? try! FormEncoding.decodeComponent(Array(parts[1].utf8)) : ""
        }
        return result
    }
}

/// Runs `body` and returns the `AppleIDClientError` it threw (nil when it succeeded).
/// Any other error is recorded as a test failure.
func appleIDClientError(_ body: () async throws -> Void) async -> AppleIDClientError? {
    do {
        try await body()
        return nil
    } catch let error as AppleIDClientError {
        return error
    } catch {
        Issue.record(error, "expected an AppleIDClientError")
        return nil
    }
}

/// Runs `body` and returns the `IdentityTokenError` it threw (nil when it succeeded).
/// Any other error is recorded as a test failure.
func identityTokenError(_ body: () async throws -> Void) async -> IdentityTokenError? {
    do {
        try await body()
        return nil
    } catch let error as IdentityTokenError {
        return error
    } catch {
        Issue.record(error, "expected an IdentityTokenError")
        return nil
    }
}
