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
    let audit: AuditTrail
    let proxy: ClientAddressResolver
    let invitations: Invitations

    /// Completes `payload` for the browser holding `request`'s binding cookie; on success, `response(returnTo)`
    /// gets the session cookie.
    func complete(
        _ payload: CallbackPayload, request: Request, context: ServerContext, requireFrontChannelToken: Bool = true,
        response: (String) -> Response
    ) async throws(SignInFailure) -> Response {
        let logger = context.logger
        let binding = CookiePolicy.readBinding(request.cookieValue(cookies.bindingName))
        let details = SessionDetails(userAgent: request.headers[.userAgent], address: proxy.clientAddress(request, context: context), via: "page")
        let completed = try await flow.complete(
            payload, bindingToken: binding.token, requireFrontChannelToken: requireFrontChannelToken, details: details, logger: logger
        )
        metrics.signInsCompleted.increment()
        audit.record(AuditEvent("sign-in", sub: completed.user.subject, email: completed.user.email, ip: proxy.clientAddress(request, context: context)))
        // A browser that signs in again gets a new session id, and the session it held ends now rather than when it
        // expires: whoever learnt the old id (a shared machine, a fixated cookie) holds nothing. Named by the binding
        // cookie (Apple's cross-site return), or by the session cookie itself (the pop-up's same-site return).
        let held = Set([binding.replaces, request.cookieValue(cookies.sessionName).flatMap(SessionCookie.hash)].compactMap { $0 })
        for oldHash in held where oldHash != SignInFlow.hash(completed.sessionID) {
            do {
                _ = try await flow.store.deleteSession(idHash: oldHash)
            } catch {
                logger.warning("the session this browser held before signing in again was not ended", metadata: ["error": "\(error)"])
            }
        }
        var returnTo = completed.returnTo
        if let invitation = completed.invitationHash {
            // Started from an invitation's page: the person Apple named joins its groups, and sees what became of it.
            let redemption: InvitationRedemption?
            do {
                redemption = try await invitations.redeem(tokenHash: invitation, for: completed.user, ip: proxy.clientAddress(request, context: context))
            } catch {
                logger.error("the invitation of a sign-in was not used: the store did not answer", metadata: ["error": "\(String(describing: type(of: error)))"])
                redemption = nil
            }
            returnTo = InvitationController.resultPath(redemption)
        }
        var answer = response(returnTo)
        cookies.signedIn(&answer, sessionID: completed.sessionID, lifetime: settings.sessionLifetime)
        return answer
    }

    /// Counts, logs and audits a failed sign-in (`what`: which return it was).
    func record(_ failure: SignInFailure, _ what: String, request: Request, context: ServerContext) {
        metrics.signInFailed(failure.reason)
        context.logger.log(level: failure.logLevel, "\(what) failed", metadata: ["reason": "\(failure.reason)", "detail": "\(failure.detail)"])
        audit.record(AuditEvent("sign-in-failed", ip: proxy.clientAddress(request, context: context), reason: failure.reason))
    }
}
