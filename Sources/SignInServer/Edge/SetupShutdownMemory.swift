import NIOCore

/// First in the pipeline of a connection whose protocol is not chosen yet (`EdgeChannel`, `PlainChannel`): remembers a
/// graceful shutdown that began meanwhile, which no handler of the protocol was there to hear, and once those handlers
/// are in place says it to them (`ShutdownDuringSetup`), then leaves. A client that ends its side before sending a
/// byte (a port check, a load balancer's probe) will never send a hello or a request: its connection is closed then,
/// not held until the handshake's time limit (which also held a shutdown that long).
final class SetupShutdownMemory: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer

    private let grace: TimeAmount
    private var shutdownBegan = false
    private var bytesCame = false

    /// Adds the memory to `channel`'s pipeline, first, until `setUp` (the protocol's handlers in place) completes.
    /// `grace`: how long the client then has to send its first request, when the shutdown began before.
    static func install<T>(on channel: any Channel, grace: TimeAmount, until setUp: EventLoopFuture<T>) throws {
        let memory = SetupShutdownMemory(grace: grace)
        try channel.pipeline.syncOperations.addHandler(memory, position: .first)
        let bound = NIOLoopBound(memory, eventLoop: channel.eventLoop)
        setUp.whenSuccess { _ in
            let memory = bound.value
            if memory.shutdownBegan { channel.pipeline.fireUserInboundEventTriggered(ShutdownDuringSetup(grace: memory.grace)) }
            channel.pipeline.syncOperations.removeHandler(memory, promise: nil)
        }
    }

    private init(grace: TimeAmount) {
        self.grace = grace
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        bytesCame = true
        context.fireChannelRead(data)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent { shutdownBegan = true }
        if event as? ChannelEvent == .inputClosed, !bytesCame { return context.close(promise: nil) }
        context.fireUserInboundEventTriggered(event)
    }
}
