import HTTPTypes
import Hummingbird
import NIOCore
@testable import SignInServer
import Testing
import TestSupport

/// The cookie lookup the pages use instead of parsing every cookie: it must read what Hummingbird reads.
@Suite("Cookie lookup")
struct CookieValueTests {
    static func request(_ cookieHeaders: [String]) -> Request {
        var fields = HTTPFields()
        for header in cookieHeaders { fields.append(HTTPField(name: .cookie, value: header)) }
        return Request(head: HTTPRequest(method: .get, scheme: nil, authority: nil, path: "/", headerFields: fields), body: .init(buffer: ByteBuffer()))
    }

    @Test("the value of the named cookie, as Hummingbird's parser gives it", arguments: [
        ["siwa_session=abc"],
        ["a=1; siwa_session=abc; b=2"],
        ["xsiwa_session=no; siwa_session2=no;  siwa_session=abc"],
        ["siwa_session=a=b=c; other=1"],
        ["siwa_session="],
        ["other=1", "siwa_session=second-header"],
        ["siwa_session=first; siwa_session=second"],
        ["nothing=here"],
        [],
        [";;  ; siwa_session=x;"],
    ])
    func agreesWithHummingbird(headers: [String]) {
        let request = Self.request(headers)
        #expect(request.cookieValue("siwa_session") == request.cookies["siwa_session"]?.value, "\(headers)")
    }
}

/// The `Cookie` value the upstream gets (`UpstreamForwarder.keptCookies`, read by byte) against a plain reading of
/// the same rule on generated values: split at `;`, pairs trimmed of blanks, nameless pairs and siwa's taken out, the
/// rest joined with `; `, and a value with nothing taken out passed as it came.
@Suite("Cookie cut for the upstream")
struct CookieCutTests {
    static func reference(_ value: String, own: Set<String>) -> String? {
        let blanks: Set<Character> = [" ", "\t"]
        func trim(_ text: Substring) -> Substring {
            var text = text
            while let first = text.first, blanks.contains(first) { text = text.dropFirst() }
            while let last = text.last, blanks.contains(last) { text = text.dropLast() }
            return text
        }
        var kept: [String] = []
        var changed = false
        for pair in value.components(separatedBy: ";") {
            let trimmed = trim(Substring(pair))
            let name = trim(trimmed.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
            if name.isEmpty || own.contains(String(name)) { changed = true } else { kept.append(String(trimmed)) }
        }
        if !changed { return value }
        return kept.isEmpty ? nil : kept.joined(separator: "; ")
    }

    @Test("siwa's cookies, under each of their names, and nameless pairs leave; every other pair stays as it came, in order")
    func agreesWithThePlainReading() {
        var generator = SplitMix64(seed: 35)
        let own = CookiePolicy.allNames
        let names = Array(own) + ["a", "siwa_sessionx", "xsiwa_session", "__Host-other", "SIWA_SESSION", "é", "", " ", "siwa_session ", "\tsiwa_csrf"]
        let values = ["1", "", "a=b", "x y", "\"quoted\"", "ünï", "=", "v\t"]
        let separators = [";", "; ", " ;", ";;", "; \t", "\t;"]
        var checked = 0
        var cut = 0
        for _ in 0..<4_000 {
            let pairs = Int.random(in: 0...5, using: &generator)
            var text = Bool.random(using: &generator) ? "" : [" ", "\t", ";"].randomElement(using: &generator) ?? ""
            for index in 0..<pairs {
                if index > 0 { text += separators.randomElement(using: &generator) ?? ";" }
                let name = names.randomElement(using: &generator) ?? "a"
                text += Bool.random(using: &generator) ? name + "=" + (values.randomElement(using: &generator) ?? "") : name
            }
            if Bool.random(using: &generator) { text += [";", " ", "; "].randomElement(using: &generator) ?? "" }
            let expected = Self.reference(text, own: own)
            let got = UpstreamForwarder.keptCookies(text, own: own)
            #expect(got == expected, "\(text.debugDescription)")
            if got != text { cut += 1 }
            checked += 1
        }
        #expect(checked == 4_000)
        #expect(cut > 1_000, "the generated values took something out often enough to test it")
        #expect(UpstreamForwarder.keptCookies("a=1;b=2", own: own) == "a=1;b=2", "nothing to take out: passed as it came")
        #expect(UpstreamForwarder.keptCookies(" __Host-siwa_session=x ;  a=1 ;b=2", own: own) == "a=1; b=2")
        #expect(UpstreamForwarder.keptCookies("siwa_csrf=1; siwa_session=2", own: own) == nil)
    }

    @Test("a ; is a separator whatever Unicode stands around it, as servers read bytes: a character that joins with the ; (U+0600 before it, a combining mark after it) does not hide siwa's cookie behind it; U+037E, which Character equality takes for ;, separates nothing")
    func separatorsByByte() {
        let own = CookiePolicy.allNames
        #expect(UpstreamForwarder.keptCookies("a=x\u{0600}; __Host-siwa_session=S", own: own) == "a=x\u{0600}")
        #expect(UpstreamForwarder.keptCookies("a=x;\u{301} b=2; siwa_session=S", own: own) == "a=x; \u{301} b=2")
        #expect(UpstreamForwarder.keptCookies("a=x\u{37E}siwa_session=S", own: own) == "a=x\u{37E}siwa_session=S", "one pair, a's: nothing to take out")
    }
}
