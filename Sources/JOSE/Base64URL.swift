import Foundation

/// Base64url without padding (RFC 7515 §2), the encoding of every JWT part and of our random tokens.
public enum Base64URL {
    // Both directions map bytes rather than call String.replacingOccurrences, which on Linux bridges through
    // NSString and cost most of an id_token verification.

    /// Encodes bytes as base64url without padding.
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let input = Array(bytes)
        let outputCount = input.count / 3 * 4 + [0, 2, 3][input.count % 3]
        return String(unsafeUninitializedCapacity: outputCount, initializingUTF8With: { (output: UnsafeMutableBufferPointer<UInt8>) -> Int in
            alphabet.withUnsafeBufferPointer { alphabet in
                var written = 0
                var index = 0
                while index + 3 <= input.count {
                    let group = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
                    output[written] = alphabet[Int(group >> 18)]
                    output[written + 1] = alphabet[Int(group >> 12 & 0x3F)]
                    output[written + 2] = alphabet[Int(group >> 6 & 0x3F)]
                    output[written + 3] = alphabet[Int(group & 0x3F)]
                    written += 4
                    index += 3
                }
                let remaining = input.count - index
                if remaining > 0 {
                    let group = UInt32(input[index]) << 16 | (remaining == 2 ? UInt32(input[index + 1]) << 8 : 0)
                    output[written] = alphabet[Int(group >> 18)]
                    output[written + 1] = alphabet[Int(group >> 12 & 0x3F)]
                    written += 2
                    if remaining == 2 {
                        output[written] = alphabet[Int(group >> 6 & 0x3F)]
                        written += 1
                    }
                }
                return written
            }
        })
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

    /// Decodes base64url from a buffer of UTF-8 bytes.
    public static func decode(bytes buffer: UnsafeBufferPointer<UInt8>) -> Data? {
        decodeToArray(bytes: buffer).map { Data($0) }
    }

    /// Decodes base64url from a buffer of UTF-8 bytes into an array: one pass through a lookup table, four
    /// characters to three bytes at a time, into storage allocated once and written once.
    public static func decodeToArray(bytes buffer: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        // Strict, as the JWS compact form (RFC 7515 §2) and JWK values (RFC 7518 §2) require: no padding (an `=`
        // is outside the alphabet and refused below), no length a byte cannot end on, and no set bits after the
        // last byte, so each byte string has exactly one accepted spelling.
        let end = buffer.count
        guard end % 4 != 1 else { return nil }
        let tail = end % 4
        let outputCount = end / 4 * 3 + (tail == 0 ? 0 : tail - 1)
        var valid = true
        let output = [UInt8](unsafeUninitializedCapacity: outputCount) { output, initialized in
            valid = decodeTable.withUnsafeBufferPointer { table -> Bool in
                var index = 0
                var written = 0
                while index + 4 <= end {
                    let a = table[Int(buffer[index])], b = table[Int(buffer[index + 1])]
                    let c = table[Int(buffer[index + 2])], d = table[Int(buffer[index + 3])]
                    guard (a | b | c | d) & 0xC0 == 0 else { return false }
                    let group = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    output[written] = UInt8(truncatingIfNeeded: group >> 16)
                    output[written + 1] = UInt8(truncatingIfNeeded: group >> 8)
                    output[written + 2] = UInt8(truncatingIfNeeded: group)
                    written += 3
                    index += 4
                }
                guard tail > 0 else { return true }
                let a = table[Int(buffer[index])], b = table[Int(buffer[index + 1])]
                let c = tail == 3 ? table[Int(buffer[index + 2])] : 0
                guard (a | b | c) & 0xC0 == 0 else { return false }
                // The bits after the last byte: 4 of `b` when one byte remains, 2 of `c` when two do.
                guard tail == 2 ? b & 0x0F == 0 : c & 0x03 == 0 else { return false }
                let group = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6
                output[written] = UInt8(truncatingIfNeeded: group >> 16)
                if tail == 3 { output[written + 1] = UInt8(truncatingIfNeeded: group >> 8) }
                return true
            }
            // On failure the bytes are discarded; the count still covers only written-to storage of a trivial type.
            initialized = valid ? outputCount : 0
        }
        return valid ? output : nil
    }

    /// Whether `byte` is one of base64url's 64 characters (letters, digits, `-`, `_`).
    public static func isAlphabet(_ byte: UInt8) -> Bool {
        decodeTable[Int(byte)] != 0xFF
    }

    /// The 64 characters of base64url, in value order.
    private static let alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// Maps an ASCII byte to its 6-bit value; 0xFF for bytes outside the base64url alphabet.
    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(index) }
        return table
    }()
}
