import DoorHTTP
import NIOCore
import NIOEmbedded
import NIOHTTP1

extension FuzzChecks {
    // MARK: request

    /// The byte path's reading of a request head (`RawHTTP.request`) set against NIO's parser, which reads every
    /// request the byte path does not take: a head the byte path takes must be one NIO's parser reads the same way
    /// (the method, the target, the same fields in the same order, the same end and the same body length), so the
    /// two carriers cannot see two requests in one stream of bytes. And the target the door decides on
    /// (`RequestTarget`) reads back as itself and holds only what may be forwarded. Accepted: the byte path took it.
    static func request(_ input: [UInt8]) throws(PropertyViolation) -> Bool {
        let parse = input.withUnsafeBytes { RawHTTP.request($0) }
        guard case .head(let head) = parse else {
            try requestTarget(input)
            return false
        }
        try check(head.length <= input.count && head.length <= RawHTTP.requestHeadLimit, "a head longer than the input or the limit")
        guard let nio = nioHead(Array(input[..<head.length])) else {
            throw PropertyViolation(message: "the byte path took a head NIO's parser refuses: \(String(decoding: input[..<head.length], as: UTF8.self))")
        }
        try check(nio.method.rawValue == head.method, "the method read as \(head.method), NIO read \(nio.method.rawValue)")
        try check(nio.uri == head.target, "the target read as \(head.target), NIO read \(nio.uri)")
        try check(nio.version == (head.isHTTP10 ? .http1_0 : .http1_1), "the version read differently: NIO read \(nio.version)")
        let ours = head.lines.map { line in
            (line.name, String(decoding: input[line.value], as: UTF8.self))
        }
        // RFC 9110 §5.5: the blanks around a value are not part of it (NIO keeps those after it).
        let theirs = nio.headers.map { ($0.name.lowercased(), String(Substring($0.value).trimmingBlanks)) }
        try check(ours.count == theirs.count && zip(ours, theirs).allSatisfy { $0 == $1 }, "the fields read differently: \(ours) against \(theirs)")
        // NIO's value keeps the blanks after it (`Content-Length: 5 ` frames five bytes for its parser too).
        let length = nio.headers["content-length"].first.flatMap { Int(Substring($0).trimmingBlanks) }
        try check(length == head.contentLength, "the body's length read as \(String(describing: head.contentLength)), NIO read \(String(describing: length))")
        try requestTarget(Array(head.target.utf8))
        return true
    }

    /// `RequestTarget` on the input's first line as a target: an accepted target reads back as itself, starts with
    /// `/`, and holds only visible ASCII without a fragment, a backslash, an encoded separator or dot-segments.
    static func requestTarget(_ input: [UInt8]) throws(PropertyViolation) {
        let raw = String(decoding: input.prefix { $0 != UInt8(ascii: "\r") && $0 != UInt8(ascii: "\n") }, as: UTF8.self)
        guard let target = try? RequestTarget(raw, host: "fuzz.example") else { return }
        let forwarded = target.forwarded
        try check(forwarded.hasPrefix("/"), "a target forwarded without its leading /: \(forwarded)")
        try check(forwarded.utf8.allSatisfy { (0x21...0x7E).contains($0) && $0 != UInt8(ascii: "#") && $0 != UInt8(ascii: "\\") }, "a forwarded target with a byte the door refuses: \(forwarded)")
        let lowered = target.path.lowercased()
        try check(!lowered.contains("%2f") && !lowered.contains("%5c") && !lowered.contains("%00") && !lowered.contains("%2e"), "an encoded separator or dot left in \(target.path)")
        let segments = target.path.split(separator: "/", omittingEmptySubsequences: false)
        try check(!segments.contains(".") && !segments.contains(".."), "a dot-segment left in \(target.path)")
        try check((try? RequestTarget(forwarded, host: "fuzz.example")) == target, "\(raw) → \(forwarded) does not read back as itself")
    }

    /// The head NIO's HTTP/1 parser reads from `bytes` (a whole head), or nil when it refuses them.
    static func nioHead(_ bytes: [UInt8]) -> HTTPRequestHead? {
        let channel = EmbeddedChannel()
        defer { _ = try? channel.finish() }
        do {
            try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .forwardBytes)))
            try channel.writeInbound(ByteBuffer(bytes: bytes))
            while let part = try channel.readInbound(as: HTTPServerRequestPart.self) {
                if case .head(let head) = part { return head }
            }
        } catch {
            return nil
        }
        return nil
    }
}
