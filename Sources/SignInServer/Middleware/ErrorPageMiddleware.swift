import Hummingbird

/// Turns errors that escape a handler (unknown route, oversized body, a bug) into a page a person can read.
struct ErrorPageMiddleware: RouterMiddleware {
    typealias Context = ServerContext
    let renderer: PageRenderer

    func handle(_ request: Request, context: ServerContext, next: (Request, ServerContext) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as any HTTPResponseError {
            let language = WebController.language(request)
            switch error.status {
            case .notFound:
                return renderer.errorPage("notFound", language: language, status: .notFound)
            case .contentTooLarge:
                return renderer.errorPage("tooLarge", language: language, status: .contentTooLarge)
            default:
                if error.status.code >= 500 { context.logger.error("request failed", metadata: ["status": "\(error.status.code)"]) }
                return renderer.errorPage("internal", language: language, status: error.status)
            }
        } catch {
            context.logger.error("unhandled error", metadata: ["error": "\(String(describing: type(of: error)))"])
            return renderer.errorPage("internal", language: WebController.language(request), status: .internalServerError)
        }
    }
}
