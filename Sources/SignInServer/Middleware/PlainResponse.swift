import Hummingbird

extension Response {
    /// One line of plain text: the controllers' short answers and the edge's plain port (`RedirectListener`), below
    /// both.
    static func plain(_ status: HTTPResponse.Status, _ text: String) -> Response {
        Response(status: status, headers: [.contentType: "text/plain; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: text + "\n")))
    }
}
