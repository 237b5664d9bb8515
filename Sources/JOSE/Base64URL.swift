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
        if let decoded = text.withContiguousStorageIfAvailable({ decode(bytes: $0) }) { return decoded }
        return [UInt8](text).withUnsafeBufferPointer { decode(bytes: $0) }
    }

    /// Decodes base64url from a buffer of UTF-8 bytes: one pass through a lookup table.
    public static func decode(bytes buffer: UnsafeBufferPointer<UInt8>) -> Data? {
        var end = buffer.count
        while end > 0, buffer[end - 1] == UInt8(ascii: "=") { end -= 1 }
        guard buffer.count - end <= 2, end % 4 != 1 else { return nil }
        var output = [UInt8]()
        output.reserveCapacity(end * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for byte in UnsafeBufferPointer(rebasing: buffer[0..<end]) {
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
