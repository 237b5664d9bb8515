import Foundation
import JOSE
import Testing

@Suite("JOSE primitives")
struct JOSETests {
    @Test(
        "base64url encodes without padding and with the URL alphabet",
        arguments: [
            ([], ""), ([0x66], "Zg"), ([0x66, 0x6F], "Zm8"), ([0x66, 0x6F, 0x6F], "Zm9v"),
            ([0xFB, 0xFF], "-_8"), ([0xFF, 0xFE, 0xFD, 0xFC], "__79_A"),
        ] as [([UInt8], String)]
    )
    func encode(bytes: [UInt8], expected: String) {
        #expect(Base64URL.encode(bytes) == expected)
        #expect(Base64URL.decode(expected) == Data(bytes))
    }

    @Test("base64url round-trips every byte value and every length")
    func roundTrip() {
        for length in 0..<70 {
            let bytes = (0..<length).map { UInt8(($0 * 37 + length) % 256) }
            let encoded = Base64URL.encode(bytes)
            #expect(!encoded.contains("=") && !encoded.contains("+") && !encoded.contains("/"))
            #expect(Base64URL.decode(encoded) == Data(bytes), "length \(length)")
        }
        let all = (0...255).map { UInt8($0) }
        #expect(Base64URL.decode(Base64URL.encode(all)) == Data(all))
    }

    @Test("base64url decoding is strict: no padding, no bits after the last byte, no standard base64 characters, no impossible lengths", arguments: [
        ("Zg", Data([0x66])), ("Zm8", Data([0x66, 0x6F])), ("-_8", Data([0xFB, 0xFF])),
        // Padding, which the JWS compact form forbids.
        ("Zg==", nil), ("Zm8=", nil), ("Zm9v====", nil),
        // Non-zero bits after the last byte: another spelling of "f" and of "fo".
        ("Zh", nil), ("Zm9", nil),
        ("+/8", nil), ("Zm9v!", nil), ("Z", nil), ("Zm9vZ", nil), ("Zm 9v", nil), ("Z=g", nil), ("Zm9v\u{301}", nil),
    ] as [(String, Data?)])
    func decode(text: String, expected: Data?) {
        #expect(Base64URL.decode(text) == expected)
        #expect(Base64URL.decode(Substring("x" + text).dropFirst()) == expected)
    }

    @Test("a compact JWS is split into header, payload, signature and the exact signing input")
    func compactJWS() throws {
        let header = Base64URL.encode(Array(#"{"alg":"RS256","kid":"K1","typ":"JWT"}"#.utf8))
        let payload = Base64URL.encode(Array(#"{"sub":"é"}"#.utf8))
        let token = "\(header).\(payload).AQID"
        let jws = try CompactJWS(token)
        #expect(jws.header.alg == "RS256")
        #expect(jws.header.kid == "K1")
        #expect(jws.header.typ == "JWT")
        #expect(jws.payload == Array(#"{"sub":"é"}"#.utf8))
        #expect(jws.signature == [1, 2, 3])
        #expect(String(Substring(jws.signingInput)) == "\(header).\(payload)")
    }

    @Test("malformed compact JWS strings name what is wrong", arguments: [
        ("a.b", "wrongPartCount(2)"), ("a.b.c.d", "wrongPartCount(4)"), ("", "wrongPartCount(1)"),
        ("e30.e30.+++", "notBase64URL"), ("..", "headerNotJSON"), ("W10.e30.", "headerNotJSON"),
    ])
    func malformedJWS(token: String, failure: String) {
        #expect {
            _ = try CompactJWS(token)
        } throws: { error in
            "\(error)" == failure
        }
    }

    @Test("a compact JWS over 16 KiB is refused before it is decoded")
    func oversizedJWS() {
        let token = String(repeating: "a", count: CompactJWS.maximumSize + 1)
        #expect {
            _ = try CompactJWS(token)
        } throws: { error in
            "\(error)" == "tooLarge(\(CompactJWS.maximumSize + 1))"
        }
    }

    @Test("an empty signature part is kept empty, so alg none cannot pass by accident")
    func emptySignature() throws {
        let header = Base64URL.encode(Array(#"{"alg":"none"}"#.utf8))
        let jws = try CompactJWS("\(header).e30.")
        #expect(jws.signature.isEmpty)
        #expect(jws.header.alg == "none")
    }

    @Test("form encoding escapes everything but unreserved characters and decodes '+' as a space")
    func formEncoding() throws {
        #expect(FormEncoding.encode("a b+c/é~-._") == "a%20b%2Bc%2F%C3%A9~-._")
        #expect(FormEncoding.encode([("k 1", "v&1"), ("k2", "")]) == "k%201=v%261&k2=")
        #expect(try FormEncoding.decodeComponent(Array("a+b%2Bc%C3%A9".utf8)) == "a b+cé")
        #expect(throws: FormEncoding.DecodeFailure.badPercentEscape) { try FormEncoding.decodeComponent(Array("%4".utf8)) }
        #expect(throws: FormEncoding.DecodeFailure.notUTF8) { try FormEncoding.decodeComponent(Array("%C3".utf8)) }
    }
}
