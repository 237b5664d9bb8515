import AppleSignIn
import Foundation
import Testing

@Suite("Authorization request")
struct AuthorizationRequestTests {
    let clientID = try! ClientID("com.example.web")
    let redirect = URL(string: "https://example.com/auth/apple/callback?from=home")!

    private func query(of url: URL) -> [String: String] {
        let items = URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems ?? []
        return Dictionary(items.map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { first, _ in first })
    }

    @Test("the URL carries every parameter, percent-encoded")
    func urlParameters() throws {
        let request = try AuthorizationRequest(clientID: clientID, redirectURI: redirect, state: "s t&a=te", nonce: "n+o/n=ce")
        let url = request.url(base: URL(string: "https://appleid.apple.com")!)
        let text = url.absoluteString
        #expect(text.hasPrefix("https://appleid.apple.com/auth/authorize?"))
        #expect(text.contains("client_id=com.example.web"))
        #expect(text.contains("redirect_uri=https%3A%2F%2Fexample.com%2Fauth%2Fapple%2Fcallback%3Ffrom%3Dhome"))
        #expect(text.contains("response_type=code%20id_token"))
        #expect(text.contains("response_mode=form_post"))
        #expect(text.contains("scope=name%20email"))
        #expect(text.contains("state=s%20t%26a%3Dte"))
        #expect(text.contains("nonce=n%2Bo%2Fn%3Dce"))
        #expect(query(of: url) == [
            "client_id": "com.example.web",
            "redirect_uri": "https://example.com/auth/apple/callback?from=home",
            "response_type": "code id_token",
            "response_mode": "form_post",
            "scope": "name email",
            "state": "s t&a=te",
            "nonce": "n+o/n=ce",
        ])
    }

    @Test("no scope means no scope parameter, and the base URL's trailing slash is not doubled")
    func noScope() throws {
        let request = try AuthorizationRequest(clientID: clientID, redirectURI: redirect, responseType: .code, responseMode: .query, scopes: [])
        let url = request.url(base: URL(string: "http://127.0.0.1:9090/")!)
        #expect(url.absoluteString.hasPrefix("http://127.0.0.1:9090/auth/authorize?"))
        let parameters = query(of: url)
        #expect(parameters["scope"] == nil)
        #expect(parameters["response_type"] == "code")
        #expect(parameters["response_mode"] == "query")
    }

    @Test("state and nonce are fresh 256-bit base64url values, different every time")
    func randomStateAndNonce() throws {
        let base64URL = /^[A-Za-z0-9_-]{43}$/
        var seen = Set<String>()
        for _ in 0..<20 {
            let request = try AuthorizationRequest(clientID: clientID, redirectURI: redirect)
            #expect(request.state.wholeMatch(of: base64URL) != nil, "\(request.state)")
            #expect(request.nonce.wholeMatch(of: base64URL) != nil, "\(request.nonce)")
            #expect(request.state != request.nonce)
            seen.insert(request.state)
            seen.insert(request.nonce)
        }
        #expect(seen.count == 40)
    }

    @Test("a scope without form_post is refused", arguments: [ResponseMode.query, .fragment])
    func scopeRequiresFormPost(mode: ResponseMode) {
        let error = #expect(throws: AuthorizationRequestError.self) {
            try AuthorizationRequest(clientID: clientID, redirectURI: redirect, responseType: .code, responseMode: mode, scopes: [.email])
        }
        #expect(error?.message.contains("form_post") == true)
    }

    @Test("a scope with form_post or the popup's web_message is accepted", arguments: [ResponseMode.formPost, .webMessage])
    func scopeWithFormPost(mode: ResponseMode) throws {
        let request = try AuthorizationRequest(clientID: clientID, redirectURI: redirect, responseMode: mode, scopes: [.name])
        #expect(query(of: request.url(base: URL(string: "https://appleid.apple.com")!))["scope"] == "name")
    }

    @Test("code id_token with response_mode=query is refused")
    func idTokenInQuery() {
        let error = #expect(throws: AuthorizationRequestError.self) {
            try AuthorizationRequest(clientID: clientID, redirectURI: redirect, responseType: .codeIDToken, responseMode: .query, scopes: [])
        }
        #expect(error?.message.contains("query") == true)
    }

    @Test("code id_token with fragment and no scope is accepted")
    func idTokenInFragment() throws {
        let request = try AuthorizationRequest(clientID: clientID, redirectURI: redirect, responseType: .codeIDToken, responseMode: .fragment, scopes: [])
        #expect(query(of: request.url(base: URL(string: "https://appleid.apple.com")!))["response_mode"] == "fragment")
    }
}
