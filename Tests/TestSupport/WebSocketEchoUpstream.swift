import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore
import Synchronization

/// How many requests the echo upstream received, WebSocket handshakes included: to see that a proxy contacted it,
/// or did not.
public final class UpstreamTally: Sendable {
    private let count = Mutex(0)

    public init() {}

    /// Requests and handshakes so far.
    public var requests: Int { count.withLock { $0 } }

    func record() {
        count.withLock { $0 += 1 }
    }
}

/// Runs the echo upstream of `withEchoUpstream`, able to take WebSocket upgrades too, on 127.0.0.1 on a free port
/// while `body` runs with that port and the tally of what reached it.
///
/// - Plain HTTP requests are answered as by `withEchoUpstream`.
/// - A WebSocket handshake on any path switches protocols, except on `/ws-refused` (answered `400`, as
///   hummingbird-websocket refuses). Of the subprotocols offered in `Sec-WebSocket-Protocol`, the first of
///   `echo.v2` and `echo.v1` is chosen. Its `101` also tries to set siwa's session cookie (`Set-Cookie:
///   siwa_session=planted`), which a proxy in front must not pass on.
/// - Once open, its first message is the handshake as an `EchoedRequest` in JSON (text); then every text and binary
///   message is sent back as it came; the text `close:N` makes it close with code N.
public func withWebSocketEchoUpstream<T: Sendable>(_ body: (_ port: Int, _ tally: UpstreamTally) async throws -> T) async throws -> T {
    var logger = Logger(label: "echo-upstream")
    logger.logLevel = .critical
    let tally = UpstreamTally()
    let webSockets = Router(context: BasicWebSocketRequestContext.self)
    webSockets.ws("**", shouldUpgrade: { request, _ in
        tally.record()
        guard request.uri.path != "/ws-refused" else { return .dontUpgrade }
        let offered = request.headers[values: .secWebSocketProtocol].flatMap { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } }
        let planted: HTTPFields = [.setCookie: "siwa_session=planted; Path=/"]
        guard let chosen = ["echo.v2", "echo.v1"].first(where: { offered.contains($0) }) else { return .upgrade(planted) }
        return .upgrade(planted + [.secWebSocketProtocol: chosen])
    }, onUpgrade: { inbound, outbound, context in
        let handshake = EchoedRequest(
            method: context.request.method.rawValue, path: context.request.head.path ?? "", headers: EchoUpstream.seen(context.request),
            bodyBytes: 0, bodyMatchesPattern: true
        )
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try await outbound.write(.text(String(decoding: try encoder.encode(handshake), as: UTF8.self)))
        for try await message in inbound.messages(maxSize: 1 << 20) {
            switch message {
            case .text(let text) where text.hasPrefix("close:"):
                try await outbound.close(.init(codeNumber: Int(text.dropFirst(6)) ?? 1000), reason: "asked to")
                return
            case .text(let text):
                try await outbound.write(.text(text))
            case .binary(let bytes):
                try await outbound.write(.binary(bytes))
            }
        }
    })
    return try await withLiveApplication({ onRunning in
        Application(
            responder: CallbackResponder<BasicRequestContext> { request, context in
                tally.record()
                return try await EchoUpstream.respond(to: request, context: context)
            },
            server: .http1WebSocketUpgrade(webSocketRouter: webSockets),
            configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) },
            logger: logger
        )
    }) { port in try await body(port, tally) }
}
