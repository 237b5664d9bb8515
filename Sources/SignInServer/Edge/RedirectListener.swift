import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// `port` when siwa terminates TLS (issue 36): only what must stay on plain HTTP. ACME's HTTP-01 answers, `/healthz`
/// and `/readyz` (load balancers ask there), and for everything else a redirect to the same path on HTTPS: 301 for
/// GET and HEAD, 308 for other methods, so a form's POST is not turned into a GET. The redirect names the host the
/// request named when it is one of `tls_domains`, else the first domain: never a host a client made up.
/// `ready`: the main listener's `/readyz`.
func buildRedirectRouter(
    edge: EdgeSettings, service: EdgeCertificateService, ready: @escaping @Sendable (Request, ServerContext) async throws -> Response
) -> Router<ServerContext> {
    let router = Router(context: ServerContext.self)
    router.get("/.well-known/acme-challenge/:token") { _, context in
        guard let token = context.parameters.get("token"), token.count <= 256 else { return Response.plain(.notFound, "no such challenge") }
        // This instance's own order, else another instance's (in the store).
        var answer = service.http01.answer(token: token)
        if answer == nil { answer = await service.challengeAnswer(.http01, token: token) }
        guard let answer else { return Response.plain(.notFound, "no such challenge") }
        return Response(status: .ok, headers: [.contentType: "application/octet-stream"], body: .init(byteBuffer: ByteBuffer(string: answer)))
    }
    router.get("/healthz") { _, _ in Response.plain(.ok, "ok") }
    router.get("/readyz", use: ready)
    let redirect: @Sendable (Request, ServerContext) async throws -> Response = { request, _ in
        let named = request.head.authority.map { authority -> String in
            let host = authority.hasPrefix("[") ? authority : String(authority.split(separator: ":", maxSplits: 1).first ?? "")
            return host.lowercased()
        }
        let host = named.flatMap { edge.domains.contains($0) ? $0 : nil } ?? edge.domains.first ?? "localhost"
        let port = edge.httpsPort == 443 ? "" : ":\(edge.httpsPort)"
        let path = request.head.path ?? "/"
        let target = "https://\(host)\(port)\(path.hasPrefix("/") ? path : "/")"
        let status: HTTPResponse.Status = request.method == .get || request.method == .head ? .movedPermanently : .permanentRedirect
        return Response(status: status, headers: [.location: target, .contentType: "text/plain; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: "Moved to \(target)\n")))
    }
    router.addMiddleware { RedirectEverything(redirect: redirect) }
    return router
}

/// Answers every request no route of the redirect listener has with the redirect to HTTPS.
struct RedirectEverything: RouterMiddleware {
    let redirect: @Sendable (Request, ServerContext) async throws -> Response

    func handle(_ request: Request, context: ServerContext, next: (Request, ServerContext) async throws -> Response) async throws -> Response {
        do {
            let response = try await next(request, context)
            return response
        } catch let error as HTTPError where error.status == .notFound {
            return try await redirect(request, context)
        }
    }
}
