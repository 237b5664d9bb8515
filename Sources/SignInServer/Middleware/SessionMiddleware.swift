import Foundation
import HTTPTypes
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

    /// Who asks at the door: the bearer token the request presents (`credential`), else its session cookie. A
    /// native app's session token opens the door as its app (`native:` sessions only: a browser's session id is no
    /// bearer token); an access token of siwa's OpenID provider as its client.
    func doorVisitor(_ request: Request, credential: BearerCredential, context: ServerContext) async -> Visitor {
        await doorVisitor(
            fields: request.headers, credential: credential, clientAddress: resolver.clientAddress(request, context: context), retryURL: request.uri.path,
            logger: context.logger
        )
    }

    /// The same, from the request's header fields alone (a door that has no `Request` of the original: Envoy's gRPC
    /// check). `clientAddress`: who asks (the store shares out its look-ups by it); `retryURL`: the page to try again
    /// when the store does not answer.
    func doorVisitor(fields: HTTPFields, credential: BearerCredential, clientAddress: String, retryURL: String, logger: Logger) async -> Visitor {
        let token: String
        switch credential {
        case .none: return await visitor(fields: fields, clientAddress: clientAddress, retryURL: retryURL, logger: logger)
        case .refused(let problem), .malformed(let problem): return .badToken(problem)
        case .token(let presented): token = presented
        }
        let hash = SessionCookie.digest(token)
        do {
            let access = token.hasPrefix(BearerCredential.accessTokenPrefix)
            guard let (session, user, holder) = try await store.bearerRecord(hash: hash, access: access, now: Date(), askedBy: clientAddress) else {
                logger.notice("bearer token refused at the door: unknown, expired or its session ended")
                return .badToken(.notValid)
            }
            return .bearer(session, user, client: holder)
        } catch let busy as SessionLookupsBusy {
            logger.warning("token look-up not made: \(busy)")
            return .storeUnavailable(retryURL: retryURL)
        } catch {
            logger.error("store unavailable", metadata: ["error": "\(String(describing: type(of: error)))"])
            return .storeUnavailable(retryURL: retryURL)
        }
    }

    func visitor(_ request: Request, context: ServerContext) async -> Visitor {
        await visitor(fields: request.headers, clientAddress: resolver.clientAddress(request, context: context), retryURL: request.uri.path, logger: context.logger)
    }

    /// Who the session cookie among `fields` names.
    func visitor(fields: HTTPFields, clientAddress: String, retryURL: String, logger: Logger) async -> Visitor {
        guard let idHash = fields.cookieValue(cookies.sessionName).flatMap(SessionCookie.hash) else { return .anonymous(hadCookie: false) }
        do {
            guard let (session, user) = try await store.session(idHash: idHash, now: Date(), askedBy: clientAddress) else {
                return .anonymous(hadCookie: true)
            }
            return .signedIn(session, user)
        } catch let busy as SessionLookupsBusy {
            logger.warning("session look-up not made: \(busy)")
            return .storeUnavailable(retryURL: retryURL)
        } catch {
            logger.error("store unavailable", metadata: ["error": "\(error)"])
            return .storeUnavailable(retryURL: retryURL)
        }
    }
}
