import JOSE
import Foundation

/// How Apple returns the result of an authorization (`response_type`).
public enum ResponseType: String, Sendable, Hashable, CaseIterable {
    /// `code`: an authorization code only.
    case code
    /// `code id_token`: a code and a front-channel identity token.
    case codeIDToken = "code id_token"
}

/// How the result reaches the return URL (`response_mode`).
public enum ResponseMode: String, Sendable, Hashable, CaseIterable {
    /// `GET` with a query string.
    case query
    /// In the URL fragment (read by script).
    case fragment
    /// A cross-site `POST` of a form, the web default.
    case formPost = "form_post"
    /// Apple's JS popup mode (`postMessage`).
    case webMessage = "web_message"
}

/// The data Apple may share on first authorization (`scope`).
public enum Scope: String, Sendable, Hashable, CaseIterable {
    /// The user's name.
    case name
    /// The user's (real or relay) email address.
    case email
}

/// Refusal of a parameter combination Apple itself refuses.
public struct AuthorizationRequestError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Why Apple would refuse the request.
    public let message: String
    public var description: String { message }
}

/// One request to `GET {apple}/auth/authorize`, with its fresh `state` and `nonce`.
public struct AuthorizationRequest: Sendable, Hashable {
    /// The Services ID.
    public var clientID: ClientID
    /// The return URL, exactly as registered.
    public var redirectURI: URL
    /// What Apple returns.
    public var responseType: ResponseType
    /// How Apple returns it.
    public var responseMode: ResponseMode
    /// What the user is asked to share.
    public var scopes: [Scope]
    /// Opaque value returned unchanged (binds the return to this request).
    public var state: String
    /// Copied into the identity token's `nonce` claim.
    public var nonce: String

    /// Builds a request with a fresh 256-bit `state` and `nonce`, refusing what Apple refuses:
    /// any scope without `form_post` (or the popup's `web_message`), and `id_token` returned in a query.
    public init(
        clientID: ClientID,
        redirectURI: URL,
        responseType: ResponseType = .codeIDToken,
        responseMode: ResponseMode = .formPost,
        scopes: [Scope] = [.name, .email],
        state: String = RandomToken.generate(),
        nonce: String = RandomToken.generate()
    ) throws(AuthorizationRequestError) {
        if !scopes.isEmpty && responseMode != .formPost && responseMode != .webMessage {
            throw AuthorizationRequestError(message: "Apple requires response_mode=form_post when a scope (name or email) is requested; got response_mode=\(responseMode.rawValue)")
        }
        if responseType == .codeIDToken && responseMode == .query {
            throw AuthorizationRequestError(message: "Apple refuses response_type=code id_token with response_mode=query; use form_post or fragment")
        }
        self.clientID = clientID
        self.redirectURI = redirectURI
        self.responseType = responseType
        self.responseMode = responseMode
        self.scopes = scopes
        self.state = state
        self.nonce = nonce
    }

    /// The URL to send the browser to, under `base` (Apple or the emulator).
    public func url(base: URL) -> URL {
        var components = URLComponents()
        var items = [
            URLQueryItem(name: "client_id", value: clientID.rawValue),
            URLQueryItem(name: "redirect_uri", value: redirectURI.absoluteString),
            URLQueryItem(name: "response_type", value: responseType.rawValue),
            URLQueryItem(name: "response_mode", value: responseMode.rawValue),
        ]
        if !scopes.isEmpty {
            items.append(URLQueryItem(name: "scope", value: scopes.map(\.rawValue).joined(separator: " ")))
        }
        items.append(URLQueryItem(name: "state", value: state))
        items.append(URLQueryItem(name: "nonce", value: nonce))
        components.percentEncodedQuery = items.map { item in
            "\(FormEncoding.encode(item.name))=\(FormEncoding.encode(item.value ?? ""))"
        }.joined(separator: "&")
        let query = components.percentEncodedQuery ?? ""
        return URL(string: AppleSignInConfiguration.trimmedBase(base.absoluteString) + "/auth/authorize?" + query) ?? base
    }
}
