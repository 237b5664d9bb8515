import AsyncHTTPClient
import NIOCore
import NIOHTTP1
import NIOSSL
import ServiceLifecycle

/// The built-in proxy's HTTP client, as a service of the application: shut down once the server has stopped.
/// It is its own, not the client siwa calls Apple with, because these settings are the client's, not a request's:
/// a proxy hands the upstream's redirects and encoded bodies on as they are (a client may follow or decompress
/// them) and reports a refused connection at once (502), where a client for Apple rightly retries for seconds.
struct UpstreamClient: Service {
    let settings: UpstreamSettings
    let client: HTTPClient
    /// The TLS of WebSockets to an `https` upstream (they do not go through `client`); nil for an `http` one.
    let webSocketTLS: NIOSSLContext?
    /// The byte path's connections to the upstream (`RawFrontPath`), with the same TLS as WebSockets.
    let rawPool: UpstreamPool<ByteBuffer>
    /// `upstream_max_connections`, for every carrier.
    let admission: UpstreamAdmission
    /// `upstream_http2`: the upstream's HTTP/2 connection; nil for HTTP/1.1.
    let http2: UpstreamHTTP2?

    init(settings: UpstreamSettings) {
        self.settings = settings
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        configuration.decompression = .disabled
        // A connection that cannot even be opened in time counts as the upstream not answering in time (504).
        // An answer's body silent for upstream_idle_timeout_ms is ended (async-http-client counts it once the request
        // has been sent whole, so an upload's own time does not count).
        configuration.timeout = .init(connect: Self.connectTimeout(settings), read: .milliseconds(Int64(settings.idleTimeoutMS)))
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: settings.maxConnections)
        configuration.connectionPool.retryConnectionEstablishment = false
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        // The system's trust roots, as the HTTP client uses; loading them fails only on a broken system, and then a
        // WebSocket to the upstream is answered 502 (logged) while everything else works.
        webSocketTLS = settings.usesTLS ? try? NIOSSLContext(configuration: .makeClientConfiguration()) : nil
        rawPool = UpstreamPool(settings: settings, tls: webSocketTLS) { _ in }
        admission = UpstreamAdmission(limit: settings.maxConnections)
        http2 = settings.http2 ? UpstreamHTTP2(settings: settings) : nil
    }

    /// How long opening a connection to the upstream may take: `upstream_timeout_ms`, at most 10 s.
    static func connectTimeout(_ settings: UpstreamSettings) -> TimeAmount {
        .milliseconds(Int64(min(settings.timeoutMS, 10_000)))
    }

    func run() async throws {
        try? await gracefulShutdown()
        rawPool.closeAll()
        http2?.close()
        try await client.shutdown()
    }
}
