import HTTPTypes
import Hummingbird

/// Adds the security headers every response carries: a strict Content-Security-Policy (no inline script or
/// style), no framing, no referrer to other sites, no MIME sniffing, and HSTS when served over HTTPS.
struct SecurityHeadersMiddleware<Context: RequestContext>: RouterMiddleware {
    let contentSecurityPolicy: String
    let hsts: Bool

    init(formActionOrigins: [String], hsts: Bool) {
        let formAction = (["'self'"] + formActionOrigins).joined(separator: " ")
        contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action \(formAction); frame-ancestors 'none'; base-uri 'none'"
        self.hsts = hsts
    }

    /// The headers for `settings`: forms may also post to Apple's origin; HSTS when cookies are `Secure`.
    init(settings: ServerSettings) {
        var formActions: [String] = []
        if let scheme = settings.apple.appleBaseURL.scheme, let host = settings.apple.appleBaseURL.host {
            formActions.append("\(scheme)://\(host)" + (settings.apple.appleBaseURL.port.map { ":\($0)" } ?? ""))
        }
        self.init(formActionOrigins: formActions, hsts: settings.secureCookies)
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response = try await next(request, context)
        secure(&response)
        return response
    }

    /// Adds the headers to one of siwa's own responses (the built-in proxy answers with pages of its own too, but
    /// leaves the upstream's answers as they are).
    func secure(_ response: inout Response) {
        response.headers[.contentSecurityPolicy] = contentSecurityPolicy
        response.headers[.xContentTypeOptions] = "nosniff"
        if let name = HTTPField.Name.referrerPolicy { response.headers[name] = "same-origin" }
        if let name = HTTPField.Name.xFrameOptions { response.headers[name] = "DENY" }
        if hsts { response.headers[.strictTransportSecurity] = "max-age=63072000; includeSubDomains" }
    }
}

extension HTTPField.Name {
    /// `Referrer-Policy` (not among swift-http-types' predefined names).
    static let referrerPolicy = HTTPField.Name("Referrer-Policy")
    /// `X-Frame-Options`, for browsers that predate `frame-ancestors`.
    static let xFrameOptions = HTTPField.Name("X-Frame-Options")
    /// `X-Forwarded-For`, believed from trusted proxies only.
    static let xForwardedFor = HTTPField.Name("X-Forwarded-For")
    /// `X-Forwarded-Host`, believed from trusted proxies only.
    static let xForwardedHost = HTTPField.Name("X-Forwarded-Host")
    /// `X-Forwarded-Proto`, believed from trusted proxies only.
    static let xForwardedProto = HTTPField.Name("X-Forwarded-Proto")
    /// `X-CSRF-Token`, sent by `popup.js`.
    static let xCSRFToken = HTTPField.Name("X-CSRF-Token")
}
