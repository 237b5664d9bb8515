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

    private static let statusLineStart = Array("HTTP/1.1 ".utf8)

    /// The upstream's response head as the client gets it, and the body's framing from here.
    static func head(_ head: RawHTTP.ResponseHead, from answer: ByteBuffer, closeClient: Bool, dates: HTTPDateCache, allocator: ByteBufferAllocator) -> (ByteBuffer, Body) {
        var out = allocator.buffer(capacity: head.length + 64)
        // `HTTP/1.1 NNN ` in one write (the parser took three digits, 100 to 999).
        let status = head.status
        out.writeWithUnsafeMutableBytes(minimumWritableBytes: 13) { room in
            room.copyBytes(from: statusLineStart)
            room[9] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: status / 100 % 10)
            room[10] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: status / 10 % 10)
            room[11] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: status % 10)
            room[12] = UInt8(ascii: " ")
            return 13
        }
        let start = answer.readerIndex
        if let reason = answer.viewBytes(at: start + head.reason.lowerBound, length: head.reason.count) { out.writeBytes(reason) }
        out.writeStaticString("\r\n")
        var filter = AnswerFilter(connection: head.connection)
        for line in head.lines {
            let kept = filter.keeps(line.name) { answer.getString(at: start + line.value.lowerBound, length: line.value.count) ?? "" }
            // The line as it came with its CRLF (the parser took each line only with one after it).
            guard kept, let bytes = answer.viewBytes(at: start + line.line.lowerBound, length: line.line.count + 2) else { continue }
            out.writeBytes(bytes)
        }
        // Nearly always nothing (a transfer coding other than chunked becomes a content coding).
        ByteHead.fields(into: &out, expected: 0) { filter.finish(to: &$0) }
        ByteHead.writeStamp(&out, dates: dates)
        let body: Body
        switch head.framing {
        case .none:
            body = .ended(reusable: true)
        case .length(let length):
            body = length == 0 ? .ended(reusable: true) : .length(remaining: length)
        case .chunked:
            // Spelled as NIO's encoder spells it on the handlers' carrier.
            out.writeString("transfer-encoding: chunked\r\n")
            body = .chunked(ChunkedFraming())
        case .close:
            out.writeString("transfer-encoding: chunked\r\n")
            body = .untilClose
        }
        if closeClient { out.writeString("Connection: close\r\n") }
        out.writeString("\r\n")
        return (out, body)
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
