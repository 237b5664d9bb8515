import Foundation

/// Base64url without padding (RFC 7515 §2), the encoding of every JWT part and of our random tokens.
public enum Base64URL {
    // Both directions map bytes rather than call String.replacingOccurrences, which on Linux bridges through
    // NSString and cost most of an id_token verification.

    /// Encodes bytes as base64url without padding.
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        var encoded = Array(Data(bytes).base64EncodedData())
        while encoded.last == UInt8(ascii: "=") { encoded.removeLast() }
        for index in encoded.indices {
            switch encoded[index] {
            case UInt8(ascii: "+"): encoded[index] = UInt8(ascii: "-")
            case UInt8(ascii: "/"): encoded[index] = UInt8(ascii: "_")
            default: break
            }
        }
        return String(decoding: encoded, as: UTF8.self)
    }

    /// Decodes base64url (padding optional); nil for anything that is not base64url.
    /// One pass through a lookup table: this runs three times per verified token.
    public static func decode(_ text: some StringProtocol) -> Data? {
        decode(utf8: Substring(text).utf8)
    }

    /// Decodes base64url from UTF-8 bytes (concrete, so it is fast across modules).
    public static func decode(utf8 text: Substring.UTF8View) -> Data? {
        var utf8 = [UInt8](text)
        let total = utf8.count
        while utf8.last == UInt8(ascii: "=") { utf8.removeLast() }
        guard total - utf8.count <= 2, utf8.count % 4 != 1 else { return nil }
        var output = [UInt8]()
        output.reserveCapacity(utf8.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for byte in utf8 {
            let value = decodeTable[Int(byte)]
            guard value != 0xFF else { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        return Data(output)
    }

    /// Maps an ASCII byte to its 6-bit value; 0xFF for bytes outside the base64url alphabet.
    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        for (index, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(index) }
        return table
    }()
}
