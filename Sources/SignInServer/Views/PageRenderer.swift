import AppleSignIn
import Foundation
import Hummingbird
import Mustache

/// The look of the Sign in with Apple button (Human Interface Guidelines: three styles, three titles,
/// adjustable height and corner radius).
public struct ButtonSettings: Sendable, Hashable {
    /// Button colours.
    public enum Style: String, Sendable, CaseIterable {
        /// White logo and text on black.
        case black
        /// Black on white, for dark backgrounds.
        case white
        /// Black on white with a black outline, for light backgrounds.
        case whiteOutline = "white-outline"
    }

    /// Button wording.
    public enum Title: String, Sendable, CaseIterable {
        /// "Sign in with Apple".
        case signIn = "sign-in"
        /// "Continue with Apple".
        case `continue` = "continue"
        /// "Sign up with Apple".
        case signUp = "sign-up"

        var stringKey: String {
            switch self {
            case .signIn: "signIn.title.signIn"
            case .continue: "signIn.title.continue"
            case .signUp: "signIn.title.signUp"
            }
        }
    }

    /// Colours.
    public var style: Style
    /// Wording.
    public var title: Title
    /// Height in CSS pixels (at least 30).
    public var height: Int
    /// Corner radius in CSS pixels.
    public var cornerRadius: Int

    /// Creates settings, clamping the height to the guidelines' minimum.
    /// `button_style`, `button_title`, `button_height` and `button_corner_radius` unset, each written only here.
    public static let defaultStyle = Style.black
    public static let defaultTitle = Title.signIn
    public static let defaultHeight = 44
    public static let defaultCornerRadius = 8

    public init(style: Style = Self.defaultStyle, title: Title = Self.defaultTitle, height: Int = Self.defaultHeight, cornerRadius: Int = Self.defaultCornerRadius) {
        self.style = style
        self.title = title
        self.height = max(30, min(height, 64))
        self.cornerRadius = max(0, min(cornerRadius, height / 2))
    }

    /// The stylesheet for the configured size (served at `/button.css`, so no inline style is needed).
    var css: String {
        ".siwa-button{height:\(height)px;border-radius:\(cornerRadius)px;font-size:\(Int(Double(height) * 0.43))px}\n"
    }
}

/// Renders the Mustache templates in `Templates/` with the strings of the negotiated language. Each shape of a
/// page is rendered once and then filled per request (`PageCache`).
public struct PageRenderer: Sendable {
    private let library: MustacheLibrary
    private let cache = PageCache()
    let localMode: Bool

    /// Loads every `*.mustache` file of `directory`.
    public init(directory: String, localMode: Bool) async throws {
        // A linked directory (an install that links /usr/share/siwa/Templates to a release's) is read where it leads:
        // the library lists the directory's files and did not follow the link.
        library = try await MustacheLibrary(directory: URL(fileURLWithPath: directory).resolvingSymlinksInPath().path)
        self.localMode = localMode
        for name in ["signin", "session", "error"] where library.getTemplate(named: name) == nil {
            throw HTTPError(.internalServerError, message: "template \(name).mustache missing in \(directory)")
        }
    }

    /// Renders `template` into an HTML response. `fixed` values (booleans and strings that take few values) shape
    /// the page and key its cache entry; `slots` are the per-request strings (tokens, paths, a user's details),
    /// HTML-escaped into place. A slot's emptiness is part of the shape, so `{{#name}}` sections still work.
    func page(
        _ template: String, title: String, language: PageLanguage, fixed: [String: Bool] = [:], fixedText: [String: String] = [:],
        slots: [String: String] = [:], status: HTTPResponse.Status = .ok
    ) -> Response {
        rendered(template, title: title, language: language, fixed: fixed, fixedText: fixedText, slots: slots, status: status).response
    }

    /// The same page as its head and body, for the byte path to write (`RenderedPage`). `shapeKey`: a short key that
    /// names the shape as well as the values would (the caller's promise), instead of one built from all of them.
    func rendered(
        _ template: String, title: String, language: PageLanguage, fixed: [String: Bool] = [:], fixedText: [String: String] = [:],
        slots: [String: String] = [:], status: HTTPResponse.Status = .ok, shapeKey: String? = nil
    ) -> RenderedPage {
        let slotNames = slots.keys.sorted()
        let key: String
        if let shapeKey {
            key = shapeKey
        } else {
            var built = template + "\u{1}" + language.rawValue + "\u{1}" + title
            for (name, value) in fixed.sorted(by: { $0.key < $1.key }) { built += "\u{1}\(name)=\(value)" }
            for (name, value) in fixedText.sorted(by: { $0.key < $1.key }) { built += "\u{1}\(name)=\(value)" }
            for name in slotNames { built += "\u{1}\(name):" + ((slots[name] ?? "").isEmpty ? "0" : "1") }
            key = built
        }
        let segments = cache.segments(for: key, slotCount: slotNames.count) { markers in
            render(template, title: title, language: language, fixed: fixed, fixedText: fixedText, slotNames: slotNames,
                   present: { !(slots[$0] ?? "").isEmpty }, markers: markers, status: status)
        }
        return PreparedPage(segments: segments, status: status).rendered(slotNames.map { slots[$0] ?? "" })
    }

