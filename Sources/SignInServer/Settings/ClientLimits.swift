/// `client_header_timeout_ms`, `client_idle_timeout_ms`, `client_body_timeout_ms`, `client_send_timeout_ms` and `shutdown_timeout_ms`
/// (`ClientTimer`; over HTTP/2 the body's limit per stream, `HTTP2StreamBridge`).
public struct ClientLimits: Sendable, Equatable {
    /// How long a request head may take to arrive whole, from its first byte.
    public var headerTimeoutMS: Int = Self.defaultHeaderTimeoutMS
    /// How long a kept-alive connection may wait for its next request.
    public var idleTimeoutMS: Int = Self.defaultIdleTimeoutMS
    /// How long a request body being read may go without a byte (nginx's `client_body_timeout`): counted only while
    /// siwa asks for more of it, so an upload held back by a slow upstream is not cut.
    public var bodyTimeoutMS: Int = Self.defaultBodyTimeoutMS
    /// How long an answer held back by a client that takes none of it may wait (nginx's `send_timeout`), over
    /// HTTP/1.1; HTTP/2's streams have `h2_stall_timeout_ms`.
    public var sendTimeoutMS: Int = Self.defaultSendTimeoutMS
    /// How long answers under way may go on once a graceful shutdown (SIGTERM) has begun, on either HTTP version: then
    /// their connections are closed, so that an answer without end (server-sent events, a long download) does not
    /// hold the shutdown (nginx's `worker_shutdown_timeout`, Envoy's drain time).
    public var shutdownTimeoutMS: Int = Self.defaultShutdownTimeoutMS
    /// The keys' defaults, each written only here (the limits, `siwa serve`'s parse and the configuration reference
    /// read them).
    public static let defaultHeaderTimeoutMS = 10_000
    public static let defaultIdleTimeoutMS = 75_000
    public static let defaultBodyTimeoutMS = 60_000
    public static let defaultSendTimeoutMS = 60_000
    public static let defaultShutdownTimeoutMS = 30_000

    public init() {}
}
