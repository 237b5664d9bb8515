import AppleSignIn
import Foundation
import JOSE
import Testing

@Suite("Callback payload")
struct CallbackPayloadTests {
    private func parse(_ body: String) throws(CallbackError) -> CallbackPayload {
        try CallbackPayload.parse(formBody: Array(body.utf8))
    }

    private func reason(_ body: String, sourceLocation: SourceLocation = #_sourceLocation) -> CallbackError.Reason? {
        let error = #expect(throws: CallbackError.self, sourceLocation: sourceLocation) { try parse(body) }
        return error?.reason
    }

    @Test("a form_post body with every field is parsed")
    func formBody() throws {
        let user = #"{"name":{"firstName":"Jane","lastName":"Appleseed"},"email":"jane@privaterelay.appleid.com"}"#
        let body = FormEncoding.encode([("state", "st4te"), ("code", "c0de.0.abc"), ("id_token", "a.b.c"), ("user", user)])
        let payload = try parse(body)
        #expect(payload.code == "c0de.0.abc")
        #expect(payload.idToken == "a.b.c")
        #expect(payload.state == "st4te")
        #expect(payload.error == nil)
        #expect(payload.user == AppleUser(firstName: "Jane", lastName: "Appleseed", email: "jane@privaterelay.appleid.com"))
        #expect(payload.user?.displayName == "Jane Appleseed")
    }

    @Test("a query string, with or without '?', is parsed the same way")
    func queryString() throws {
        let withMark = try CallbackPayload.parse(query: "?code=abc&state=xyz")
        let without = try CallbackPayload.parse(query: "code=abc&state=xyz")
        #expect(withMark == CallbackPayload(code: "abc", state: "xyz"))
        #expect(without == withMark)
    }

    @Test("'+' is a space and percent escapes decode to UTF-8")
    func plusAndEscapes() throws {
        let payload = try parse("state=a+b%2Bc%20d%26e%3D&user=%7B%22name%22%3A%7B%22firstName%22%3A%22Jos%C3%A9%22%7D%7D&code=x")
        #expect(payload.state == "a b+c d&e=")
        #expect(payload.user?.firstName == "José")
        #expect(payload.user?.lastName == nil)
    }

    @Test("an error return is parsed")
    func errorReturn() throws {
        let payload = try CallbackPayload.parse(query: "error=user_cancelled_authorize&state=abc")
        #expect(payload.error == "user_cancelled_authorize")
        #expect(payload.code == nil)
        #expect(payload.state == "abc")
    }

    @Test("unknown keys in the user JSON are ignored")
    func userUnknownKeys() throws {
        let user = try AppleUser.parse(json: #"{"name":{"firstName":"Jane","middleName":"Q","lastName":"Doe"},"email":"j@example.com","extra":[1,2]}"#)
        #expect(user == AppleUser(firstName: "Jane", lastName: "Doe", email: "j@example.com"))
    }

    @Test(
        "missing or empty names become nil",
        arguments: [
            (#"{"email":"j@example.com"}"#, AppleUser(email: "j@example.com")),
            (#"{"name":{},"email":"j@example.com"}"#, AppleUser(email: "j@example.com")),
            (#"{"name":{"firstName":"","lastName":"  "},"email":""}"#, AppleUser()),
            (#"{"name":{"lastName":"Doe"}}"#, AppleUser(lastName: "Doe")),
            (#"{"name":null}"#, AppleUser()),
        ]
    )
    func userMissingNames(json: String, expected: AppleUser) throws {
        let user = try AppleUser.parse(json: json)
        #expect(user == expected)
        #expect(user.displayName == expected.displayName)
    }

    @Test("a duplicated parameter is refused")
    func duplicated() {
        #expect(reason("code=a&state=s&code=b") == .duplicateParameter)
        let error = #expect(throws: CallbackError.self) { try parse("state=a&state=a") }
        #expect(error?.field == "state")
    }

    @Test("bytes that are not UTF-8 after decoding are refused", arguments: ["code=%FF&state=s", "state=%C3%28", "%FF=1"])
    func notUTF8(body: String) {
        #expect(reason(body) == .notUTF8)
    }

    @Test("a malformed percent escape is refused", arguments: ["code=%G1&state=s", "state=abc%", "state=abc%4", "%zz=1"])
    func badEscape(body: String) {
        #expect(reason(body) == .badEncoding)
    }

    @Test("a body over 64 KiB is refused before it is read")
    func bodyTooLarge() {
        let body = "code=abc&padding=" + String(repeating: "a", count: 64 * 1024)
        #expect(reason(body) == .bodyTooLarge)
    }

    @Test("a body of exactly 64 KiB is accepted when every field fits")
    func bodyAtLimit() throws {
        var body = "code=abc"
        var index = 0
        while 64 * 1024 - body.utf8.count - 6 > 1000 {
            body += "&f\(index)=" + String(repeating: "x", count: 500)
            index += 1
        }
        body += "&last=" + String(repeating: "y", count: 64 * 1024 - body.utf8.count - 6)
        #expect(body.utf8.count == 64 * 1024)
        #expect(try parse(body).code == "abc")
    }

    @Test(
        "a field longer than its bound is refused and named",
        arguments: [("state", 513), ("code", 1025), ("user", 4097), ("error", 129), ("unknown_field", 1025)]
    )
    func fieldTooLarge(field: String, length: Int) {
        let error = #expect(throws: CallbackError.self) { try parse("\(field)=" + String(repeating: "a", count: length)) }
        #expect(error?.reason == .fieldTooLarge)
        #expect(error?.field == field)
    }

    @Test("a field whose escaped form is long but decoded value fits is accepted")
    func escapedFieldWithinBound() throws {
        let state = String(repeating: "%41", count: 512)
        #expect(try parse("state=" + state).state == String(repeating: "A", count: 512))
    }

    @Test("a user field that is not Apple's JSON is refused", arguments: ["{not json", #"{"name":"Jane"}"#, "[]", #""text""#, #"{"email":42}"#])
    func malformedUser(json: String) {
        let error = #expect(throws: CallbackError.self) { try parse(FormEncoding.encode([("code", "c"), ("user", json)])) }
        #expect(error?.reason == .malformedUser)
        #expect(error?.field == "user")
    }
}
