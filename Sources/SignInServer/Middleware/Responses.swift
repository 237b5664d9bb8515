import Foundation
import Hummingbird

/// The non-page answers every controller writes: JSON and RFC 9457 problem details (one line of plain text is
/// `Response.plain`, in Middleware/PlainResponse.swift, for the edge's plain port too).
extension Response {
    /// `value` as JSON (ISO 8601 dates, sorted keys), never cached.
    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> Response {
        RenderedPage.json(value, status: status).response
    }

    /// An RFC 9457 problem details answer.
    static func problem(_ status: HTTPResponse.Status, _ type: String, _ title: String, _ detail: String) -> Response {
        RenderedPage.problem(status, type, title, detail).response
    }
}

extension RenderedPage {
    /// `value` as JSON (ISO 8601 dates, sorted keys), never cached, as its head and body.
    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> RenderedPage {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        return RenderedPage(status: status, headers: [.contentType: "application/json", .cacheControl: "no-store"], body: ByteBuffer(bytes: data))
    }

    /// An RFC 9457 problem details answer, as its head and body (the byte path writes it itself).
    static func problem(_ status: HTTPResponse.Status, _ type: String, _ title: String, _ detail: String) -> RenderedPage {
        struct Problem: Encodable {
            var type: String
            var title: String
            var status: Int
            var detail: String
        }
        var page = json(Problem(type: "urn:siwa:problem:\(type)", title: title, status: Int(status.code), detail: detail), status: status)
        page.headers[.contentType] = "application/problem+json"
        return page
    }
}
