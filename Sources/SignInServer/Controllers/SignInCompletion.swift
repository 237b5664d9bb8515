import AppleSignIn
import Foundation
import Hummingbird
import Logging

/// What the form_post return and the pop-up return share: completing the sign-in through the flow, counting
/// it, setting the session cookie (and dropping the binding cookie), and recording a failure.
struct SignInCompletion: Sendable {
    let flow: SignInFlow
    let renderer: PageRenderer
    let cookies: CookiePolicy
    let settings: ServerSettings
    let metrics: ServerMetrics

    /// Completes `payload` for the browser holding `request`'s binding cookie; on success, `response(returnTo)`
    /// gets the session cookie.
    func complete(
        _ payload: CallbackPayload, request: Request, logger: Logger, requireFrontChannelToken: Bool = true,
        response: (String) -> Response
    ) async throws(SignInFailure) -> Response {
        let completed = try await flow.complete(
            payload, bindingToken: request.cookieValue(cookies.bindingName), requireFrontChannelToken: requireFrontChannelToken, logger: logger
        )
        metrics.signInsCompleted.increment()
        var answer = response(completed.returnTo)
        cookies.signedIn(&answer, sessionID: completed.sessionID, lifetime: settings.sessionLifetime)
        return answer
    }

    /// Counts and logs a failed sign-in (`what`: which return it was).
    func record(_ failure: SignInFailure, _ what: String, logger: Logger) {
        metrics.signInFailed(failure.reason)
        logger.log(level: failure.logLevel, "\(what) failed", metadata: ["reason": "\(failure.reason)", "detail": "\(failure.detail)"])
    }
}
