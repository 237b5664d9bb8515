import NIOCore
import NIOHPACK
import NIOHTTP2

/// Envoy's gRPC `Check` answered from memory on an HTTP/2 stream, before the stream becomes an HTTP/1.1 exchange
/// (`HTTP2StreamBridge`): the call's one message is gathered as it comes, and when memory lets the request through
/// (`ConnectionMemory.grpcCheckAnswer`, the verdict the handler gives) the `CheckResponse` is written as the call's
/// HEADERS, DATA and trailers at once, with no codecs, no request task, no HTTP/1.1 bytes. Anything else (another
/// path, a call memory does not decide, a message larger than `gathered`, trailers from the client) goes on as it came,
/// frame by frame, to the bridge and the handler (`ExtAuthzController.grpc`), which answer it as before.
///
/// The stream's other handlers (`rest`: the bridge, which puts the stream under the connection's watch, and the byte
/// path) are added behind this one only when they may be needed: for a stream that goes on, and for a call whose
/// message has not all come by the end of the read that brought its HEADERS (so that it is watched as every stream
/// is, as it always was). A call whose HEADERS and message come in one read, as Envoy sends them, and is answered here
/// has a pipeline of one handler, built and torn down with it (the stream's initializer 8,600 → 4,400 instructions a
/// call; most of a stream's cost is NIO's own child channel).
final class GRPCCheckFromMemory: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias InboundOut = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    /// The most of a call gathered before it is passed on: Envoy's `CheckRequest` without the request's body is a few
    /// kilobytes; one that carries the body (`with_request_body`) is the handler's.
    static let gathered = 64 * 1024
    /// An answer's HEADERS and trailers, the same for every call answered here.
    private static let answerHead = HPACKHeaders([(":status", "200"), ("content-type", "application/grpc")])
    private static let answerTrailers = HPACKHeaders([("grpc-status", String(EnvoyCheckMessages.GRPCStatus.ok.rawValue))])

    private enum State {
        /// The stream's HEADERS have not come.
        case head
        /// A `Check` call: its frames so far, and its message's bytes.
        case gathering(frames: [HTTP2Frame.FramePayload], body: ByteBuffer)
        /// Not answered here: every frame goes on.
        case passing
        /// Answered: what the client sends after is dropped.
        case answered
    }

    private var state = State.head
    private let memory: ConnectionMemory
    /// Makes the handlers a stream that goes on needs behind this one.
    private let rest: () throws -> [any ChannelHandler]
    /// Whether they are there.
    private var restAdded = false

    init(memory: ConnectionMemory, rest: @escaping () throws -> [any ChannelHandler]) {
        self.memory = memory
        self.rest = rest
    }

    /// The stream's other handlers behind this one, once; false (the stream closed) when the pipeline cannot take them.
    private func addRest(context: ChannelHandlerContext) -> Bool {
        guard !restAdded else { return true }
        restAdded = true
        do {
            try context.pipeline.syncOperations.addHandlers(try rest(), position: .after(self))
            return true
        } catch {
            context.close(promise: nil)
            return false
        }
    }

    /// The frames answered by no one here from now on: `frames` handed on in order to the stream's other handlers; the
    /// rest of the stream follows them.
    private func passOn(_ frames: [HTTP2Frame.FramePayload], context: ChannelHandlerContext) {
        state = .passing
        guard addRest(context: context) else { return }
        for frame in frames { context.fireChannelRead(wrapInboundOut(frame)) }
    }

    /// Whether a stream's request HEADERS are a `Check` call: `POST` to its path, `content-type: application/grpc…`.
    static func isCheck(_ headers: HPACKHeaders) -> Bool {
        headers.first(name: ":path") == EnvoyCheckMessages.path && headers.first(name: ":method") == "POST"
            && HTTP2StreamBridge.isGRPC(headers) && !headers.contains(name: ":protocol")
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch state {
        case .passing:
            context.fireChannelRead(data)
        case .answered:
            break
        case .head:
            guard case .headers(let headers) = frame, !headers.endStream, Self.isCheck(headers.headers) else {
                return passOn([frame], context: context)
            }
            state = .gathering(frames: [frame], body: context.channel.allocator.buffer(capacity: 1024))
        case .gathering(var frames, var body):
            switch frame {
            case .headers, .data: break
            // Not the request's content (a WINDOW_UPDATE, a PRIORITY), which the bridge does not read either.
            default: return
            }
            frames.append(frame)
            guard case .data(let data) = frame, case .byteBuffer(var bytes) = data.data, body.readableBytes + bytes.readableBytes <= Self.gathered else {
                // Trailers, or more than a check carries: the handler's.
                return passOn(frames, context: context)
            }
            body.writeBuffer(&bytes)
            guard data.endStream else {
                state = .gathering(frames: frames, body: body)
                return
            }
            guard let answer = memory.grpcCheckAnswer(body) else { return passOn(frames, context: context) }
            state = .answered
            context.write(wrapOutboundOut(.headers(.init(headers: Self.answerHead))), promise: nil)
            context.write(wrapOutboundOut(.data(.init(data: .byteBuffer(answer)))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.headers(.init(headers: Self.answerTrailers, endStream: true))), promise: nil)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        // A call whose message did not all come in this read goes on gathering, with the stream watched.
        if case .gathering = state, !addRest(context: context) { return }
        context.fireChannelReadComplete()
    }
}
