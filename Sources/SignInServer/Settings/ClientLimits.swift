/// `client_header_timeout_ms` and `client_idle_timeout_ms` (`ClientTimer`).
public struct ClientLimits: Sendable, Equatable {
    /// How long a request head may take to arrive whole, from its first byte.
    public var headerTimeoutMS: Int = 10_000
    /// How long a kept-alive connection may wait for its next request.
    public var idleTimeoutMS: Int = 75_000

    public init() {}
}
