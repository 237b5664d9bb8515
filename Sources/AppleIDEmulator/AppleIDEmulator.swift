import AsyncHTTPClient
import Crypto
import Foundation
import Hummingbird
import JOSE
import Logging
import NIOCore
import Synchronization

/// A local stand-in for appleid.apple.com: authorize (consent page), token, keys, revoke, user migration,
/// server-to-server notifications, and fault injection, behaving as APPLE.md describes.
public final class AppleIDEmulator: Sendable {
    /// The configuration it was started with.
    public let configuration: EmulatorConfiguration
    let state: EmulatorState
    let logger: Logger
    let httpClient: HTTPClient
    private let baseURLBox = Mutex<String?>(nil)

    /// Creates an emulator with `initialKeys` RSA signing keys (the newest signs).
    public init(configuration: EmulatorConfiguration = .defaults(), initialKeys: Int = 2, httpClient: HTTPClient = .shared, logger: Logger = Logger(label: "siwa.emulator")) throws {
        self.configuration = configuration
        self.state = try EmulatorState(initialKeys: max(1, initialKeys), retiredKeyGrace: TimeInterval(configuration.retiredKeyGrace))
        self.httpClient = httpClient
        self.logger = logger
    }

    /// The emulator's base URL once known (set when its server starts listening).
    public var baseURL: String? { baseURLBox.withLock { $0 } }

    /// Records the address it listens on (the endpoints of its discovery document; the issuer only when asked).
    public func setBaseURL(_ url: String) {
        var trimmed = url
        while trimmed.hasSuffix("/") { trimmed.removeLast() }
        baseURLBox.withLock { $0 = trimmed }
    }

    /// The `iss` of everything it signs: Apple's unless the configuration names another (or `"self"`).
    public var issuer: String {
        switch configuration.issuer {
        case nil: EmulatorConfiguration.appleIssuer
        case EmulatorConfiguration.ownURLIssuer?: baseURL ?? "http://127.0.0.1"
        case let fixed?: fixed
        }
    }

    func client(_ clientID: String) -> EmulatorConfiguration.Client? {
        configuration.clients.first { $0.clientID == clientID }
    }

    func user(_ sub: String) -> EmulatorConfiguration.User? {
        configuration.users.first { $0.sub == sub }
    }

    /// The router with every endpoint, for embedding or for `app.test(.router)`.
    public func buildRouter() -> Router<EmulatorContext> {
        let router = Router(context: EmulatorContext.self)
        addAppleRoutes(to: router)
        addStaticRoutes(to: router)
        addAdminRoutes(to: router.group("emulator/admin"))
        return router
    }

    /// An application listening on `host:port` (port 0 picks a free one); sets the base URL when running.
    public func buildApplication(host: String = "127.0.0.1", port: Int = 9090, onRunning: (@Sendable (Int) async -> Void)? = nil) -> some ApplicationProtocol {
        Application(
            router: buildRouter(),
            configuration: .init(address: .hostname(host, port: port), serverName: "siwa-emulator"),
            onServerRunning: { [self] channel in
                let boundPort = channel.localAddress?.port ?? port
                let shownHost = host == "0.0.0.0" ? "127.0.0.1" : host
                if baseURL == nil { setBaseURL("http://\(shownHost):\(boundPort)") }
                await onRunning?(boundPort)
            },
            logger: logger
        )
    }

    private func addStaticRoutes(to router: Router<EmulatorContext>) {
        router.get("emulator/static/style.css") { _, _ in Self.staticFile(EmulatorPages.css, type: "text/css") }
        router.get("emulator/static/autosubmit.js") { _, _ in Self.staticFile(EmulatorPages.autosubmit, type: "text/javascript") }
        router.get("emulator/static/web-message.js") { _, _ in Self.staticFile(EmulatorPages.webMessageScript, type: "text/javascript") }
        router.get("healthz") { _, _ in "ok" }
    }

    private static func staticFile(_ text: String, type: String) -> Response {
        Response(status: .ok, headers: [.contentType: "\(type); charset=utf-8", .cacheControl: "max-age=3600"], body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    /// Applies an injected fault, if any: returns the response to send instead, or nil to go on.
    func applyFault(_ endpoint: EmulatorEndpoint, context: EmulatorContext) async throws -> Response? {
        guard let fault = await state.takeFault(for: endpoint) else { return nil }
        if let latency = fault.latencyMS, latency > 0 {
            try await Task.sleep(for: .milliseconds(latency))
        }
        if fault.drop == true {
            try? await context.channel?.close()
            throw HTTPError(.internalServerError, message: "connection dropped by fault injection")
        }
        if let status = fault.status {
            return Response(status: .init(code: status), headers: [.contentType: "text/plain"], body: .init(byteBuffer: ByteBuffer(string: "emulated failure \(status)")))
        }
        if fault.malformed == true {
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "{\"this is not\": what Apple sends")))
        }
        return nil
    }
}

/// How the emulator writes JSON: sorted keys, slashes unescaped, ISO 8601 dates.
func emulatorJSON(_ value: some Encodable) throws -> Data {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    encoder.dateEncodingStrategy = .iso8601
    return try encoder.encode(value)
}

/// A JSON response with Apple's content type.
func jsonResponse(_ value: some Encodable, status: HTTPResponse.Status = .ok, headers extra: HTTPFields = [:]) -> Response {
    jsonResponse(data: (try? emulatorJSON(value)) ?? Data("{}".utf8), status: status, headers: extra)
}

/// A response of JSON bytes already written, with Apple's content type; `no-store` unless `extra` says otherwise.
func jsonResponse(data: Data, status: HTTPResponse.Status = .ok, headers extra: HTTPFields = [:]) -> Response {
    var headers: HTTPFields = [.contentType: "application/json;charset=UTF-8", .cacheControl: "no-store"]
    // A field given by the caller replaces the default (the key set is cacheable, not no-store).
    for field in extra { headers[field.name] = field.value }
    return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
}

/// Apple's error answer: HTTP 400 `{"error": code}`.
func appleError(_ code: String) -> Response {
    jsonResponse(["error": code], status: .badRequest)
}
