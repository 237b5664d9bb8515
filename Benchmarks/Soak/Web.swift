import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// One answer, body read whole (the site's pages are small).
struct Answer {
    var status: Int
    var headers: HTTPHeaders
    var body: String
    /// How long the request took, in milliseconds.
    var milliseconds: Double

    /// The value of the cookie `name` this answer sets (`name=value; …`), if it sets it to a non-empty value.
    func cookie(_ name: String) -> String? {
        for header in headers["set-cookie"] {
            let pair = header.split(separator: ";", maxSplits: 1)[0]
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2 else { continue }
            let cookieName = parts[0].trimmingCharacters(in: .whitespaces)
            if cookieName == name || cookieName == "__Host-" + name {
                let value = String(parts[1])
                return value.isEmpty ? nil : value
            }
        }
        return nil
    }

    /// The name of the cookie `name` as the site sets it (plain on HTTP, `__Host-` prefixed on HTTPS).
    func cookieName(_ name: String) -> String {
        headers["set-cookie"].contains { $0.hasPrefix("__Host-" + name + "=") } ? "__Host-" + name : name
    }

    /// The heading of the site's error page (`<h1 id="error-title">`), or nil when the body is not one.
    var errorHeading: String? {
        Self.between(body, "id=\"error-title\">", "</h1>")
    }

    /// The `sub` the session page shows.
    var sessionSubject: String? {
        Self.between(body, "<dd id=\"sub\"><code>", "</code>")
    }

    /// The name the session page shows.
    var sessionName: String? {
        Self.between(body, "<dd id=\"name\">", "</dd>")
    }

    /// Whether the session page shows the "email forwarding disabled" notice.
    var showsForwardingDisabled: Bool {
        body.contains("id=\"forwarding-disabled\"")
    }

    static func between(_ text: String, _ start: String, _ end: String) -> String? {
        guard let lower = text.range(of: start), let upper = text.range(of: end, range: lower.upperBound..<text.endIndex) else { return nil }
        return String(text[lower.upperBound..<upper.lowerBound])
    }
}

/// The driver's HTTP client: no redirects followed, cookies handled by the caller, explicit timeout on every call.
struct Web: Sendable {
    let client: HTTPClient
    let timeout: TimeAmount

    init(connectionsPerHost: Int, timeoutSeconds: Int) {
        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            timeout: .init(connect: .seconds(5), read: .seconds(Int64(timeoutSeconds))),
            connectionPool: .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: connectionsPerHost)
        )
        configuration.httpVersion = .http1Only
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        timeout = .seconds(Int64(timeoutSeconds))
    }

    func send(_ method: HTTPMethod, _ url: String, headers: [(String, String)] = [], body: String? = nil) async throws -> Answer {
        var request = HTTPClientRequest(url: url)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(string: body)) }
        let started = ContinuousClock.now
        let startedAt = epochNow()
        func elapsed() -> Double {
            let duration = ContinuousClock.now - started
            return Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
        }
        do {
            let response = try await client.execute(request, timeout: timeout)
            let bytes = try await response.body.collect(upTo: 4 << 20)
            return Answer(status: Int(response.status.code), headers: response.headers, body: String(buffer: bytes), milliseconds: elapsed())
        } catch {
            throw SendFailure(underlying: error, startedAt: startedAt, milliseconds: elapsed())
        }
    }

    func shutdown() async throws {
        try await client.shutdown()
    }
}

/// A request that got no answer: what went wrong, when it was sent and how long it waited.
struct SendFailure: Error {
    var underlying: any Error
    /// Unix epoch seconds.
    var startedAt: Double
    var milliseconds: Double
}

/// `application/x-www-form-urlencoded`, as a browser encodes a form_post.
enum Form {
    private static let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8)

    static func encode(_ fields: [String: String]) -> String {
        fields.sorted { $0.key < $1.key }.map { component($0.key) + "=" + component($0.value) }.joined(separator: "&")
    }

    static func component(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            if unreserved.contains(byte) {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                out += String(format: "%%%02X", byte)
            }
        }
        return out
    }
}

/// A short, secret-free label for an error (no URLs with codes or states, no cookies).
func describe(_ error: any Error) -> String {
    if let failure = error as? SendFailure { return describe(failure.underlying) }
    if let client = error as? HTTPClientError { return "\(client)" }
    let text = String(describing: type(of: error)) + ": " + String(describing: error)
    return String(text.prefix(120))
}

/// Now as Unix epoch seconds.
func epochNow() -> Double {
    Date().timeIntervalSince1970
}
