import NIOCore
import NIOHTTP2

/// The limit on a client's open streams, kept the way RFC 9113 §5.1.2 asks and nginx does it: a stream beyond
/// `SETTINGS_MAX_CONCURRENT_STREAMS` is refused alone (RST_STREAM REFUSED_STREAM, which a client may send again), and
/// the connection's other streams go on.
///
/// NIO's HTTP/2 handler ends the whole connection (GOAWAY PROTOCOL_ERROR) at the first stream past its limit, which is
/// its default of 100 until the client acknowledges siwa's SETTINGS: a gRPC client that opens its calls before the
/// SETTINGS frame arrives lost every call. So NIO is given a wider limit (`nioLimit`, twice the advertised one: a
/// client that opens that many streams at once is ended as a flood), applied at once, and siwa refuses the excess
/// itself (`refuses`, in the stream's initializer). Two byte-level edits make it so, both before NIO's handler and
/// both done within the connection's first frames:
/// - going out, the first SETTINGS frame advertises `limit` (NIO wrote `nioLimit`);
/// - coming in, a SETTINGS acknowledgement is handed to NIO right after the client's own first SETTINGS frame, so
///   that NIO applies its settings before any stream opens, and the client's real acknowledgement, when it comes, is
///   dropped (NIO counts one per SETTINGS it sent, and it sent one).
final class HTTP2StreamLimit: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// What the client is told, and held to.
    let limit: UInt32

    /// What NIO enforces: the advertised limit's excess is siwa's to refuse, beyond this NIO ends the connection.
    static func nioLimit(for limit: Int) -> Int { max(limit * 2, limit + 100) }

    private enum Inbound {
        /// The client's connection preface: this many bytes of it still to pass.
        case preface(Int)
        /// The client's first frame (its SETTINGS): the header so far, then this many payload bytes to pass.
        case firstSettings(header: [UInt8], payloadLeft: Int?)
        /// Frames until the client's SETTINGS acknowledgement, which is dropped.
        case awaitingAck(header: [UInt8], payloadLeft: Int)
        /// Nothing more to do.
        case done
    }

    private var inbound = Inbound.preface(24)
    private var rewroteSettings = false

    init(limit: Int) {
        self.limit = UInt32(clamping: limit)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard !rewroteSettings else { return context.write(data, promise: promise) }
        rewroteSettings = true
        var buffer = unwrapOutboundIn(data)
        // NIO's first write is its SETTINGS frame: the header (length, type 4, flags 0, stream 0), then 6-byte settings.
        let start = buffer.readerIndex
        if let length = buffer.getInteger(at: start, as: UInt32.self).map({ $0 >> 8 }), buffer.getInteger(at: start + 3, as: UInt8.self) == 4,
            buffer.readableBytes >= 9 + Int(length)
        {
            var offset = start + 9
            while offset + 6 <= start + 9 + Int(length) {
                if buffer.getInteger(at: offset, as: UInt16.self) == 0x3 { buffer.setInteger(limit, at: offset + 2) }
                offset += 6
            }
        }
        context.write(wrapOutboundOut(buffer), promise: promise)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        while buffer.readableBytes > 0 {
            switch inbound {
            case .done:
                context.fireChannelRead(wrapInboundOut(buffer))
                if rewroteSettings { context.pipeline.syncOperations.removeHandler(context: context, promise: nil) }
                return
            case .preface(let left):
                let taken = min(left, buffer.readableBytes)
                pass(&buffer, taken, context: context)
                inbound = left - taken == 0 ? .firstSettings(header: [], payloadLeft: nil) : .preface(left - taken)
            case .firstSettings(var header, let payloadLeft):
                if let payloadLeft {
                    let taken = min(payloadLeft, buffer.readableBytes)
                    pass(&buffer, taken, context: context)
                    if payloadLeft - taken == 0 {
                        acknowledge(context: context)
                    } else {
                        inbound = .firstSettings(header: header, payloadLeft: payloadLeft - taken)
                    }
                } else {
                    let taken = min(9 - header.count, buffer.readableBytes)
                    header += buffer.getBytes(at: buffer.readerIndex, length: taken) ?? []
                    pass(&buffer, taken, context: context)
                    if header.count == 9 {
                        // Not a SETTINGS frame: NIO ends the connection for a missing preface, nothing here to do.
                        guard header[3] == 4 else { inbound = .done; continue }
                        let length = Self.length(header)
                        if length == 0 {
                            acknowledge(context: context)
                        } else {
                            inbound = .firstSettings(header: header, payloadLeft: length)
                        }
                    } else {
                        inbound = .firstSettings(header: header, payloadLeft: nil)
                    }
                }
            case .awaitingAck(var header, let payloadLeft):
                if payloadLeft > 0 {
                    let taken = min(payloadLeft, buffer.readableBytes)
                    pass(&buffer, taken, context: context)
                    inbound = .awaitingAck(header: [], payloadLeft: payloadLeft - taken)
                    continue
                }
                // A frame's header, held until whole: the acknowledgement is dropped, any other frame passed on.
                let taken = min(9 - header.count, buffer.readableBytes)
                header += buffer.readBytes(length: taken) ?? []
                guard header.count == 9 else {
                    inbound = .awaitingAck(header: header, payloadLeft: 0)
                    continue
                }
                let length = Self.length(header)
                if header[3] == 4, header[4] & 1 == 1, length == 0 {
                    inbound = .done
                    if buffer.readableBytes == 0, rewroteSettings { context.pipeline.syncOperations.removeHandler(context: context, promise: nil) }
                } else {
                    context.fireChannelRead(wrapInboundOut(ByteBuffer(bytes: header)))
                    inbound = .awaitingAck(header: [], payloadLeft: length)
                }
            }
        }
    }

    /// The client's first SETTINGS frame has gone to NIO: NIO is handed an acknowledgement of its own, so that it applies
    /// its settings from here on, and the client's real one is awaited (to be dropped).
    private func acknowledge(context: ChannelHandlerContext) {
        context.fireChannelRead(wrapInboundOut(ByteBuffer(bytes: [0, 0, 0, 4, 1, 0, 0, 0, 0])))
        inbound = .awaitingAck(header: [], payloadLeft: 0)
    }

    /// The payload length a frame's 9-byte header says (24 bits, big-endian).
    private static func length(_ header: [UInt8]) -> Int {
        Int(header[0]) << 16 | Int(header[1]) << 8 | Int(header[2])
    }

    /// Hands the next `count` bytes of `buffer` to NIO.
    private func pass(_ buffer: inout ByteBuffer, _ count: Int, context: ChannelHandlerContext) {
        guard count > 0, let slice = buffer.readSlice(length: count) else { return }
        context.fireChannelRead(wrapInboundOut(slice))
    }

    /// The stream a client opened past the limit (`open` counts it), refused alone: RST_STREAM REFUSED_STREAM.
    static func refuse(_ stream: any Channel) {
        stream.writeAndFlush(HTTP2Frame.FramePayload.rstStream(.refusedStream), promise: nil)
    }
}
