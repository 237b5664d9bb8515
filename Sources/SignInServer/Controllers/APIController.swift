import AppleSignIn
import Foundation
import Hummingbird
import Logging

/// JSON endpoints: native apps' sign-in and their session. Errors are RFC 9457 problem details.
struct APIController: Sendable {
    let native: NativeSignIn
    let store: any UsersAndSessions
    /// Who asks (the store shares out its look-ups by client address).
    let proxy: ClientAddressResolver

    func addRoutes(to router: Router<ServerContext>) {
        // Also under /auth/, which stays siwa's in front of an upstream (`SiwaPaths`).
        for prefix in ["", "/auth"] {
            router.post(RouterPath(prefix + "/api/apple/native"), use: nativeSignIn)
            router.get(RouterPath(prefix + "/api/session"), use: session)
        }
    }

    @Sendable func nativeSignIn(_ request: Request, context: ServerContext) async throws -> Response {
        var request = request
        guard let body = try? await request.collectBody(upTo: 64 * 1024) else {
            return Response.problem(.contentTooLarge, "too-large", "Request too large", "The body is larger than 64 KiB.")
        }
        let input: NativeSignIn.Request
        do {
            input = try JSONDecoder().decode(NativeSignIn.Request.self, from: Data(body.readableBytesView))
        } catch {
            return Response.problem(.badRequest, "malformed", "Malformed request", "Send JSON with identityToken and authorizationCode.")
        }
        // The app's current session, when it sends one: renewed in place if the new token is the same person's.
        var current: NativeSignIn.Current?
        if request.headers[.authorization] != nil, case .found(let session, _, let token) = await Self.bearerSession(request, context: context, store: store, proxy: proxy) {
            current = NativeSignIn.Current(token: token, session: session)  // unknown or expired: a sign-in as without one
        }
        do {
            let details = SessionDetails(userAgent: request.headers[.userAgent], address: context.remoteAddress?.ipAddress, via: "native")
            return Response.json(try await native.signIn(input, details: details, current: current, logger: context.logger))
        } catch {
            context.logger.notice("native sign-in failed", metadata: ["reason": "\(error.reason)", "detail": "\(error.detail)"])
            return switch error {
            case .expired: Response.problem(.badRequest, "expired", "Authorization code expired or used", "Ask the user to sign in with Apple again.")
            case .notVerified: Response.problem(.unauthorized, "not-verified", "Identity token not verified", error.detail)
            case .unavailable: Response.problem(.serviceUnavailable, "apple-unavailable", "Apple could not be reached", "Try again shortly.")
            case .storeUnavailable: Response.problem(.serviceUnavailable, "store-unavailable", "Service temporarily unavailable", "Try again shortly.")
            case .misconfigured: Response.problem(.internalServerError, "misconfigured", "Server misconfigured", "The server's Apple credentials for this app were refused.")
            default: Response.problem(.badRequest, "malformed", "Malformed request", error.detail)
            }
        }
    }

    /// The session a native app's `Authorization: Bearer <session_token>` names, or the problem to answer (401 without
    /// a bearer or for an unknown or expired one, 503 when the store did not answer). `/api/session` and
    /// `/auth/api/sessions` ask it alike.
    enum BearerSession {
        /// The session, its person, and the session token as the app sent it.
        case found(SessionRecord, UserRecord, token: String)
        case refused(Response)
    }

    static func bearerSession(_ request: Request, context: ServerContext, store: any UsersAndSessions, proxy: ClientAddressResolver) async -> BearerSession {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer "), header.count > 7 else {
            return .refused(Response.problem(.unauthorized, "no-session", "Not signed in", "Send Authorization: Bearer <session_token>."))
        }
        let token = String(header.dropFirst(7))
        do {
            guard let (session, user) = try await store.session(idHash: SignInFlow.hash(token), now: Date(), askedBy: proxy.clientAddress(request, context: context)) else {
                return .refused(Response.problem(.unauthorized, "no-session", "Not signed in", "The session token is unknown or expired."))
            }
            return .found(session, user, token: token)
        } catch {
            return .refused(Response.problem(.serviceUnavailable, "store-unavailable", "Try again", "The database did not answer."))
        }
    }

    @Sendable func session(_ request: Request, context: ServerContext) async throws -> Response {
        let (session, user): (SessionRecord, UserRecord)
        switch await Self.bearerSession(request, context: context, store: store, proxy: proxy) {
        case .found(let found, let foundUser, _): (session, user) = (found, foundUser)
        case .refused(let answer): return answer
        }
        struct Answer: Encodable {
            var sub: String
            var email: String?
            var is_private_email: Bool
            var name: String?
            var signed_in_at: Date
            var expires_at: Date
            /// When the person last authenticated with Apple for this session (renewed by a native app's renewal).
            var auth_time: Date
        }
        return Response.json(Answer(
            sub: user.subject, email: user.email, is_private_email: user.isPrivateEmail, name: user.displayName, signed_in_at: session.createdAt,
            expires_at: session.expiresAt, auth_time: session.authenticatedAt
        ))
    }
}