    /// One shape of a page rendered now, to be filled per request by `PreparedPage.response`, for a page whose
    /// shapes are few and known at start (the sign-in page): `page` builds and looks up a cache key on each request.
    /// Every slot of `slotNames` but those `absent` (left out, as `page` leaves out an empty one) is present; their
    /// values are given in this order.
    func prepare(
        _ template: String, title: String, language: PageLanguage, fixed: [String: Bool] = [:], fixedText: [String: String] = [:],
        slotNames: [String], absent: Set<String> = [], status: HTTPResponse.Status = .ok
    ) -> PreparedPage {
        let markers = (0..<slotNames.count).map(cache.marker)
        let html = render(template, title: title, language: language, fixed: fixed, fixedText: fixedText, slotNames: slotNames,
                          present: { !absent.contains($0) }, markers: markers, status: status)
        return PreparedPage(segments: cache.split(html, slotCount: slotNames.count), status: status)
    }

    /// `template` rendered with a marker in place of each present slot.
    private func render(
        _ template: String, title: String, language: PageLanguage, fixed: [String: Bool], fixedText: [String: String],
        slotNames: [String], present: (String) -> Bool, markers: [String], status: HTTPResponse.Status
    ) -> String {
        var values: [String: Any] = [:]
        for (name, value) in fixed { values[name] = value }
        for (name, value) in fixedText { values[name] = value }
        // An empty slot is left out, as a missing value: Mustache treats "" as present in `{{^name}}`.
        for (index, name) in slotNames.enumerated() where present(name) { values[name] = markers[index] }
        return render(template, title: title, language: language, values: values, status: status)
    }

    /// A page rendered whole with Mustache from `values` (lists included), not cached: for pages that are not on a
    /// hot path and show a list (the sessions page, the console).
    func listPage(_ template: String, title: String, language: PageLanguage, values: [String: Any], status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status,
            headers: [.contentType: "text/html; charset=utf-8", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(string: render(template, title: title, language: language, values: values, status: status)))
        )
    }

    /// Renders `template` with Mustache.
    private func render(_ template: String, title: String, language: PageLanguage, values: [String: Any], status: HTTPResponse.Status) -> String {
        var context = values
        context["t"] = Strings.table(language)
        context["lang"] = language.htmlLang
        context["title"] = title
        context["localMode"] = localMode
        return library.render(context, withTemplate: template) ?? "<!doctype html><title>\(status.code)</title>"
    }

    /// An error page: what happened, what to do, and a link to do it; with `page.retry`, a form that posts
    /// the callback's fields back.
    func render(_ page: ErrorPage, language: PageLanguage) -> Response {
        rendered(page, language: language).response
    }

    /// The same page as its head and body.
    func rendered(_ page: ErrorPage, language: PageLanguage) -> RenderedPage {
        let strings = Strings.table(language)
        let heading = strings["error.\(page.key).heading"] ?? strings["error.internal.heading"] ?? "Error"
        // The action's URL is a slot: it may carry the request's own path (a retry, a sign-in that comes back), and
        // a cache entry per URL would fill the page cache with the first 512 of them.
        var slots: [String: String] = ["actionURL": page.actionURL]
        // The shape: the page's strings (its key, its action's key, the language), its status and which slots are
        // filled (an empty slot's section is left out).
        var shape = "error\u{1}" + page.key + "\u{1}" + page.actionKey + "\u{1}" + language.rawValue + "\u{1}" + String(page.status.code)
            + (page.actionURL.isEmpty ? "\u{1}-" : "\u{1}+")
        if let retry = page.retry {
            slots["retryState"] = retry.state ?? ""
            slots["retryCode"] = retry.code ?? ""
            slots["retryIDToken"] = retry.idToken ?? ""
            slots["retryUser"] = retry.user?.wireJSON ?? ""
            for value in [retry.state, retry.code, retry.idToken, retry.user?.wireJSON] { shape += (value ?? "").isEmpty ? "0" : "1" }
        }
        return rendered("error", title: heading, language: language, fixedText: [
            "heading": heading,
            "message": strings["error.\(page.key).message"] ?? "",
            "actionLabel": strings[page.actionKey] ?? page.actionKey,
        ], slots: slots, status: page.status, shapeKey: shape)
    }

    /// How many page shapes are cached: a bounded number whatever the requests (templates × languages × shapes).
    var cachedShapes: Int { cache.count }

    /// The string for `key` in `language`.
    func string(_ key: String, _ language: PageLanguage) -> String {
        Strings.table(language)[key] ?? key
    }
}

/// A page's shape with its slots to fill (`PageRenderer.page`, `PageRenderer.prepare`).
struct PreparedPage: Sendable {
    let segments: [PageCache.Segment]
    let status: HTTPResponse.Status

    /// The page with `values` (in the order of its slots) HTML-escaped into place, not to be stored.
    func response(_ values: [String]) -> Response {
        rendered(values).response
    }

    /// The same, as its head and body: what the handlers answer (`RenderedPage.response`) and the byte path writes.
    func rendered(_ values: [String]) -> RenderedPage {
        RenderedPage(status: status, headers: [.contentType: "text/html; charset=utf-8", .cacheControl: "no-store"], body: PageCache.fill(segments, with: values))
    }
}

/// One of siwa's pages rendered whole: its status, its header fields (less those every answer gets: the body's
/// length, the security headers, `Date` and `Server`) and its body. The handlers answer it as a `Response`; the byte
/// path (`RawFrontPath`) writes it itself, with the same fields (`SitePages.written`).
struct RenderedPage: Sendable {
    let status: HTTPResponse.Status
    var headers: HTTPFields
    let body: ByteBuffer

    var response: Response {
        Response(status: status, headers: headers, body: .init(byteBuffer: body))
    }
}
