import Hummingbird

/// Who may enter the console: a signed-in member of `admin_groups`. Anyone else gets one answer at every path below
/// `/auth/admin` (the 403 page; signed out, the sign-in and back, or 401), whether the path exists or not, so that it
/// tells nothing of the console.
extension ConsoleController {
    /// Answers anyone but an operator at every path below `/auth/admin`, with any method, before the router looks for a
    /// route, and looks the session up for the console's handlers. A middleware of the router, not of a group: a
    /// group's middleware runs only for the routes it has, so an unknown path would be the router's 404 for anyone.
    struct Door: RouterMiddleware {
        typealias Context = ServerContext
        let console: ConsoleController
        let sessions: SessionMiddleware

        func handle(_ request: Request, context: ServerContext, next: (Request, ServerContext) async throws -> Response) async throws -> Response {
            guard Self.isBelowConsole(request.uri.path) else { return try await next(request, context) }
            return try await sessions.handle(request, context: context) { request, context in
                switch try console.operatorOf(request, context) {
                case .success: return try await next(request, context)
                case .failure(let answer): return answer
                }
            }
        }

        /// Whether the router would take `path` below `/auth/admin`: its first two segments, with empty ones skipped as
        /// the router skips them (`/auth/admin/`, `//auth//admin`), are `auth` and `admin`.
        static func isBelowConsole(_ path: String) -> Bool {
            let segments = path.split(separator: "/", maxSplits: 2)
            return segments.count >= 2 && segments[0] == "auth" && segments[1] == "admin"
        }
    }

    /// `handler` for an operator only (`operatorOf`): anyone else gets the sign-in or the 403 page first (`Door` has
    /// answered them already; this keeps a handler from ever running for anyone else).
    func guarded(
        _ handler: @escaping @Sendable (Request, ServerContext, Operator) async throws -> Response
    ) -> @Sendable (Request, ServerContext) async throws -> Response {
        { request, context in
            switch try operatorOf(request, context) {
            case .success(let op): return try await handler(request, context, op)
            case .failure(let answer): return answer
            }
        }
    }

    /// Who is operating: a signed-in member of `admin_groups`.
    struct Operator: Sendable {
        let session: SessionRecord
        let user: UserRecord
        var name: String { user.email ?? user.subject }
    }

    /// An operator, or the answer for anyone else.
    enum Gate {
        case success(Operator)
        case failure(Response)
    }

    /// The operator of `context`, or the answer for anyone else: the 403 page (no hint of the console), or for someone
    /// signed out `signInFirst` (a browser to the sign-in and back, anything else 401).
    fileprivate func operatorOf(_ request: Request, _ context: ServerContext) throws -> Gate {
        switch context.visitor {
        case .signedIn(let session, let user):
            let groups = access.groups(subject: user.subject, email: user.email)
            guard groups.contains(where: adminGroups.contains) else { throw ErrorPage.closed }
            return .success(Operator(session: session, user: user))
        case .storeUnavailable(let retryURL): throw ErrorPage.storeUnavailable(retryURL: retryURL)
        case .anonymous, .notLooked, .bearer, .badToken: return .failure(try request.signInFirst())
        }
    }
}
