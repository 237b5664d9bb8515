import AppleSignIn
import Hummingbird
import Logging

/// One error page: which sentences it shows, its status, and where its button goes. Every failure a person can
/// see maps to one of these here, and only here; handlers and child contexts throw it, `ErrorPageMiddleware`
/// renders it.
struct ErrorPage: Error, Sendable {
    /// The key of the page's heading and message in `Strings` (`error.<key>.heading`, `error.<key>.message`).
    var key: String
    var status: HTTPResponse.Status
    var actionURL: String = "/"
    var actionKey: String = "goToSignIn"
    /// The fields of a callback to offer to send again, when the sign-in was put back to pending.
    var retry: CallbackPayload?

    /// No live session where one is needed.
    static let signedOut = ErrorPage(key: "signedOut", status: .unauthorized)
    static let notFound = ErrorPage(key: "notFound", status: .notFound)
    static let tooLarge = ErrorPage(key: "tooLarge", status: .contentTooLarge)
    static let rateLimited = ErrorPage(key: "rateLimited", status: .tooManyRequests, actionKey: "tryAgain")

    /// The database did not answer; the button tries `retryURL` again.
    static func storeUnavailable(retryURL: String) -> ErrorPage {
        ErrorPage(key: "storeUnavailable", status: .serviceUnavailable, actionURL: retryURL, actionKey: "tryAgain")
    }

    /// The upstream behind the built-in proxy refused or broke the connection; the button tries `retryURL` again.
    static func badGateway(retryURL: String) -> ErrorPage {
        ErrorPage(key: "badGateway", status: .badGateway, actionURL: retryURL, actionKey: "tryAgain")
    }

    /// The upstream behind the built-in proxy did not answer in time; the button tries `retryURL` again.
    static func gatewayTimeout(retryURL: String) -> ErrorPage {
        ErrorPage(key: "gatewayTimeout", status: .gatewayTimeout, actionURL: retryURL, actionKey: "tryAgain")
    }

    /// A request target the front refuses (`RequestTarget`), or a request head it cannot pass on (two `Host`s).
    static let badTarget = ErrorPage(key: "badTarget", status: .badRequest, actionURL: "/", actionKey: "goHome")

    /// The upstream answered with something siwa does not relay (a `101` nobody asked for, an unknown `1xx`).
    static func badUpstream(retryURL: String) -> ErrorPage {
        ErrorPage(key: "badUpstream", status: .badGateway, actionURL: retryURL, actionKey: "tryAgain")
    }

    /// `upstream_max_connections` are in use and no place came in time; the button tries `retryURL` again.
    static func busy(retryURL: String) -> ErrorPage {
        ErrorPage(key: "busy", status: .serviceUnavailable, actionURL: retryURL, actionKey: "tryAgain")
    }

    /// A rule's `max_auth_age`: the person's sign-in with Apple is older than the address allows; the button signs
    /// in again at `url` (`/auth/apple`, back to the address).
    static func signInAgain(url: String) -> ErrorPage {
        ErrorPage(key: "signInAgain", status: .unauthorized, actionURL: url, actionKey: "signInAgain")
    }

    /// A `deny` rule of `access_rules` closes this address to everyone.
    static let closed = ErrorPage(key: "closed", status: .forbidden, actionURL: "/", actionKey: "goHome")

    /// A form's CSRF token was missing or wrong; the button goes back to the form at `retryURL`.
    static func csrf(retryURL: String) -> ErrorPage {
        ErrorPage(key: "csrf", status: .forbidden, actionURL: retryURL, actionKey: "tryAgain")
    }

    /// Anything else that went wrong with `status`.
    static func `internal`(_ status: HTTPResponse.Status = .internalServerError) -> ErrorPage {
        ErrorPage(key: "internal", status: status)
    }
}

extension ErrorPage {
    /// The page of a sign-in that did not complete. `resend`: the return to offer to send again.
    init(_ failure: SignInFailure, resend: CallbackPayload? = nil) {
        let retry = failure == .cancelled || failure.httpStatus == .serviceUnavailable
        self.init(
            key: failure.pageKey, status: failure.httpStatus, actionURL: "/",
            actionKey: resend == nil && retry ? "tryAgain" : "goToSignIn", retry: resend
        )
    }
}

extension SignInFailure {
    /// The status of the page or answer that reports this failure.
    var httpStatus: HTTPResponse.Status {
        switch self {
        case .cancelled: .ok
        case .expired, .malformed, .notVerified: .badRequest
        case .unavailable, .storeUnavailable: .serviceUnavailable
        case .misconfigured: .internalServerError
        case .tooLarge: .contentTooLarge
        }
    }

    /// The key of the sentences that explain it (the page's, and the popup's JSON message).
    var pageKey: String {
        switch self {
        case .cancelled: "cancelled"
        case .expired: "expired"
        case .malformed: "malformed"
        case .notVerified: "notVerified"
        case .unavailable: "unavailable"
        case .storeUnavailable: "storeUnavailable"
        case .misconfigured: "misconfigured"
        case .tooLarge: "tooLarge"
        }
    }

    /// How loud the log line is: an operator must act on credentials and outages, not on a cancel.
    var logLevel: Logger.Level {
        switch self {
        case .misconfigured: .critical
        case .unavailable, .storeUnavailable: .error
        case .cancelled: .info
        default: .notice
        }
    }
}
