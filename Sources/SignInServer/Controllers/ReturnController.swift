import AppleSignIn
import Foundation
import Hummingbird
import Logging

/// Apple's return: the cross-site form_post (and the query return of a code-only request), validated by the
/// flow, ending in the session cookie and a redirect, or in the page that says what went wrong.
struct ReturnController: Sendable {
    let completion: SignInCompletion
    var renderer: PageRenderer { completion.renderer }
    var cookies: CookiePolicy { completion.cookies }

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
        let started = ContinuousClock.now
        defer { completion.metrics.callbackDuration.record(ContinuousClock.now - started) }
        do {
            return try await completion.complete(payload, request: request, context: context, requireFrontChannelToken: requireFrontChannelToken) {
                Response.redirect(to: $0, type: .normal)
            }
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
        completion.record(failure, "sign-in", request: request, context: context)
        var response = renderer.render(ErrorPage(failure, resend: resend), language: request.pageLanguage)
        if clearBinding { response.setCookie(cookies.expired(cookies.bindingName)) }
        return response
    }
}
