/// `application/x-www-form-urlencoded` encoding and decoding, strict enough for untrusted input.
public enum FormEncoding {
    /// Percent-encodes everything but RFC 3986 unreserved characters (so it is safe in a query and in a form body).
    public static func encode(_ text: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var output: [UInt8] = []
        output.reserveCapacity(text.utf8.count + 16)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                output.append(byte)
            default:
                output.append(UInt8(ascii: "%"))
                output.append(hex[Int(byte >> 4)])
                output.append(hex[Int(byte & 0x0F)])
            }
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Encodes pairs as a form body or query string.
    public static func encode(_ pairs: [(String, String)]) -> String {
        pairs.map { "\(encode($0.0))=\(encode($0.1))" }.joined(separator: "&")
    }

    /// Why a form could not be decoded.
    public enum DecodeFailure: Error {
        case badPercentEscape
        case notUTF8
    }

    /// Decodes one component: `+` is a space, `%XX` a byte; the bytes must be UTF-8.
    public static func decodeComponent(_ bytes: some Collection<UInt8>) throws(DecodeFailure) -> String {
        let result = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(DecodeFailure) -> String in try decodeComponent(buffer: buffer) }
        }
        if let result { return try result.get() }
        return try Array(bytes).withUnsafeBufferPointer { buffer in
            Result { () throws(DecodeFailure) -> String in try decodeComponent(buffer: buffer) }
        }.get()
    }

    /// Decodes one component from contiguous bytes, in one pass.
    public static func decodeComponent(buffer: UnsafeBufferPointer<UInt8>) throws(DecodeFailure) -> String {
        var output = [UInt8](repeating: 0, count: buffer.count)
        var written = 0
        var ascii = true
        var index = 0
        while index < buffer.count {
            var byte = buffer[index]
            if byte == UInt8(ascii: "+") {
                byte = UInt8(ascii: " ")
            } else if byte == UInt8(ascii: "%") {
                guard index + 2 < buffer.count, let high = hexValue(buffer[index + 1]), let low = hexValue(buffer[index + 2]) else {
                    throw .badPercentEscape
                }
                byte = high << 4 | low
                index += 2
            }
            if byte >= 0x80 { ascii = false }
            output[written] = byte
            written += 1
            index += 1
        }
        let decoded = output[..<written]
        if ascii { return String(decoding: decoded, as: UTF8.self) }
        guard let text = decoded.withUnsafeBufferPointer({ String(validating: $0, as: UTF8.self) }) else { throw .notUTF8 }
        return text
    }

    /// The value of one hex digit (either case); nil for any other byte.
    public static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
