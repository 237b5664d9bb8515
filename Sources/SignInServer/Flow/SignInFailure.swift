import AppleSignIn

/// Why a sign-in did not complete, in the terms the person sees; each maps to one error page.
public enum SignInFailure: Error, Sendable, Hashable {
    /// The person pressed Cancel at Apple.
    case cancelled
    /// The state is unknown, used or older than 10 minutes, or the binding cookie is missing or wrong.
    case expired
    /// Apple's answer was malformed (bad form, missing fields).
    case malformed(String)
    /// Apple's answer did not verify (token signature, nonce, c_hash, sub mismatch…).
    case notVerified(String)
    /// Apple (or the database) could not be reached; trying again later may work.
    case unavailable(String)
    /// The database did not answer; trying again later may work.
    case storeUnavailable(String)
    /// The server's Apple credentials are wrong; an operator must fix the configuration.
    case misconfigured(String)
    /// The callback body was larger than 64 KiB.
    case tooLarge

    /// What a failed code exchange means for the person: wrong credentials are the operator's to fix, a used
    /// or expired code starts over, a transport failure is an outage.
    init(exchange error: AppleIDClientError) {
        switch error.kind {
        case .invalidClient, .unauthorizedClient: self = .misconfigured(error.message)
        case .invalidGrant: self = .expired
        default: self = error.isRetryable ? .unavailable(error.message) : .notVerified(error.message)
        }
    }

    /// A short code for logs and metrics.
    public var reason: String {
        switch self {
        case .cancelled: "cancelled"
        case .expired: "expired"
        case .malformed: "malformed"
        case .notVerified: "not_verified"
        case .unavailable: "unavailable"
        case .storeUnavailable: "store_unavailable"
        case .misconfigured: "misconfigured"
        case .tooLarge: "too_large"
        }
    }

    /// What the log says (never a secret).
    public var detail: String {
        switch self {
        case .cancelled: "the user cancelled at Apple"
        case .expired: "unknown, used or expired state, or binding cookie mismatch"
        case .malformed(let detail), .notVerified(let detail), .unavailable(let detail), .storeUnavailable(let detail), .misconfigured(let detail): detail
        case .tooLarge: "callback body over 64 KiB"
        }
    }
}
