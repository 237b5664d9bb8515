import AsyncHTTPClient
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL

/// Hands one request to the upstream and streams its answer back, as RFC 9110 asks of a proxy: hop-by-hop headers
/// (and every header `Connection` names) stay on their hop; `X-Forwarded-For`, `-Proto` and `-Host` say where the
/// request came from; whatever a client sent as `X-Auth-Request-*`, `X-Siwa-*`, `X-Forwarded-*` or `Forwarded`
/// (also spelled with underscores, as CGI-style apps read them) is removed before siwa adds its own, so no client
/// can claim an identity; siwa's own cookies stay with siwa. Bodies stream both ways, never held whole.
struct UpstreamForwarder: Sendable {
    let settings: UpstreamSettings
    let client: HTTPClient
    let resolver: ClientAddressResolver
    /// The names of siwa's cookies (session, binding, CSRF), never sent to the upstream.
    let ownCookies: Set<String>
    /// The TLS of WebSockets to an `https` upstream (`UpstreamClient.webSocketTLS`).
    let webSocketTLS: NIOSSLContext?

    /// Why no answer came from the upstream.
    enum Failure: Error {
        /// It refused or broke the connection, or answered with something that is not HTTP.
        case unreachable(any Error)
        /// No response head within `upstream_timeout_ms` of the request being sent.
        case timedOut
    }

