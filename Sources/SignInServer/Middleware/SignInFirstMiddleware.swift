import Hummingbird
import JOSE

/// Sends a browser that opens a page needing a session, without one, to the sign-in and back to that page, on the
/// routes it guards (after `SessionMiddleware`); anything else goes on, to the 401 of `SignedInContext`.
struct SignInFirstMiddleware: RouterMiddleware {
    typealias Context = ServerContext

    func handle(_ request: Request, context: ServerContext, next: (Request, ServerContext) async throws -> Response) async throws -> Response {
        guard case .anonymous = context.visitor else { return try await next(request, context) }
        return try request.signInFirst()
    }
}

extension Request {
    /// The answer to someone not signed in where a session is needed. A browser navigating here (`isPageNavigation`)
    /// is sent to the sign-in, which comes back to this page (`return_to`, checked by `SignInFlow.safeReturnPath` when
    /// the sign-in starts, as the button's is); anything else (a fetch, a form, an API client) gets the 401 page,
    /// since a redirect to Apple is of no use to it.
    func signInFirst() throws -> Response {
        guard headers.isPageNavigation(method: method.rawValue) else { throw ErrorPage.signedOut }
        var response = Response.redirect(to: "/auth/apple?return_to=" + FormEncoding.encode(uri.description), type: .found)
        response.headers[.cacheControl] = "no-store"
        return response
    }
}
