import AppleSignIn
import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// The pop-up sign-in: `popup.js` sends what Apple's pop-up posted to the page, with the double-submit CSRF
/// token; it is validated exactly like a form_post return. Answers JSON for the script.
struct PopupController: Sendable {
    let completion: SignInCompletion
    var renderer: PageRenderer { completion.renderer }
    var cookies: CookiePolicy { completion.cookies }
    var settings: ServerSettings { completion.settings }

    func addRoutes(to router: Router<ServerContext>) {
        router.post("/auth/apple/popup", use: popupResult)
    }

    /// What Apple's JavaScript hands the page: `{authorization: {code, id_token, state}, user}` or `{error}`.
    private struct PopupResult: Decodable {
        struct Authorization: Decodable {
            var code: String?
            var id_token: String?
            var state: String?
        }
        struct User: Decodable {
            struct Name: Decodable {
                var firstName: String?
                var lastName: String?
            }
            var name: Name?
            var email: String?
        }
        var authorization: Authorization?
        var user: User?
        var error: String?
        var state: String?
    }

    @Sendable func popupResult(_ request: Request, context: ServerContext) async throws -> Response {
        var request = request
        let language = request.pageLanguage
        guard let name = HTTPField.Name.xCSRFToken, let header = request.headers[name], let cookie = request.cookieValue(cookies.csrfName),
            ConstantTime.equals(header, cookie), request.headers[.origin].map({ $0 == settings.origin }) ?? true
        else {
            context.logger.notice("popup result refused: CSRF token or origin wrong")
            return Response.json(["error": "csrf", "message": renderer.string("error.csrf.message", language)], status: .forbidden)
        }
        let result: PopupResult
        do {
            let body = try await request.collectBody(upTo: CallbackPayload.maximumBodySize)
            result = try JSONDecoder().decode(PopupResult.self, from: Data(body.readableBytesView))
        } catch {
            return failure(.malformed("popup result is not JSON"), request: request, language: language, context: context)
        }
        let user = result.user.map { AppleUser(firstName: $0.name?.firstName, lastName: $0.name?.lastName, email: $0.email) }
        let payload = CallbackPayload(code: result.authorization?.code, idToken: result.authorization?.id_token, state: result.authorization?.state ?? result.state, user: user, error: result.error)
        do {
            return try await completion.complete(payload, request: request, context: context) { Response.json(["redirect": $0]) }
        } catch {
            return failure(error, request: request, language: language, context: context)
        }
    }

    private func failure(_ failure: SignInFailure, request: Request, language: PageLanguage, context: ServerContext) -> Response {
        completion.record(failure, "popup sign-in", request: request, context: context)
        let key = failure.pageKey
        let message = renderer.string("error.\(key).heading", language) + ". " + renderer.string("error.\(key).message", language)
        return Response.json(["error": failure.reason, "message": message], status: failure.httpStatus)
    }
}
