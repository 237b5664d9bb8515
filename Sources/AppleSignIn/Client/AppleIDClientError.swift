/// A failed call to Apple's token or revoke endpoint: Apple's own error code, or a transport failure.
public struct AppleIDClientError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong.
    public struct Kind: Sendable, Hashable, CustomStringConvertible {
        /// Apple's `error` value, or our name for a transport failure.
        public let name: String
        /// Whether trying again later may succeed.
        public let isRetryable: Bool

        /// `invalid_request`: a parameter is missing or malformed.
        public static let invalidRequest = Kind(name: "invalid_request", isRetryable: false)
        /// `invalid_client`: the client id, client secret or redirect URI is wrong.
        public static let invalidClient = Kind(name: "invalid_client", isRetryable: false)
        /// `invalid_grant`: the code or refresh token is expired, used, revoked or not for this client.
        public static let invalidGrant = Kind(name: "invalid_grant", isRetryable: false)
        /// `unauthorized_client`: this client may not use this grant.
        public static let unauthorizedClient = Kind(name: "unauthorized_client", isRetryable: false)
        /// `unsupported_grant_type`.
        public static let unsupportedGrantType = Kind(name: "unsupported_grant_type", isRetryable: false)
        /// `invalid_scope`.
        public static let invalidScope = Kind(name: "invalid_scope", isRetryable: false)
        /// An HTTP 400 with an error code not listed here.
        public static let otherAppleError = Kind(name: "apple_error", isRetryable: false)
        /// No answer within the timeout.
        public static let timeout = Kind(name: "timeout", isRetryable: true)
        /// The connection could not be made or was dropped.
        public static let connectionFailed = Kind(name: "connection_failed", isRetryable: true)
        /// Apple answered 5xx (or 429).
        public static let serverError = Kind(name: "server_error", isRetryable: true)
        /// The answer was larger than any Apple sends.
        public static let responseTooLarge = Kind(name: "response_too_large", isRetryable: false)
        /// The answer was not the JSON Apple sends.
        public static let malformedResponse = Kind(name: "malformed_response", isRetryable: true)

        public var description: String { name }

        static func apple(_ code: String) -> Kind {
            switch code {
            case "invalid_request": .invalidRequest
            case "invalid_client": .invalidClient
            case "invalid_grant": .invalidGrant
            case "unauthorized_client": .unauthorizedClient
            case "unsupported_grant_type": .unsupportedGrantType
            case "invalid_scope": .invalidScope
            default: .otherAppleError
            }
        }
    }

    /// The kind of failure.
    public let kind: Kind
    /// Apple's raw `error` code when Apple sent one.
    public let appleCode: String?
    /// What happened and what to do about it.
    public let message: String

    /// Whether trying again later may succeed.
    public var isRetryable: Bool { kind.isRetryable }

    public var description: String { message }

    /// The actionable message for an Apple error code.
    static func advice(for kind: Kind, code: String) -> String {
        switch kind {
        case .invalidClient:
            "Apple answered invalid_client: the client secret was refused. The secret's sub must equal client_id (the Services ID, or the bundle ID for native apps); check the Team ID (iss), the Key ID (kid) and that the .p8 key belongs to that Key ID and has Sign in with Apple enabled; a secret older than six months is refused too."
        case .invalidGrant:
            "Apple answered invalid_grant: the code or refresh token is expired (codes live five minutes), already used, revoked, issued to another client_id (a native app's code must be exchanged with its bundle ID), or the redirect_uri differs from the one in the authorization request."
        case .invalidRequest:
            "Apple answered invalid_request: a required parameter is missing or malformed."
        case .unauthorizedClient:
            "Apple answered unauthorized_client: this client_id is not allowed to use this grant; check that Sign in with Apple is enabled for it."
        case .unsupportedGrantType:
            "Apple answered unsupported_grant_type: the grant_type is not one Apple supports."
        case .invalidScope:
            "Apple answered invalid_scope: the requested scope is not allowed."
        default:
            "Apple answered with the error \(code)."
        }
    }
}
