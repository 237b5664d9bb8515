import Foundation
import JOSE
import Testing

@Suite("ParsedJSON: the strict parser on the verification hot path")
struct JSONValueTests {
    @Test("parses what Apple's claims contain: strings, numbers, booleans, arrays, null")
    func claims() throws {
        let text = #"{"iss":"https://appleid.apple.com","aud":["a","b"],"exp":1795256461,"iat":1.5e3,"email_verified":true,"x":null,"n":-12}"#
        let parsed = try ParsedJSON.parse(Array(text.utf8))
        let object = try #require(parsed.objectValue)
        #expect(object["iss"] == .string("https://appleid.apple.com"))
        #expect(object["aud"] == .array([.string("a"), .string("b")]))
        #expect(object["exp"] == .number(1_795_256_461))
        #expect(object["iat"] == .number(1500))
        #expect(object["email_verified"] == .bool(true))
        #expect(object["x"] == .null)
        #expect(object["n"] == .number(-12))
    }

    @Test("escapes, including a surrogate pair, decode to the same text Foundation gives")
    func escapes() throws {
        let text = #"{"s":"a\"b\\c\/d\n\u00e9\u674e\ud83c\udf4e"}"#
        let parsed = try ParsedJSON.parse(Array(text.utf8))
        let ours = parsed.objectValue?["s"]?.stringValue
        let foundation = try JSONDecoder().decode([String: String].self, from: Data(text.utf8))["s"]
        #expect(ours == foundation)
        #expect(ours == "a\"b\\c/d\né李🍎")
    }

    @Test("refuses what is not one JSON object", arguments: [
        #"{"a":1,"a":2}"#, #"{"a":1} x"#, #"{"a":}"#, #"{"a":1,}"#, #"{"a":"\x"}"#, #"{"a":"\ud800"}"#, #"{"a":01.}"#, #"{"a":"#,
        "{\"a\":\"\u{01}\"}", String(repeating: "[", count: 40) + String(repeating: "]", count: 40),
        // Found by fuzzing: leading zeros, and a number beyond Double's range (an exp of infinity never passes).
        #"{"exp":01800000600}"#, #"{"exp":-00}"#, #"{"exp":1e400}"#, #"{"exp":-1e400}"#,
    ])
    func refuses(text: String) {
        let result = Result { () throws(ParsedJSON.ParseError) -> ParsedJSON in try ParsedJSON.parse(Array(text.utf8)) }
        #expect(throws: ParsedJSON.ParseError.self) { try result.get() }
    }

    @Test("invalid UTF-8 inside a string is refused")
    func invalidUTF8() {
        let bytes: [UInt8] = Array(#"{"a":""#.utf8) + [0xFF, 0xFE] + Array(#""}"#.utf8)
        let result = Result { () throws(ParsedJSON.ParseError) -> ParsedJSON in try ParsedJSON.parse(bytes) }
        #expect(throws: ParsedJSON.ParseError.self) { try result.get() }
    }
}
