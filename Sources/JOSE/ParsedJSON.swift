import Foundation

/// A parsed JSON value. JWT headers and claims are small flat objects; parsing them with this strict
/// recursive-descent parser costs a fraction of Foundation's `JSONDecoder`, which matters on the
/// verification hot path.
public enum ParsedJSON: Sendable, Hashable {
    /// A string.
    case string(String)
    /// A number.
    case number(Double)
    /// `true` or `false`.
    case bool(Bool)
    /// `null`.
    case null
    /// An array.
    case array([ParsedJSON])
    /// An object's members in order (duplicate keys refused). An array, not a dictionary: JWT objects are
    /// small, and a linear scan beats hashing every key.
    case object([Member])

    /// One member of an object.
    public struct Member: Sendable, Hashable {
        /// The key.
        public var key: String
        /// The value.
        public var value: ParsedJSON
    }

    /// Why a text is not JSON.
    public struct ParseError: Error, Sendable, Hashable {
        /// Byte offset of the problem.
        public let offset: Int
    }

    /// Parses a complete JSON text (UTF-8), refusing trailing garbage, duplicate keys and nesting deeper than 32.
    public static func parse(_ data: Data) throws(ParseError) -> ParsedJSON {
        let result = data.withUnsafeBytes { raw in
            Result { () throws(ParseError) -> ParsedJSON in try parse(buffer: raw.bindMemory(to: UInt8.self)) }
        }
        return try result.get()
    }

    /// Parses a complete JSON text given as bytes.
    public static func parse(_ bytes: [UInt8]) throws(ParseError) -> ParsedJSON {
        let result = bytes.withUnsafeBufferPointer { buffer in
            Result { () throws(ParseError) -> ParsedJSON in try parse(buffer: buffer) }
        }
        return try result.get()
    }

    /// Parses a complete JSON text in a buffer. The parser checks every index against the count itself, so it
    /// reads the buffer without a copy.
    public static func parse(buffer: UnsafeBufferPointer<UInt8>) throws(ParseError) -> ParsedJSON {
        var parser = Parser(bytes: buffer)
        parser.skipSpace()
        let value = try parser.value(depth: 0)
        parser.skipSpace()
        guard parser.index == parser.bytes.count else { throw ParseError(offset: parser.index) }
        return value
    }

    /// The string, if this is one.
    public var stringValue: String? { if case .string(let text) = self { text } else { nil } }
    /// The number, if this is one.
    public var numberValue: Double? { if case .number(let number) = self { number } else { nil } }
    /// The object as a dictionary, if this is one.
    public var objectValue: [String: ParsedJSON]? {
        guard case .object(let members) = self else { return nil }
        return Dictionary(members.map { ($0.key, $0.value) }, uniquingKeysWith: { first, _ in first })
    }

    /// The value of member `key`, if this is an object that has it.
    public subscript(member key: String) -> ParsedJSON? {
        guard case .object(let members) = self else { return nil }
        let length = key.utf8.count
        return members.first { $0.key.utf8.count == length && $0.key == key }?.value
    }

    /// Whether this is an object.
    public var isObject: Bool { if case .object = self { true } else { false } }

    private struct Parser {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        mutating func skipSpace() {
            while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D || bytes[index] == 0x09 {
                index += 1
            }
        }

        mutating func value(depth: Int) throws(ParseError) -> ParsedJSON {
            guard depth < 32, index < bytes.count else { throw ParseError(offset: index) }
            switch bytes[index] {
            case UInt8(ascii: "{"): return try object(depth: depth)
            case UInt8(ascii: "["): return try array(depth: depth)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): try literal("true"); return .bool(true)
            case UInt8(ascii: "f"): try literal("false"); return .bool(false)
            case UInt8(ascii: "n"): try literal("null"); return .null
            default: return .number(try number())
            }
        }

        mutating func literal(_ word: StaticString) throws(ParseError) {
            let count = word.utf8CodeUnitCount
            guard index + count <= bytes.count else { throw ParseError(offset: index) }
            let matches = word.withUTF8Buffer { expected in
                (0..<count).allSatisfy { bytes[index + $0] == expected[$0] }
            }
            guard matches else { throw ParseError(offset: index) }
            index += count
        }

