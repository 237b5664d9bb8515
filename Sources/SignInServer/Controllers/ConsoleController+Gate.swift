import Hummingbird
import JOSE

/// Who may enter the console: a signed-in member of `admin_groups`; anyone else is answered before any handler runs.
extension ConsoleController {
    /// `handler` for an operator only (`operatorOf`): anyone else gets the sign-in or the 403 page first.
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

    /// The operator of `context`, or the answer for anyone else: sign in, or the 403 page (no hint of the console).
    private func operatorOf(_ request: Request, _ context: ServerContext) throws -> Gate {
        switch context.visitor {
        case .signedIn(let session, let user):
            let groups = access.groups(subject: user.subject, email: user.email)
            guard groups.contains(where: adminGroups.contains) else { throw ErrorPage.closed }
            return .success(Operator(session: session, user: user))
        case .storeUnavailable(let retryURL): throw ErrorPage.storeUnavailable(retryURL: retryURL)
        case .anonymous, .notLooked:
            let back = request.uri.path.hasPrefix("/auth/admin") && request.method == .get ? request.uri.description : "/auth/admin"
            return .failure(Response.redirect(to: "/auth/apple?return_to=" + FormEncoding.encode(back), type: .found))
        }
    }
}
