import Foundation
import Hummingbird

/// The non-page answers every controller writes: JSON and RFC 9457 problem details (one line of plain text is
/// `Response.plain`, in Middleware/PlainResponse.swift, for the edge's plain port too).
extension Response {
    /// `value` as JSON (ISO 8601 dates, sorted keys), never cached.
    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> Response {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        return Response(status: status, headers: [.contentType: "application/json", .cacheControl: "no-store"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// An RFC 9457 problem details answer.
    static func problem(_ status: HTTPResponse.Status, _ type: String, _ title: String, _ detail: String) -> Response {
        struct Problem: Encodable {
            var type: String
            var title: String
            var status: Int
            var detail: String
        }
        var response = json(Problem(type: "urn:siwa:problem:\(type)", title: title, status: Int(status.code), detail: detail), status: status)
        response.headers[.contentType] = "application/problem+json"
        return response
    }
}

/// A response body collected whole: siwa's own small pages, when a carrier writes them itself (the byte path's failure
/// page, a refusal copied into Envoy's `DeniedHttpResponse`).
final class BodyCollector: ResponseBodyWriter {
    var buffer = ByteBuffer()

    func write(_ buffer: ByteBuffer) async throws {
        var buffer = buffer
        self.buffer.writeBuffer(&buffer)
    }

    func finish(_ trailingHeaders: HTTPFields?) async throws {}
}