    /// The upstream's answer to `request`, with `identity` (siwa's identity headers, or none) added.
    func forward(_ request: Request, context: ServerContext, identity: [HTTPField]) async throws(Failure) -> Response {
        let target = request.head.path.flatMap { $0.hasPrefix("/") ? $0 : nil } ?? "/"
        var outbound = HTTPClientRequest(url: settings.origin + settings.basePath + target)
        outbound.method = HTTPMethod(rawValue: request.method.rawValue)
        outbound.headers = upstreamHeaders(request, context: context, identity: identity)
        // The timeout counts from the request's last byte: an upload that takes longer than the timeout is not
        // the upstream being slow to answer.
        var uploaded: AsyncStream<Never>?
        if let length = request.headers[.contentLength].flatMap(Int64.init), length > 0 {
            let (stream, continuation) = AsyncStream<Never>.makeStream()
            outbound.body = .stream(ObservedBody(base: request.body, ended: continuation), length: .known(length))
            uploaded = stream
        } else if request.headers[.transferEncoding] != nil {
            let (stream, continuation) = AsyncStream<Never>.makeStream()
            outbound.body = .stream(ObservedBody(base: request.body, ended: continuation), length: .unknown)
            uploaded = stream
        }
        let answer: HTTPClientResponse
        do {
            answer = try await head(of: outbound, uploaded: uploaded, logger: context.logger)
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .connectTimeout {
            throw .timedOut
        } catch let failure as Failure {
            throw failure
        } catch {
            throw .unreachable(error)
        }
        return Response(
            status: HTTPResponse.Status(code: Int(answer.status.code), reasonPhrase: answer.status.reasonPhrase),
            headers: Self.responseHeaders(answer.headers),
            body: ResponseBody(asyncSequence: answer.body)
        )
    }

    /// The upstream's response head: within the timeout of the request being sent (at once without a body, after
    /// its last byte with one). The body that follows is read by whoever reads the response, with no deadline.
    private func head(of request: HTTPClientRequest, uploaded: AsyncStream<Never>?, logger: Logger) async throws -> HTTPClientResponse {
        let timeout = TimeAmount.milliseconds(Int64(settings.timeoutMS))
        guard let uploaded else { return try await client.execute(request, deadline: .now() + timeout, logger: logger) }
        return try await withThrowingTaskGroup(of: HTTPClientResponse?.self) { group in
            group.addTask { try await client.execute(request, deadline: .distantFuture, logger: logger) }
            group.addTask {
                for await _ in uploaded {}
                try await Task.sleep(for: .milliseconds(settings.timeoutMS))
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let response = first else { throw Failure.timedOut }
            return response
        }
    }

    /// The client's headers less the hop-by-hop ones, the forgeable ones and siwa's cookies; then siwa's own.
    func upstreamHeaders(_ request: Request, context: ServerContext, identity: [HTTPField]) -> HTTPHeaders {
        upstreamHeaders(request.headers, authority: request.head.authority, peer: context.remoteAddress?.ipAddress, identity: identity)
    }

    /// The same, from the request's header fields, its authority and the peer's address (the event-loop fast path
    /// has no Hummingbird `Request`).
    func upstreamHeaders(_ fields: HTTPFields, authority: String?, peer: String?, identity: [HTTPField]) -> HTTPHeaders {
        let named = Self.connectionNamed(fields[values: .connection])
        var headers = HTTPHeaders()
        headers.reserveCapacity(fields.count + identity.count + 4)
        for field in fields {
            guard !Self.staysWithSiwa(field.name.canonicalName, named: named) else { continue }
            if field.name == .cookie {
                if let kept = keptCookies(field.value) { headers.add(name: "Cookie", value: kept) }
                continue
            }
            headers.add(name: field.name.rawName, value: field.value)
        }
        headers.add(name: "X-Forwarded-For", value: resolver.forwardedFor(fields, peer: peer))
        headers.add(name: "X-Forwarded-Proto", value: resolver.scheme(fields, peer: peer))
        if let host = resolver.host(fields, authority: authority, peer: peer) { headers.add(name: "X-Forwarded-Host", value: host) }
        for field in identity { headers.add(name: field.name.rawName, value: field.value) }
        return headers
    }

    /// Whether a client's header of this lowercased name is not passed to the upstream: hop-by-hop, named by
    /// `Connection` (`named`), forgeable, or `Content-Length` (it goes with the body) or `Expect` (answered, or not,
    /// by siwa). The byte-level path (`RawFrontPath`) asks the same.
    static func staysWithSiwa(_ name: String, named: Set<String>) -> Bool {
        hopByHop.contains(name) || named.contains(name) || forgeable(name) || name == "content-length" || name == "expect"
    }

    /// A `Cookie` value without siwa's cookies (and nameless pairs); nil when nothing is left. Pairs are split at
    /// `;` and their names read by byte (this runs on every proxied request); a value with nothing to take out is
    /// passed as it came.
    func keptCookies(_ value: String) -> String? {
        var kept: [Substring] = []
        var changed = false
        for pair in value.split(separator: ";", omittingEmptySubsequences: false) {
            let trimmed = pair.trimmingBlanks
            let end = trimmed.utf8.firstIndex(of: UInt8(ascii: "=")) ?? trimmed.endIndex
            let name = trimmed[trimmed.startIndex..<end].trimmingBlanks
            if name.isEmpty || ownCookies.contains(String(name)) {
                changed = true
            } else {
                kept.append(trimmed)
            }
        }
        if !changed { return value }
        return kept.isEmpty ? nil : kept.joined(separator: "; ")
    }

    /// The upstream's headers as the client gets them (`forClient`); everything else as sent.
    static func responseHeaders(_ headers: HTTPHeaders) -> HTTPFields {
        var headers = headers
        forClient(&headers)
        var fields = HTTPFields()
        fields.reserveCapacity(headers.count)
        for (name, value) in headers {
            guard let fieldName = HTTPField.Name(name) else { continue }
            fields.append(HTTPField(name: fieldName, value: value))
        }
        return fields
    }

    /// The upstream's answer as the client's hop gets it (the fast path hands it on in this form): without the
    /// hop-by-hop headers and every header `Connection` names, and without a `Set-Cookie` of one of siwa's cookie
    /// names (behind siwa the upstream shares siwa's host, and must not set or clear siwa's session).
    static func forClient(_ headers: inout HTTPHeaders) {
        var named: Set<String> = []
        for (name, value) in headers where name.utf8.count == 10 && name.lowercased() == "connection" {
            named.formUnion(connectionNamed([value]))
        }
        func dropped(_ name: String, _ value: String) -> Bool {
            dropsFromClient(name.lowercased(), named: named) { value }
        }
        guard headers.contains(where: { dropped($0.name, $0.value) }) else { return }
        var kept = HTTPHeaders()
        kept.reserveCapacity(headers.count)
        for (name, value) in headers where !dropped(name, value) { kept.add(name: name, value: value) }
        headers = kept
    }

    /// Whether the upstream's header of this lowercased name stops at siwa: hop-by-hop, named by the upstream's
    /// `Connection` (`named`), or a `Set-Cookie` of one of siwa's cookie names (its `value` is only read then).
    static func dropsFromClient(_ lowered: String, named: Set<String>, value: () -> String) -> Bool {
        if lowered == "set-cookie" { return CookiePolicy.allNames.contains(String(Substring(value()).prefix { $0 != "=" }.trimmingBlanks)) }
        return hopByHop.contains(lowered) || named.contains(lowered)
    }

    /// RFC 9110 7.6.1: the headers of one connection, never forwarded.
    static let hopByHop: Set<String> = ["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"]

    /// The lowercased header names that `Connection` values list (`close` and `keep-alive`, the options nearly every
    /// `Connection` carries, name no header and are skipped without building a set).
    static func connectionNamed(_ values: [String]) -> Set<String> {
        var names = Set<String>()
        for value in values {
            for token in value.split(separator: ",") {
                let name = token.trimmingBlanks
                if name.isEmpty || RawHTTP.equalsIgnoringCase(name, "close") || RawHTTP.equalsIgnoringCase(name, "keep-alive") { continue }
                names.insert(name.lowercased())
            }
        }
        return names
    }

    /// Whether a client's header of this (lowercased) name could pass for what siwa or a proxy says: identity,
    /// assertion, or where the request came from. `X_Auth_Request_User` counts as `X-Auth-Request-User`.
    static func forgeable(_ name: String) -> Bool {
        guard let first = name.utf8.first, first == UInt8(ascii: "x") || first == UInt8(ascii: "f") else { return false }
        let dashed = name.utf8.contains(UInt8(ascii: "_")) ? name.replacingOccurrences(of: "_", with: "-") : name
        return dashed.hasPrefix("x-auth-request-") || dashed.hasPrefix("x-siwa-") || dashed.hasPrefix("x-forwarded-") || dashed == "forwarded"
    }
}

/// The request body on its way to the upstream, finishing `ended` once its last byte has been handed on.
private struct ObservedBody<Base: AsyncSequence & Sendable>: AsyncSequence, Sendable where Base.Element == ByteBuffer {
    typealias Element = ByteBuffer
    let base: Base
    let ended: AsyncStream<Never>.Continuation

    func makeAsyncIterator() -> Iterator {
        Iterator(base: base.makeAsyncIterator(), ended: ended)
    }

    struct Iterator: AsyncIteratorProtocol {
        var base: Base.AsyncIterator
        let ended: AsyncStream<Never>.Continuation

        mutating func next() async throws -> ByteBuffer? {
            let buffer = try await base.next()
            if buffer == nil { ended.finish() }
            return buffer
        }
    }
}

extension Substring {
    /// Without leading and trailing spaces and tabs (the blanks HTTP allows around list items and cookie pairs).
    /// Read by byte (blanks are ASCII, so the ends found are the ends of characters).
    var trimmingBlanks: Substring {
        let bytes = utf8
        let kept: (UInt8) -> Bool = { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\t") }
        guard let first = bytes.firstIndex(where: kept), let last = bytes.lastIndex(where: kept) else { return self[endIndex...] }
        return self[first..<bytes.index(after: last)]
    }
}
