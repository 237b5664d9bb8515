import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// W3C WebDriver over HTTP/JSON to one chromedriver: sends a command, returns the answer's `value`.
struct WebDriverConnection: Sendable {
    /// chromedriver's base URL, e.g. `http://127.0.0.1:9515`.
    let endpoint: String
    let httpClient: HTTPClient

    /// Sends `body` (or `{}`) to `path` and returns the `value` member of the answer, throwing on a WebDriver error.
    @discardableResult
    func command(_ method: HTTPMethod, _ path: String, _ body: TestJSON? = nil, timeout: TimeAmount = .seconds(60)) async throws -> TestJSON {
        var request = HTTPClientRequest(url: endpoint + path)
        request.method = method
        if method == .POST {
            request.headers.add(name: "Content-Type", value: "application/json; charset=utf-8")
            request.body = .bytes(ByteBuffer(bytes: try JSONEncoder().encode(body ?? [:])))
        }
        let response: HTTPClientResponse
        do {
            response = try await httpClient.execute(request, timeout: timeout)
        } catch {
            throw EndToEndError("WebDriver \(method) \(path): chromedriver did not answer: \(error)")
        }
        let bytes = try await response.body.collect(upTo: 64 << 20)
        let answer = try? JSONDecoder().decode(TestJSON.self, from: Data(buffer: bytes))
        guard (200..<300).contains(response.status.code) else {
            throw EndToEndError.command(method.rawValue, path, status: response.status.code, value: answer?["value"])
        }
        return answer?["value"] ?? .null
    }

    /// Whether chromedriver says it is ready for new sessions.
    func isReady() async -> Bool {
        (try? await command(.GET, "/status", timeout: .seconds(2)))?["ready"]?.bool == true
    }
}
