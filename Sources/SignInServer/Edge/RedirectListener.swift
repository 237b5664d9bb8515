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
        let origin = RedirectTarget.origin(
            authority: request.head.authority, domains: edge.domains, certificates: service.certificates.names, httpsPort: edge.httpsPort, publicOrigin: publicOrigin
        )
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
    /// The HTTPS origin a request naming `authority` (its `Host`) is sent to: that host when siwa serves it (`serves`),
    /// else the first of `domains`, else `publicOrigin`'s host. The host of a request is taken only when it is a DNS
    /// name as certificates name hosts (letters, digits, hyphens, dots between labels), lowercased.
    static func origin(authority: String?, domains: [String], certificates: [String], httpsPort: Int, publicOrigin: String) -> String {
        let port = httpsPort == 443 ? "" : ":\(httpsPort)"
        let named = authority.map { String($0.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).first ?? "").lowercased() }
        if let named, isHostName(named), serves(named, domains: domains, certificates: certificates) {
            return "https://\(named)\(port)"
        }
        if let first = domains.first { return "https://\(first)\(port)" }
        return secure(publicOrigin)
    }

    /// A DNS name of labels of letters, digits and hyphens (RFC 1123 2.1), none empty, none starting or ending with a
    /// hyphen, at most 253 bytes: no wildcard, no address literal, no trailing dot.
    static func isHostName(_ host: String) -> Bool {
        guard !host.isEmpty, host.utf8.count <= 253 else { return false }
        return host.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { label in
            guard let first = label.utf8.first, let last = label.utf8.last, label.utf8.count <= 63, first != UInt8(ascii: "-"), last != UInt8(ascii: "-") else { return false }
            return label.utf8.allSatisfy { byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-")
            }
        }
    }

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
