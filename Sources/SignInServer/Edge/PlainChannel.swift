import Hummingbird
import HummingbirdCore
import Logging
import NIOCore

/// A connection to siwa's plain port: HTTP/1.1 (`http1`: the byte path, then Hummingbird's codecs), or HTTP/2 with
/// prior knowledge (h2c, RFC 9113 §3.3) when its first bytes are the HTTP/2 connection preface. Envoy's gRPC
/// `ext_authz` client speaks h2c to siwa (`envoy.service.auth.v3.Authorization/Check`), as do gRPC clients and
/// load balancers inside a cluster; both versions reach the one door (`FrontDoor`) with the same requests, as on the
/// HTTPS port (`EdgeChannel`), under the same limits.
struct PlainChannel<HTTP1: ServerChildChannel>: ServerChildChannel {
    let http1: HTTP1
    let http2: ClientHTTP2
    /// How long a client has to send the first bytes that tell the version (the header time limit).
    let firstBytesTimeout: TimeAmount

    enum Spoken: Sendable {
        case http1(HTTP1.Value)
        case http2(ClientHTTP2.Value)
    }

    struct Value: ServerChildChannelValue {
        let spoken: EventLoopFuture<Spoken>
        let channel: any Channel
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let promise = channel.eventLoop.makePromise(of: Spoken.self)
        let http1 = http1
        let http2 = http2
        return channel.eventLoop.makeCompletedFuture {
            let sniffer = PrefaceSniffer(chosen: promise) { isHTTP2, channel in
                if isHTTP2 {
                    return http2.setup(channel: channel, logger: logger).map { .http2($0) }
                }
                return http1.setup(channel: channel, logger: logger).map { .http1($0) }
            }
            try channel.pipeline.syncOperations.addHandler(sniffer)
            // A shutdown that begins before the version is known is said to its handlers once they are in place.
            try SetupShutdownMemory.install(on: channel, grace: firstBytesTimeout, until: promise.futureResult)
            let deadline = channel.eventLoop.scheduleTask(in: firstBytesTimeout) { channel.close(promise: nil) }
            promise.futureResult.whenComplete { _ in deadline.cancel() }
            return Value(spoken: promise.futureResult, channel: channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.spoken.get() {
            case .http1(let inner): await http1.handle(value: inner, logger: logger)
            case .http2(let inner): await http2.handle(value: inner, logger: logger)
            }
        } catch {
            logger.debug("connection ended before its first request", metadata: ["reason": "\(error)"])
        }
    }
}

/// Reads a connection's first bytes until they tell HTTP/2's preface (`PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`) from
/// anything else (at the first byte that differs), then lets `install` build the pipeline for that version, hands on
/// what it read, and leaves.
final class PrefaceSniffer<Chosen: Sendable>: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    /// The HTTP/2 connection preface.
    static var preface: [UInt8] { Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8) }

    private let install: (_ isHTTP2: Bool, _ channel: any Channel) -> EventLoopFuture<Chosen>
    /// Completed with what `install` built, or failed when the connection ends first.
    private let chosen: EventLoopPromise<Chosen>
    private var read: ByteBuffer?
    private var decided = false

    init(chosen: EventLoopPromise<Chosen>, install: @escaping (_ isHTTP2: Bool, _ channel: any Channel) -> EventLoopFuture<Chosen>) {
        self.chosen = chosen
        self.install = install
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        // Removed before it decided (the connection closed): no version will be spoken.
        if !decided {
            decided = true
            chosen.fail(ChannelError.inputClosed)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var incoming = unwrapInboundIn(data)
        guard !decided else {
            context.fireChannelRead(data)
            return
        }
        if read == nil { read = incoming } else { read?.writeBuffer(&incoming) }
        guard let buffer = read else { return }
        let preface = Self.preface
        let count = min(buffer.readableBytes, preface.count)
        let seen = buffer.getBytes(at: buffer.readerIndex, length: count) ?? []
        let matches = seen == Array(preface[..<count])
        guard !matches || count == preface.count else { return }
        decide(isHTTP2: matches, context: context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !decided {
            decided = true
            chosen.fail(ChannelError.inputClosed)
        }
        context.fireChannelInactive()
    }

    private func decide(isHTTP2: Bool, context: ChannelHandlerContext) {
        decided = true
        let pending = read
        read = nil
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let chosen = chosen
        install(isHTTP2, context.channel).hop(to: context.eventLoop).whenComplete { result in
            let (handler, context) = bound.value
            switch result {
            case .success(let value):
                chosen.succeed(value)
                if let pending { context.fireChannelRead(handler.wrapInboundOut(pending)) }
                context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            case .failure(let error):
                chosen.fail(error)
                context.close(promise: nil)
            }
        }
    }
}
