import Foundation
import Hummingbird
import Logging
import NIOCore

/// What the echo upstream saw of one request; its JSON answer.
public struct EchoedRequest: Codable, Sendable, Equatable {
    /// The method, e.g. `POST`.
    public var method: String
    /// The request target as received: path and query.
    public var path: String
    /// Every request header by lowercased name, values in the order received; `host` included.
    public var headers: [String: [String]]
    /// How many body bytes arrived.
    public var bodyBytes: Int
    /// Whether the body was `PatternedBytes` (true for an empty body): nothing lost, doubled or reordered.
    public var bodyMatchesPattern: Bool

    /// The values of header `name` (any case), none when it did not arrive.
    public func values(_ name: String) -> [String] {
        headers[name.lowercased()] ?? []
    }

    /// The echo's answer read back; the error shows what came instead (a proxy's error page, say).
    public init(json: ByteBuffer) throws {
        do {
            self = try JSONDecoder().decode(EchoedRequest.self, from: Data(json.readableBytesView))
        } catch {
            throw NotAnEchoError(description: "not an answer of the echo upstream (\(error)):\n\(String(buffer: json).prefix(2000))")
        }
    }

    init(method: String, path: String, headers: [String: [String]], bodyBytes: Int, bodyMatchesPattern: Bool) {
        self.method = method
        self.path = path
        self.headers = headers
        self.bodyBytes = bodyBytes
        self.bodyMatchesPattern = bodyMatchesPattern
    }
}

/// A body that should have been the echo upstream's JSON was something else, shown in the message.
struct NotAnEchoError: Error, CustomStringConvertible {
    let description: String
}

/// Runs the echo upstream on 127.0.0.1 on a free port while `body` runs with that port: the application a proxy
/// under test forwards to.
///
/// - Every method and path is answered `200` with an `EchoedRequest` in JSON. The request body is counted as it
///   streams in, never held whole.
/// - `/status/N` answers the echo with status N (and `Retry-After: 7` with 429).
/// - `GET /large?bytes=N` streams N bytes of `PatternedBytes` (with `Content-Length`), never held whole.
/// - `GET /events` answers server-sent events, a tick every 100 ms for a minute: an answer without end, as far as a
///   test can tell.
/// - Every answer carries `Set-Cookie: upstream=1` (to see that a proxy passes the upstream's cookies) and
///   `X-Echo-Path` with the request target (a header an auth subrequest's caller can copy, to see that it did).
/// - Under `/overreach/` it also answers with what a proxy must not hand on: `Connection` naming its own header
///   `X-Upstream-Hop`, that header, `Keep-Alive`, and `Set-Cookie` of siwa's session cookie under each of its names.
public func withEchoUpstream<T: Sendable>(_ body: (_ port: Int) async throws -> T) async throws -> T {
    var logger = Logger(label: "echo-upstream")
    logger.logLevel = .critical
    return try await withLiveApplication({ onRunning in
        Application(
            responder: CallbackResponder<BasicRequestContext> { request, context in try await EchoUpstream.respond(to: request, context: context) },
            configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) },
            logger: logger
        )
    }, body)
}

/// The echo upstream's one handler.
enum EchoUpstream {
    static let echoPath = HTTPFields.Element.Name("X-Echo-Path")!

    static func respond(to request: Request, context: BasicRequestContext) async throws -> Response {
        let target = request.head.path ?? ""
        var headers: HTTPFields = [.setCookie: "upstream=1", echoPath: target]
        if request.uri.path.hasPrefix("/overreach/") {
            headers.append(HTTPFields.Element(name: .connection, value: "X-Upstream-Hop"))
            headers.append(HTTPFields.Element(name: HTTPFields.Element.Name("X-Upstream-Hop")!, value: "1"))
            headers.append(HTTPFields.Element(name: HTTPFields.Element.Name("Keep-Alive")!, value: "timeout=5"))
            for name in ["siwa_session", "__Host-siwa_session", "__Secure-siwa_session"] {
                headers.append(HTTPFields.Element(name: .setCookie, value: "\(name)=planted; Path=/"))
            }
        }
        if request.method == .get, request.uri.path == "/events" {
            headers[.contentType] = "text/event-stream"
            return Response(status: .ok, headers: headers, body: ResponseBody { writer in
                for tick in 0..<600 {
                    try await writer.write(ByteBuffer(string: "data: \(tick)\n\n"))
                    try await Task.sleep(for: .milliseconds(100))
                }
                try await writer.finish(nil)
            })
        }
        if request.method == .get, request.uri.path == "/large" {
            guard let count = request.uri.queryParameters.get("bytes", as: Int.self), count >= 0 else {
                return Response(status: .badRequest, headers: headers)
            }
            headers[.contentType] = "application/octet-stream"
            return Response(status: .ok, headers: headers, body: ResponseBody(contentLength: count) { writer in
                for await chunk in PatternedBytes(count: count) {
                    try await writer.write(chunk)
                }
                try await writer.finish(nil)
            })
        }
        var received = 0
        var matches = true
        for try await buffer in request.body {
            matches = matches && PatternedBytes.matches(buffer, at: received)
            received += buffer.readableBytes
        }
        let echoed = EchoedRequest(method: request.method.rawValue, path: target, headers: seen(request), bodyBytes: received, bodyMatchesPattern: matches)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        headers[.contentType] = "application/json"
        // `/status/N`: the same echo, answered with status N (200 to 599).
        var status = HTTPResponse.Status.ok
        if request.uri.path.hasPrefix("/status/"), let code = Int(request.uri.path.dropFirst("/status/".count)), (200...599).contains(code) {
            status = HTTPResponse.Status(code: code)
            if code == 429 { headers[HTTPFields.Element.Name("Retry-After")!] = "7" }
        }
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: try encoder.encode(echoed))))
    }

    /// Every header of `request` by lowercased name, values in the order received; `host` included.
    static func seen(_ request: Request) -> [String: [String]] {
        var seen: [String: [String]] = [:]
        if let authority = request.head.authority {
            seen["host"] = [authority]
        }
        for field in request.headers {
            seen[field.name.canonicalName, default: []].append(field.value)
        }
        return seen
    }
}
