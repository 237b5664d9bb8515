import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// `port` when siwa terminates TLS (issue 36): only what must stay on plain HTTP. ACME's HTTP-01 answers, `/healthz`
/// and `/readyz` (load balancers ask there), and for everything else a redirect to the same path on HTTPS: 301 for
/// GET and HEAD, 308 for other methods, so a form's POST is not turned into a GET. The redirect names the host the
/// request named when it is one of `tls_domains`, else the first domain: never a host a client made up. Without
/// `tls_domains` (the operator's certificate files and `public_url`), a host the certificates name, else
/// `publicOrigin`'s host and port. `ready`: the main listener's `/readyz`.
func buildRedirectRouter(
    edge: EdgeSettings, service: EdgeCertificateService, publicOrigin: String, ready: @escaping @Sendable (Request, ServerContext) async throws -> Response
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
        let port = edge.httpsPort == 443 ? "" : ":\(edge.httpsPort)"
        let origin: String
        if let named, RedirectTarget.serves(named, domains: edge.domains, certificates: service.certificates.names) {
            origin = "https://\(named)\(port)"
        } else if let first = edge.domains.first {
            origin = "https://\(first)\(port)"
        } else {
            origin = RedirectTarget.secure(publicOrigin)
        }
        let path = request.head.path ?? "/"
        let target = origin + (path.hasPrefix("/") ? path : "/")
        let status: HTTPResponse.Status = request.method == .get || request.method == .head ? .movedPermanently : .permanentRedirect
        return Response(status: status, headers: [.location: target, .contentType: "text/plain; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: "Moved to \(target)\n")))
    }
    router.addMiddleware { RedirectEverything(redirect: redirect) }
    return router
}

/// Where the plain port's redirect goes.
enum RedirectTarget {
    /// Whether `host` (lowercased, without port) is one siwa serves HTTPS for: one of `domains`, or, when none are
    /// configured, a name of the installed certificates (a wildcard's covering one label).
    static func serves(_ host: String, domains: [String], certificates: [String]) -> Bool {
        guard domains.isEmpty else { return domains.contains(host) }
        return certificates.contains(host) || (host.contains(".") && certificates.contains(EdgeTLS.wildcard(of: host)))
    }

    /// `origin` (`public_url`) on https: a redirect to its plain self would never end.
    static func secure(_ origin: String) -> String {
        guard let url = URL(string: origin), let host = url.host, !host.isEmpty else { return "https://localhost" }
        let shown = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        let https = url.scheme?.lowercased() == "https"
        return "https://\(shown)" + (https ? url.port.map { ":\($0)" } ?? "" : "")
    }
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
