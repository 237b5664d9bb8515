import HTTPTypes
import NIOCore

/// siwa's own answers on the byte path, written as HTTP/1.1 bytes: the status line, the fields, `Date` and `Server`
/// as Hummingbird writes them on the handlers' answers, and the end of the head.
enum ByteHead {
    /// One of siwa's own answers as HTTP/1.1 bytes, up to its body; `closing`: the connection ends after it.
    static func written(_ response: HTTPResponse, closing: Bool, allocator: ByteBufferAllocator) -> ByteBuffer {
        var out = allocator.buffer(capacity: 1024)
        writeStatusAndFields(&out, response.status, response.headerFields)
        endHead(&out, closing: closing)
        return out
    }

    /// The status line and the header lines of one of siwa's answers.
    static func writeStatusAndFields(_ out: inout ByteBuffer, _ status: HTTPResponse.Status, _ fields: HTTPFields) {
        out.writeString("HTTP/1.1 \(status.code) \(status.reasonPhrase)\r\n")
        for field in fields { writeField(&out, field.name.rawName, field.value) }
    }

    /// The end of an answer's head: `Connection: close` when the connection ends after it (`Connection: keep-alive`
    /// to an HTTP/1.0 request that keeps it, as `SaysConnectionOutcome` says it on the codecs' answers), then the
    /// empty line.
    static func endHead(_ out: inout ByteBuffer, closing: Bool, keptHTTP10: Bool = false) {
        if closing { out.writeString("Connection: close\r\n") }
        if keptHTTP10 { out.writeString("Connection: keep-alive\r\n") }
        out.writeString("\r\n")
    }

    /// siwa's `Date` and `Server`, as Hummingbird writes them on the handlers' answers.
    static func writeStamp(_ out: inout ByteBuffer, dates: HTTPDateCache) {
        Self.writeField(&out, "Date", dates.now)
        Self.writeField(&out, "Server", BytePathAnswers.serverName)
    }

    /// `name: value` and its line end, made room for once and copied in (four `writeString`s cost four checks of the
    /// buffer's room: 3 % of a proxied request's instructions).
    static func writeField(_ out: inout ByteBuffer, _ name: String, _ value: String) {
        var name = name, value = value
        name.withUTF8 { name in value.withUTF8 { value in writeField(&out, UnsafeRawBufferPointer(name), UnsafeRawBufferPointer(value)) } }
    }

    /// `name: value` and its line end from bytes (a client's line on the byte path, copied from its head).
    static func writeField(_ out: inout ByteBuffer, _ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) {
        let nameCount = name.count, valueCount = value.count
        out.writeWithUnsafeMutableBytes(minimumWritableBytes: nameCount + valueCount + 4) { room -> Int in
            guard let base = room.baseAddress else { return 0 }
            if let from = name.baseAddress { base.copyMemory(from: from, byteCount: nameCount) }
            base.storeBytes(of: (0x203A as UInt16).littleEndian, toByteOffset: nameCount, as: UInt16.self)
            if let from = value.baseAddress { (base + nameCount + 2).copyMemory(from: from, byteCount: valueCount) }
            base.storeBytes(of: (0x0A0D as UInt16).littleEndian, toByteOffset: nameCount + 2 + valueCount, as: UInt16.self)
            return nameCount + valueCount + 4
        }
    }
}

extension ByteHead {
    /// Has `write` add header lines to `out` through a `HeaderSink`. The buffer moves into the sink and back, so that
    /// it is never shared while written (a shared buffer is copied on its first write).
    static func fields(into out: inout ByteBuffer, _ write: (inout RawHeadSink) -> Void) {
        var sink = RawHeadSink(buffer: out)
        out = ByteBuffer()
        write(&sink)
        out = sink.buffer
    }
}

/// Header lines written as HTTP/1.1 into a buffer (`UpstreamForwarder.writeHead`, `AnswerFilter.finish`).
struct RawHeadSink: HeaderSink {
    var buffer: ByteBuffer

    mutating func add(name: String, value: String) {
        ByteHead.writeField(&buffer, name, value)
    }

    mutating func pass<Field: ClientField>(_ field: Field) {
        field.writeLine(into: &buffer)
    }
}
