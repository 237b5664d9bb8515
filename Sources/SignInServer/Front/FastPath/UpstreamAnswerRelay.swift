import DoorHTTP
import NIOCore

/// The upstream's answer on the byte path (`RawFrontPath`): its head as the client gets it (the one filter,
/// `AnswerFilter`, with siwa's `Date` and `Server` and its own framing) and its body relayed as it comes, chunked
/// again when its length is not known, whatever framing the upstream used.
enum UpstreamAnswerRelay {
    /// Where the upstream's body stands once its head has been passed on.
    enum Body {
        case length(remaining: Int)
        case chunked(ChunkedFraming)
        /// Ends with the connection: re-chunked for the client.
        case untilClose
        /// Over; `reusable` unless the upstream's framing leaves its connection unusable.
        case ended(reusable: Bool)
    }

    /// A chunked body that is not.
    struct Malformed: Error {}

    /// The upstream's response head as the client gets it, and the body's framing from here: written into room made
    /// once (`ByteHead.fields`), each kept line copied as it came (a `writeBytes` a line made room and moved the
    /// buffer's indices each time, checked for exclusive access: 5,100 instructions an answer, 2,000 of them those).
    static func head(_ head: RawHTTP.ResponseHead, from answer: ByteBuffer, closeClient: Bool, dates: HTTPDateCache, allocator: ByteBufferAllocator) -> (ByteBuffer, Body) {
        let body: Body
        let framing: StaticString?
        switch head.framing {
        case .none:
            (body, framing) = (.ended(reusable: true), nil)
        case .length(let length):
            (body, framing) = (length == 0 ? .ended(reusable: true) : .length(remaining: length), nil)
        case .chunked:
            // Spelled as NIO's encoder spells it on the handlers' carrier.
            (body, framing) = (.chunked(ChunkedFraming()), "transfer-encoding: chunked\r\n")
        case .close:
            (body, framing) = (.untilClose, "transfer-encoding: chunked\r\n")
        }
        let stamp = dates.stampLines
        var out = allocator.buffer(capacity: head.length + stamp.count + 96)
        answer.withUnsafeReadableBytes { source in
            ByteHead.fields(into: &out, expected: head.length + stamp.count + 64) { sink in
                statusLine(head.status, reason: bytes(source, head.reason), to: &sink)
                var filter = AnswerFilter(connection: head.connection)
                for line in head.lines {
                    let kept = filter.keeps(line.name) { String(decoding: bytes(source, line.value), as: UTF8.self) }
                    // The line as it came with its CRLF (the parser took each line only with one after it).
                    guard kept, line.line.upperBound + 2 <= source.count else { continue }
                    sink.put(bytes(source, line.line.lowerBound..<(line.line.upperBound + 2)))
                }
                // Nearly always nothing (a transfer coding other than chunked becomes a content coding).
                filter.finish(to: &sink)
                stamp.withUnsafeBytes { sink.put($0) }
                if let framing { sink.put(framing) }
                if closeClient { sink.put(closing) }
                sink.putLineEnd()
            }
        }
        return (out, body)
    }

    private static let closing: StaticString = "Connection: close\r\n"

    /// The bytes of `range` in `source` (within it: the parser's ranges are).
    private static func bytes(_ source: UnsafeRawBufferPointer, _ range: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: source[range.clamped(to: 0..<source.count)])
    }

    /// `HTTP/1.1 NNN reason` and its CRLF (the parser took three digits, 100 to 999, and the reason as it came).
    private static func statusLine(_ status: Int, reason: UnsafeRawBufferPointer, to sink: inout RawHeadSink) {
        withUnsafeTemporaryAllocation(byteCount: 13, alignment: 8) { start in
            // "HTTP/1.1" as one little-endian word.
            start.storeBytes(of: (0x312E_312F_5054_5448 as UInt64).littleEndian, toByteOffset: 0, as: UInt64.self)
            start[8] = UInt8(ascii: " ")
            start[9] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: status / 100 % 10)
            start[10] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: status / 10 % 10)
            start[11] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: status % 10)
            start[12] = UInt8(ascii: " ")
            sink.put(UnsafeRawBufferPointer(start))
        }
        sink.put(reason)
        sink.putLineEnd()
    }

    /// Passes on (`write`) the part of `buffer` that belongs to the body; what is left after its end stays in
    /// `buffer`. Throws when the body is malformed (the exchange is then abandoned and the client's connection closed).
    static func relay(_ buffer: inout ByteBuffer, body: Body, allocator: ByteBufferAllocator, write: (ByteBuffer) -> Void) throws(Malformed) -> Body {
        switch body {
        case .ended:
            return body
        case .length(let remaining):
            guard buffer.readableBytes > 0 else { return body }
            let taken = min(remaining, buffer.readableBytes)
            if let slice = buffer.readSlice(length: taken) { write(slice) }
            return taken == remaining ? .ended(reusable: true) : .length(remaining: remaining - taken)
        case .chunked(var framing):
            // Chunked again by siwa, its data as it came: the upstream's chunk extensions and trailers (which could
            // set a cookie of siwa's) stay behind, as they do on the codec path.
            guard buffer.readableBytes > 0 else { return body }
            var data: [Range<Int>] = []
            let progress = buffer.withUnsafeReadableBytes { framing.consume($0) { data.append($0) } }
            if progress == .invalid { throw Malformed() }
            let start = buffer.readerIndex
            for range in data {
                if let slice = buffer.getSlice(at: start + range.lowerBound, length: range.count) { writeChunk(slice, allocator: allocator, write: write) }
            }
            switch progress {
            case .ended(let length):
                buffer.moveReaderIndex(forwardBy: length)
                write(ByteBuffer(string: "0\r\n\r\n"))
                return .ended(reusable: true)
            case .more, .invalid:
                buffer.moveReaderIndex(forwardBy: buffer.readableBytes)
                return .chunked(framing)
            }
        case .untilClose:
            guard buffer.readableBytes > 0, let slice = buffer.readSlice(length: buffer.readableBytes) else { return body }
            writeChunk(slice, allocator: allocator, write: write)
            return body
        }
    }

    /// Writes `data` to the client as one chunk: one buffer when it is small (over TLS every write is a record of its
    /// own), its size line, the data and its end as three otherwise (the data is not copied).
    private static func writeChunk(_ data: ByteBuffer, allocator: ByteBufferAllocator, write: (ByteBuffer) -> Void) {
        guard data.readableBytes > 0 else { return }
        let small = data.readableBytes <= 16 * 1024
        var size = allocator.buffer(capacity: small ? data.readableBytes + 16 : 16)
        size.writeString(String(data.readableBytes, radix: 16))
        size.writeStaticString("\r\n")
        if small {
            var data = data
            size.writeBuffer(&data)
            size.writeStaticString("\r\n")
            return write(size)
        }
        write(size)
        write(data)
        write(ByteBuffer(string: "\r\n"))
    }
}
