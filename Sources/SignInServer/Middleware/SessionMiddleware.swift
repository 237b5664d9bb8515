import Foundation
import Hummingbird
import Logging

/// Looks the request's session cookie up once and puts what it found in `context.visitor`, for the handlers
/// and child contexts (`SignedInContext`) of the routes it guards. A store that does not answer is recorded,
/// not thrown: a page that can be shown signed out (the sign-in page) still is.
struct SessionMiddleware: RouterMiddleware {
    typealias Context = ServerContext
    let store: any UsersAndSessions
    let cookies: CookiePolicy
    /// Who asks (the store shares out its look-ups by client address).
    let resolver: ClientAddressResolver

    func handle(_ request: Request, context: ServerContext, next: (Request, ServerContext) async throws -> Response) async throws -> Response {
        var context = context
        context.visitor = await visitor(request, context: context)
        return try await next(request, context)
    }

    func visitor(_ request: Request, context: ServerContext) async -> Visitor {
        guard let idHash = request.cookieValue(cookies.sessionName).flatMap(SessionCookie.hash) else { return .anonymous(hadCookie: false) }
        do {
            let client = resolver.clientAddress(request, context: context)
            guard let (session, user) = try await store.session(idHash: idHash, now: Date(), askedBy: client) else {
                return .anonymous(hadCookie: true)
            }
            return .signedIn(session, user)
        } catch let busy as SessionLookupsBusy {
            context.logger.warning("session look-up not made: \(busy)")
            return .storeUnavailable(retryURL: request.uri.path)
        } catch {
            context.logger.error("store unavailable", metadata: ["error": "\(error)"])
            return .storeUnavailable(retryURL: request.uri.path)
        }
    }
}
