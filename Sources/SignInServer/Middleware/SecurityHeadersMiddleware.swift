import Foundation
import HTTPTypes
import Hummingbird

/// Adds the security headers every response carries: a strict Content-Security-Policy (no inline script or
/// style), no framing, no referrer to other sites, no MIME sniffing, and HSTS when served over HTTPS.
struct SecurityHeadersMiddleware<Context: RequestContext>: RouterMiddleware {
    let contentSecurityPolicy: String
    /// The `Strict-Transport-Security` value, if any.
    let hsts: String?
    private let formActions: String
    private let styles: String
    /// The headers as fields, made (and their values checked) once: every page of siwa's carries them.
    private let fields: HTTPFields

    /// `styleOrigins`: where else stylesheets may come from (siwa's `public_url`, for its pages shown on an app's
    /// host by a forward-auth proxy, which link siwa's stylesheets there).
    init(formActionOrigins: [String], styleOrigins: [String] = [], hsts: String?) {
        formActions = (["'self'"] + formActionOrigins).joined(separator: " ")
        styles = (["'self'"] + styleOrigins).joined(separator: " ")
        contentSecurityPolicy = Self.policy(formActions: formActions, styles: styles)
        self.hsts = hsts
        var fields = HTTPFields()
        Self.set(&fields, policy: contentSecurityPolicy, hsts: hsts)
        self.fields = fields
    }

    private static func set(_ headers: inout HTTPFields, policy: String, hsts: String?) {
        headers[.contentSecurityPolicy] = policy
        headers[.xContentTypeOptions] = "nosniff"
        if let name = HTTPField.Name.referrerPolicy { headers[name] = "same-origin" }
        if let name = HTTPField.Name.xFrameOptions { headers[name] = "DENY" }
        if let hsts { headers[.strictTransportSecurity] = hsts }
    }

    private static func policy(formActions: String, styles: String) -> String {
        "default-src 'none'; script-src 'self'; style-src \(styles); img-src 'self' data:; connect-src 'self'; form-action \(formActions); frame-ancestors 'none'; base-uri 'none'"
    }

    /// The headers for `settings`: forms may also post to Apple's origin; stylesheets may also come from
    /// `public_url`; HSTS for `hsts_max_age` when siwa is reached over HTTPS (cookies are `Secure`).
    init(settings: ServerSettings) {
        self.init(
            formActionOrigins: [ServerSettings.origin(of: settings.apple.authorizeBaseURL)], styleOrigins: [settings.front.publicOrigin],
            hsts: settings.secureCookies && settings.hstsMaxAge > 0 ? "max-age=\(settings.hstsMaxAge)" : nil
        )
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response = try await next(request, context)
        secure(&response)
        return response
    }

    /// Adds the headers to one of siwa's own responses (the built-in proxy answers with pages of its own too, but
    /// leaves the upstream's answers as they are).
    func secure(_ response: inout Response) {
        secure(&response.headers)
    }

    /// The same, on a response's header fields (the front's event-loop fast path writes its answers without
    /// Hummingbird's `Response`).
    func secure(_ headers: inout HTTPFields) {
        // An answer only the proxy that asked reads (`DoorPolicy.passed`): nothing of a page's.
        if let name = HTTPField.Name.readByProxyOnly, headers[name] != nil {
            headers[name] = nil
            return
        }
        // A page whose form ends in a redirect elsewhere (sign-out with `rd`, a client's end-session) names that
        // origin: browsers hold the redirect after a form's POST to `form-action` too.
        if let name = HTTPField.Name.formActionOrigin, let origin = headers[name] {
            headers[name] = nil
            Self.set(&headers, policy: Self.policy(formActions: formActions + " " + origin, styles: styles), hsts: hsts)
        } else if headers.contains(where: { fields[$0.name] != nil }) {
            // An answer that already says one of them: set each, replacing what it says.
            Self.set(&headers, policy: contentSecurityPolicy, hsts: hsts)
        } else {
            headers.append(contentsOf: fields)
        }
    }
}

extension Response {
    /// Lets this page's form (a sign-out) end in a redirect to `url`'s origin under the page's `form-action`.
    mutating func allowFormRedirect(to url: String?) {
        guard let url, let parsed = URL(string: url), parsed.host != nil, let name = HTTPField.Name.formActionOrigin else { return }
        headers[name] = ServerSettings.origin(of: parsed)
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
    /// Set by a handler, never sent: the origin its page's form may end up at (added to `form-action`).
    static let formActionOrigin = HTTPField.Name("X-Siwa-Form-Action-Origin")
    /// Marks an answer `secure` leaves without a page's headers (`HTTPFields.markReadByProxyOnly`); removed there,
    /// never sent.
    static let readByProxyOnly = HTTPField.Name("X-Siwa-Read-By-Proxy-Only")
    /// `X-CSRF-Token`, sent by `popup.js`.
    static let xCSRFToken = HTTPField.Name("X-CSRF-Token")
}

extension HTTPFields {
    /// Says that these are the fields of an answer only the proxy that asked reads, never shown to a browser (a check
    /// that lets a request through, `DoorPolicy.passed`), so that `secure` adds none of a page's headers to them.
    mutating func markReadByProxyOnly() {
        if let name = HTTPField.Name.readByProxyOnly { self[name] = "1" }
    }
}
