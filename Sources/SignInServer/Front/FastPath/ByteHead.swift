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
        out.writeBytes(dates.stampLines)
    }

    /// `name: value` and its line end, made room for once and copied in (four `writeString`s cost four checks of the
    /// buffer's room: 3 % of a proxied request's instructions).
    static func writeField(_ out: inout ByteBuffer, _ name: String, _ value: String) {
        bytes(of: name, value) { name, value in
            out.writeWithUnsafeMutableBytes(minimumWritableBytes: name.count + value.count + 4) { room -> Int in
                guard let base = room.baseAddress else { return 0 }
                return copyLine(into: base, name, value)
            }
        }
    }

    /// Calls `body` with the UTF-8 bytes of `name` and of `value`.
    static func bytes<Result>(of name: String, _ value: String, _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) -> Result) -> Result {
        var name = name, value = value
        return name.withUTF8 { name in value.withUTF8 { value in body(UnsafeRawBufferPointer(name), UnsafeRawBufferPointer(value)) } }
    }

    /// Writes `name: value` and its line end at `base` (room for `name.count + value.count + 4` bytes); returns how
    /// many bytes it wrote.
    static func copyLine(into base: UnsafeMutableRawPointer, _ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) -> Int {
        let nameCount = name.count, valueCount = value.count
        if let from = name.baseAddress { base.copyMemory(from: from, byteCount: nameCount) }
        base.storeBytes(of: (0x203A as UInt16).littleEndian, toByteOffset: nameCount, as: UInt16.self)
        if let from = value.baseAddress { (base + nameCount + 2).copyMemory(from: from, byteCount: valueCount) }
        base.storeBytes(of: (0x0A0D as UInt16).littleEndian, toByteOffset: nameCount + 2 + valueCount, as: UInt16.self)
        return nameCount + valueCount + 4
    }
}

extension ByteHead {
    /// Has `write` add header lines to `out` through a `HeaderSink`, written straight into the buffer's room: room for
    /// `expected` bytes is made once, and each line is copied into it (a `writeField` a line made room and moved the
    /// buffer's indices each time, checked for exclusive access: 370 instructions a line, a dozen lines a proxied
    /// request). Lines that do not fit are written again with four times the room; `write` must write the same
    /// lines each time it is called.
    static func fields(into out: inout ByteBuffer, expected: Int, _ write: (inout RawHeadSink) -> Void) {
        var room = expected
        while true {
            var fitted = false
            out.writeWithUnsafeMutableBytes(minimumWritableBytes: room) { bytes in
                var sink = RawHeadSink(room: bytes)
                write(&sink)
                fitted = !sink.overflowed
                return fitted ? sink.used : 0
            }
            if fitted { return }
            room = max(room * 4, 256)
        }
    }
}

extension ByteHead {
    /// The header lines `write` adds, as HTTP/1.1 bytes (each `name: value` and its CRLF): lines a carrier of bytes
    /// makes once and copies into each head it writes (`UpstreamForwarder.SiwaLines.rendered`).
    static func rendered(_ write: (inout RawHeadSink) -> Void) -> [UInt8] {
        var buffer = ByteBuffer()
        fields(into: &buffer, expected: 512, write)
        return Array(buffer.readableBytesView)
    }
}

/// Header lines written as HTTP/1.1 into a buffer's room (`ByteHead.fields`; `UpstreamForwarder.writeHead`,
/// `AnswerFilter.finish`): each line copied in, nothing written once one does not fit (`overflowed`).
struct RawHeadSink: HeaderSink {
    private let room: UnsafeMutableRawBufferPointer
    private(set) var used = 0
    private(set) var overflowed = false

    init(room: UnsafeMutableRawBufferPointer) {
        self.room = room
    }

    mutating func add(name: String, value: String) {
        ByteHead.bytes(of: name, value) { put($0, $1) }
    }

    mutating func pass<Field: ClientField>(_ field: Field) {
        field.withLine { put($0, $1) }
    }

    mutating func addRendered(_ lines: [UInt8]) -> Bool {
        lines.withUnsafeBytes { put($0) }
        return true
    }

    /// A request line: `method target HTTP/1.1` and its CRLF.
    mutating func putRequestLine(method: String, target: String) {
        ByteHead.bytes(of: method, target) { method, target in
            put(method)
            put(Self.space)
            put(target)
            put(Self.version)
        }
    }

    /// The empty line that ends a head.
    mutating func putLineEnd() {
        put(Self.lineEnd)
    }

    private static let space: StaticString = " "
    private static let version: StaticString = " HTTP/1.1\r\n"
    private static let lineEnd: StaticString = "\r\n"

    /// `text`'s bytes as they are.
    mutating func put(_ text: StaticString) {
        put(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// `bytes` as they are: lines already written as HTTP/1.1.
    mutating func put(_ bytes: UnsafeRawBufferPointer) {
        guard !overflowed, used + bytes.count <= room.count, let base = room.baseAddress.map({ $0 + used }) else {
            overflowed = true
            return
        }
        if let from = bytes.baseAddress { base.copyMemory(from: from, byteCount: bytes.count) }
        used += bytes.count
    }

    /// `name: value` and its line end.
    mutating func put(_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) {
        guard !overflowed, used + name.count + value.count + 4 <= room.count, let base = room.baseAddress.map({ $0 + used }) else {
            overflowed = true
            return
        }
        used += ByteHead.copyLine(into: base, name, value)
    }
}
