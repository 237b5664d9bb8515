import NIOCore

/// The server's graceful shutdown began while a connection was still being set up (its TLS handshake, or the first
/// bytes that tell HTTP/1.1 from h2c). NIO's `ChannelShouldQuiesceEvent` then passed a pipeline without the protocol's
/// handlers and reached none of them: the connection was never told, and held the shutdown until a limit of the
/// client's time ended it (an HTTP/2 stream kept open, for as long as the client kept it). Once the protocol's
/// handlers are in place this is said to them in its stead (`SetupShutdownMemory`). The client, whose first request is
/// on its way, is answered that request and no other, as Go's server treats a new connection during its shutdown:
/// over HTTP/1.1 as if it had said `Connection: close` (`RawFrontPath`); over HTTP/2 with GOAWAY once its first stream
/// opens, the connection ending with its streams (`ConnectionWatch`). One that sends no request within `grace` (the
/// time it had to send its hello or first bytes) is closed.
struct ShutdownDuringSetup: Sendable {
    let grace: TimeAmount
}
