/// `application/x-www-form-urlencoded` encoding and decoding, strict enough for untrusted input.
public enum FormEncoding {
    /// Percent-encodes everything but RFC 3986 unreserved characters (so it is safe in a query and in a form body).
    public static func encode(_ text: String) -> String {
        var output = ""
        output.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                output.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                output += "%"
                output += String(byte >> 4, radix: 16, uppercase: true)
                output += String(byte & 0x0F, radix: 16, uppercase: true)
            }
        }
        return output
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
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var iterator = bytes.makeIterator()
        while let byte = iterator.next() {
            switch byte {
            case UInt8(ascii: "+"):
                output.append(UInt8(ascii: " "))
            case UInt8(ascii: "%"):
                guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                    throw .badPercentEscape
                }
                output.append(high << 4 | low)
            default:
                output.append(byte)
            }
        }
        guard let text = String(validating: output, as: UTF8.self) else { throw .notUTF8 }
        return text
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