        mutating func object(depth: Int) throws(ParseError) -> ParsedJSON {
            index += 1
            var result: [Member] = []
            result.reserveCapacity(16)
            var seen: Set<String>?
            skipSpace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(result)
            }
            while true {
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw ParseError(offset: index) }
                let key = try string()
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw ParseError(offset: index) }
                index += 1
                skipSpace()
                let item = try value(depth: depth + 1)
                // Duplicate keys: a linear check while small, a set beyond (bounded work for hostile input).
                if result.count < 32 {
                    let length = key.utf8.count
                    guard !result.contains(where: { $0.key.utf8.count == length && $0.key == key }) else { throw ParseError(offset: index) }
                } else {
                    if seen == nil { seen = Set(result.map(\.key)) }
                    guard seen?.insert(key).inserted == true else { throw ParseError(offset: index) }
                }
                result.append(Member(key: key, value: item))
                skipSpace()
                guard index < bytes.count else { throw ParseError(offset: index) }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                guard bytes[index] == UInt8(ascii: "}") else { throw ParseError(offset: index) }
                index += 1
                return .object(result)
            }
        }

        mutating func array(depth: Int) throws(ParseError) -> ParsedJSON {
            index += 1
            var result: [ParsedJSON] = []
            skipSpace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(result)
            }
            while true {
                skipSpace()
                result.append(try value(depth: depth + 1))
                skipSpace()
                guard index < bytes.count else { throw ParseError(offset: index) }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                guard bytes[index] == UInt8(ascii: "]") else { throw ParseError(offset: index) }
                index += 1
                return .array(result)
            }
        }

        mutating func string() throws(ParseError) -> String {
            index += 1
            let start = index
            // Fast path: no escapes. ASCII (every claim Apple sends) becomes a String without a validation pass.
            var ascii = true
            while index < bytes.count, bytes[index] != UInt8(ascii: "\""), bytes[index] != UInt8(ascii: "\\"), bytes[index] >= 0x20 {
                if bytes[index] >= 0x80 { ascii = false }
                index += 1
            }
            guard index < bytes.count else { throw ParseError(offset: index) }
            if bytes[index] == UInt8(ascii: "\"") {
                let end = index
                index += 1
                let slice = UnsafeBufferPointer(rebasing: bytes[start..<end])
                let text = ascii ? String(decoding: slice, as: UTF8.self) : String(validating: slice, as: UTF8.self)
                guard let text else { throw ParseError(offset: start) }
                return text
            }
            var buffer = Array(bytes[start..<index])
            while index < bytes.count {
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    guard let text = String(validating: buffer, as: UTF8.self) else { throw ParseError(offset: start) }
                    return text
                case UInt8(ascii: "\\"):
                    index += 1
                    guard index < bytes.count else { throw ParseError(offset: index) }
                    let escaped = bytes[index]
                    index += 1
                    switch escaped {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): buffer.append(escaped)
                    case UInt8(ascii: "b"): buffer.append(0x08)
                    case UInt8(ascii: "f"): buffer.append(0x0C)
                    case UInt8(ascii: "n"): buffer.append(0x0A)
                    case UInt8(ascii: "r"): buffer.append(0x0D)
                    case UInt8(ascii: "t"): buffer.append(0x09)
                    case UInt8(ascii: "u"):
                        var scalar = try hex4()
                        if (0xD800...0xDBFF).contains(scalar) {
                            guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else { throw ParseError(offset: index) }
                            index += 2
                            let low = try hex4()
                            guard (0xDC00...0xDFFF).contains(low) else { throw ParseError(offset: index) }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        }
                        guard let unicode = Unicode.Scalar(scalar) else { throw ParseError(offset: index) }
                        buffer.append(contentsOf: Array(String(Character(unicode)).utf8))
                    default:
                        throw ParseError(offset: index)
                    }
                default:
                    guard byte >= 0x20 else { throw ParseError(offset: index) }
                    buffer.append(byte)
                    index += 1
                }
            }
            throw ParseError(offset: index)
        }

        mutating func hex4() throws(ParseError) -> UInt32 {
            guard index + 4 <= bytes.count else { throw ParseError(offset: index) }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt32
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
                default: throw ParseError(offset: index)
                }
                value = value << 4 | digit
                index += 1
            }
            return value
        }

        mutating func number() throws(ParseError) -> Double {
            let start = index
            if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
            var digits = 0
            let firstDigit = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
                index += 1
                digits += 1
            }
            // RFC 8259: no leading zeros ("01" is not a number; found by fuzzing against Foundation's parser).
            guard digits > 0, digits == 1 || bytes[firstDigit] != UInt8(ascii: "0") else { throw ParseError(offset: start) }
            var integral = true
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                integral = false
                index += 1
                var fraction = 0
                while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
                    index += 1
                    fraction += 1
                }
                guard fraction > 0 else { throw ParseError(offset: index) }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                integral = false
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
                var exponent = 0
                while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
                    index += 1
                    exponent += 1
                }
                guard exponent > 0 else { throw ParseError(offset: index) }
            }
            if integral, digits <= 18 {
                var value: Int64 = 0
                var position = start
                let negative = bytes[position] == UInt8(ascii: "-")
                if negative { position += 1 }
                while position < index {
                    value = value * 10 + Int64(bytes[position] - UInt8(ascii: "0"))
                    position += 1
                }
                return Double(negative ? -value : value)
            }
            // A number too large for a Double would become infinity: an `exp` that never passes. Refused.
            guard let text = String(validating: bytes[start..<index], as: UTF8.self), let number = Double(text), number.isFinite else {
                throw ParseError(offset: start)
            }
            return number
        }
    }
}
