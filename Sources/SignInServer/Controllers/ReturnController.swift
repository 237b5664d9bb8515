import AppleSignIn
import Foundation
import Hummingbird
import Logging

/// Apple's return: the cross-site form_post (and the query return of a code-only request), validated by the
/// flow, ending in the session cookie and a redirect, or in the page that says what went wrong.
struct ReturnController: Sendable {
    let flow: SignInFlow
    let renderer: PageRenderer
    let cookies: CookiePolicy
    let settings: ServerSettings
    let metrics: ServerMetrics

    func addRoutes(to router: Router<ServerContext>) {
        router.post("/auth/apple/callback", use: callbackPost)
        router.get("/auth/apple/callback", use: callbackGet)
    }

    @Sendable func callbackPost(_ request: Request, context: ServerContext) async throws -> Response {
        var request = request
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: CallbackPayload.maximumBodySize)
        } catch {
            return failure(.tooLarge, request: request, context: context, clearBinding: false)
        }
        let payload: CallbackPayload
        do {
            payload = try CallbackPayload.parse(formBody: body.readableBytesView)
        } catch {
            return failure(.malformed(error.message), request: request, context: context, clearBinding: false)
        }
        return await complete(payload, request: request, context: context, offerRetry: true)
    }

    @Sendable func callbackGet(_ request: Request, context: ServerContext) async throws -> Response {
        let payload: CallbackPayload
        do {
            payload = try CallbackPayload.parse(query: request.uri.query ?? "")
        } catch {
            return failure(.malformed(error.message), request: request, context: context, clearBinding: false)
        }
        return await complete(payload, request: request, context: context, requireFrontChannelToken: false)
    }

    private func complete(
        _ payload: CallbackPayload, request: Request, context: ServerContext, requireFrontChannelToken: Bool = true, offerRetry: Bool = false
    ) async -> Response {
        let binding = request.cookieValue(cookies.bindingName)
        let started = ContinuousClock.now
        defer { metrics.callbackDuration.record(ContinuousClock.now - started) }
        do {
            let completed = try await flow.complete(payload, bindingToken: binding, requireFrontChannelToken: requireFrontChannelToken, logger: context.logger)
            metrics.signInsCompleted.increment()
            var response = Response.redirect(to: completed.returnTo, type: .normal)
            cookies.signedIn(&response, sessionID: completed.sessionID, lifetime: settings.sessionLifetime)
            return response
        } catch {
            // Apple unreachable before the code was redeemed: the sign-in is pending again, so the page offers to
            // send the same return again, and the binding cookie stays for it.
            if offerRetry, case .unavailable = error {
                return failure(error, request: request, context: context, clearBinding: false, resend: payload)
            }
            return failure(error, request: request, context: context, clearBinding: true)
        }
    }

    private func failure(_ failure: SignInFailure, request: Request, context: ServerContext, clearBinding: Bool, resend: CallbackPayload? = nil) -> Response {
        metrics.signInFailed(failure.reason)
        context.logger.log(level: failure.logLevel, "sign-in failed", metadata: ["reason": "\(failure.reason)", "detail": "\(failure.detail)"])
        var response = renderer.render(ErrorPage(failure, resend: resend), language: request.pageLanguage)
        if clearBinding { response.setCookie(cookies.expired(cookies.bindingName)) }
        return response
    }
}
