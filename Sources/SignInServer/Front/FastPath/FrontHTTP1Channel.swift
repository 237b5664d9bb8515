import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypesHTTP1

/// Hummingbird's own HTTP/1 channel, with the byte path (`RawFrontPath`) ahead of its codecs: siwa's connections
/// when it stands alone or behind a proxy (`--upstream` has `UpstreamWebSocketChannel`, which does the same). What
/// memory decides is answered there (the checks, Envoy's HTTP check, siwa's pages) or, in front of an upstream, passed
/// to it; every other request goes to the codecs as it came, one at a time (`SaysConnectionOutcome` tells the byte
/// path when each answer has ended). Without `fastPath` (the plain port that only redirects to HTTPS,
/// `buildRedirectRouter`), the codecs read every request, under the same limits on the client's time.
struct FrontHTTP1Channel: ServerChildChannel {
    let inner: HTTP1Channel
    let fastPath: BytePathAnswers?
    let limits: ClientLimits
    let metrics: ServerMetrics

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<HTTP1Channel.Value> {
        let fastPath = fastPath
        let limits = limits
        let metrics = metrics
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(ClientTimer(limits: limits, metrics: metrics))
            if let fastPath { try channel.pipeline.syncOperations.addHandler(RawFrontPath(answers: fastPath)) }
        }.flatMap { inner.setup(channel: channel, logger: logger) }.flatMapThrowing { value in
            // Between NIO's HTTP/1 codec and Hummingbird's conversion to HTTP types, which drops the version.
            let codec = try channel.pipeline.syncOperations.context(handlerType: HTTP1ToHTTPServerCodec.self)
            try channel.pipeline.syncOperations.addHandler(SaysConnectionOutcome(countsHeads: true), position: .before(codec.handler))
            return value
        }
    }

    func handle(value: HTTP1Channel.Value, logger: Logger) async {
        await inner.handle(value: value, logger: logger)
    }
}
