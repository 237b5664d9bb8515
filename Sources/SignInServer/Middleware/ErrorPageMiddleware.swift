import Hummingbird

/// Turns errors that escape a handler or a child context into a page a person can read: an `ErrorPage` as it
/// is, an unknown route or oversized body as theirs, anything else (a bug) as the internal-error page.
struct ErrorPageMiddleware: RouterMiddleware {
    typealias Context = ServerContext
    let renderer: PageRenderer

    func handle(_ request: Request, context: ServerContext, next: (Request, ServerContext) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let page as ErrorPage {
            return renderer.render(page, language: request.pageLanguage)
        } catch let error as any HTTPResponseError {
            let page: ErrorPage = switch error.status {
            case .notFound: .notFound
            case .contentTooLarge: .tooLarge
            default: .internal(error.status)
            }
            if error.status.code >= 500 { context.logger.error("request failed", metadata: ["status": "\(error.status.code)"]) }
            return renderer.render(page, language: request.pageLanguage)
        } catch {
            context.logger.error("unhandled error", metadata: ["error": "\(String(describing: type(of: error)))"])
            return renderer.render(.internal(), language: request.pageLanguage)
        }
    }
}
