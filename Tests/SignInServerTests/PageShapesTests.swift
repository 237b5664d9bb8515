import Foundation
import JOSE
@testable import SignInServer
import Testing

/// A page's shape is cached once per template, language and shape (`PageCache`); what differs per request is a slot.
/// An error page's button carried the request's own URL in the cache key, so 512 distinct URLs (a step-up page per
/// path, a retry per return URL) filled the cache for good and every later page was rendered whole by Mustache.
@Suite("Page shapes")
struct PageShapesTests {
    @Test("generated URLs on error pages (sign in again, try again): each page's button goes to its own URL, and the cache holds a few shapes, not one per URL")
    func errorPagesShareTheirShape() async throws {
        let renderer = try await PageRenderer(directory: ResourceLocator.directory("Templates"), localMode: true)
        var generator = SystemRandomNumberGenerator()
        for round in 0..<1_500 {
            let path = "/billing/\(round)/" + String((0..<8).map { _ in "abc<&\"xyz".randomElement(using: &generator) ?? "a" })
            let page: ErrorPage = round % 2 == 0 ? .signInAgain(url: "/auth/apple?return_to=" + FormEncoding.encode(path)) : .storeUnavailable(retryURL: path)
            let language: PageLanguage = round % 3 == 0 ? .simplifiedChinese : .english
            let rendered = renderer.rendered(page, language: language)
            let body = String(buffer: rendered.body)
            let escaped = page.actionURL.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
                .replacingOccurrences(of: "\"", with: "&quot;")
            #expect(body.contains("href=\"\(escaped)\" id=\"error-action\""), "round \(round): the button does not go to \(page.actionURL)")
            #expect(rendered.status == page.status)
        }
        #expect(renderer.cachedShapes <= 8, "\(renderer.cachedShapes) shapes cached for two pages in two languages")
    }
}
