import HTTPTypes
import Hummingbird
import NIOCore
@testable import SignInServer
import Testing

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
