import Foundation
import HTTPTypes
import Hummingbird
import JOSE

extension Request {
    /// Whether a person's browser is navigating, and can follow a redirect to Apple: `method` (the original one,
    /// behind a proxy) GET or HEAD, asking for HTML, not a script's (`isScripted`). Only such a request is sent to the
    /// sign-in; anything else is told 401.
    func isPageNavigation(method: String) -> Bool {
        (method == "GET" || method == "HEAD") && (headers[.accept]?.contains("text/html") ?? false) && !isScripted
    }

    /// A request a script or an app makes, not a person's navigation, though it may accept HTML: it presents a bearer
    /// token; a browser says it is not navigating (`Sec-Fetch-Mode` other than `navigate`); or a library marks it
    /// as its own (`scriptMarkers`). It is answered with a status and problem details, never sent to sign in.
    var isScripted: Bool {
        if BearerCredential.read(authorization: headers[values: .authorization], query: nil).isPresented { return true }
        if let name = Self.secFetchMode, let mode = headers[name], !mode.trimmingCharacters(in: .whitespaces).lowercased().hasPrefix("navigate") { return true }
        return Self.scriptMarkers.contains { headers[$0] != nil }
    }

    static let secFetchMode = HTTPField.Name("Sec-Fetch-Mode")

    /// The fields script libraries add to the requests they make (the page stays where it is and reads the answer):
    /// jQuery, Angular 1 and Prototype (`X-Requested-With`), htmx (`HX-Request`), Inertia (`X-Inertia`), Unpoly
    /// (`X-Up-Version`), Hotwire Turbo frames (`Turbo-Frame`), pjax (`X-PJAX`).
    static let scriptMarkers: [HTTPField.Name] = ["X-Requested-With", "HX-Request", "X-Inertia", "X-Up-Version", "Turbo-Frame", "X-PJAX"]
        .compactMap { HTTPField.Name($0) }

    /// A CORS preflight: `OPTIONS` (`method`, as the site got it) with `Origin` and `Access-Control-Request-Method`.
    func isCORSPreflight(method: String) -> Bool {
        guard method.uppercased() == "OPTIONS", headers[.origin] != nil else { return false }
        return HTTPField.Name.accessControlRequestMethod.map { headers[$0] != nil } ?? false
    }

    /// Whether the client asked for JSON (then failures are RFC 9457 problem details).
    var acceptsJSON: Bool {
        headers[.accept].map { $0.contains("application/json") || $0.contains("application/problem+json") } ?? false
    }
}

extension FrontSettings {
    /// The 302 to the sign-in, coming back to `original` (an absolute URL) when it is an allowed `rd`.
    func signInRedirect(returningTo original: String?) -> Response {
        var target = publicOrigin + "/auth/apple"
        if let original { target += "?rd=" + FormEncoding.encode(original) }
        var response = Response.redirect(to: target, type: .found)
        response.headers[.cacheControl] = "no-store"
        return response
    }
}

extension PageRenderer {
    /// The 403 page of a person the policy does not let in: whom they are signed in as, and how to sign out; with
    /// no one signed in (a `deny` rule), the page that says the address is closed. `assetOrigin`: where its
    /// stylesheets are linked, when it is shown on another host than siwa's.
    func denied(_ user: UserRecord?, signOutURL: String, language: PageLanguage, assetOrigin: String = "") -> Response {
        guard let user else { return render(.closed, language: language) }
        return page(
            "denied", title: string("deniedHeading", language), language: language, fixedText: assetOrigin.isEmpty ? [:] : ["assetOrigin": assetOrigin],
            slots: ["who": user.displayName.map { "\($0) (\(user.email ?? user.subject))" } ?? user.email ?? user.subject, "signOutURL": signOutURL],
            status: .forbidden
        )
    }

    /// `page` as RFC 9457 problem details, in English (for clients that asked for JSON).
    func problem(_ page: ErrorPage) -> Response {
        Response.problem(page.status, page.key, string("error.\(page.key).heading", .english), string("error.\(page.key).message", .english))
    }
}
