import AsyncHTTPClient
import DoorHTTP
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import Synchronization

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
    /// `upstream_max_connections` (`UpstreamClient.admission`).
    let admission: UpstreamAdmission

    /// Why no answer came from the upstream.
    enum Failure: Error {
        /// It refused or broke the connection, or answered with something that is not HTTP.
        case unreachable(any Error)
        /// No response head within `upstream_timeout_ms` of the request being sent.
        case timedOut
        /// It answered with something siwa does not relay (a `101` nobody asked for).
        case broken(String)
        /// `upstream_max_connections` were in use, and no place came within `upstream_timeout_ms` (or the line was full).
        case busy
    }

    /// The upstream's answer to `request`, with `identity` (siwa's identity headers, or none) added.
    func forward(_ request: Request, target: RequestTarget, context: ServerContext, identity: [HTTPField]) async throws(Failure) -> Response {
        guard let place = await admission.pass(waitingAtMost: .milliseconds(Int64(settings.timeoutMS))) else { throw .busy }
        var outbound = HTTPClientRequest(url: settings.origin + settings.basePath + target.forwarded)
        outbound.method = HTTPMethod(rawValue: request.method.rawValue)
        outbound.headers = upstreamHeaders(request, context: context, identity: identity)
        // The timeout counts from the request's last byte: an upload that takes longer than the timeout is not
        // the upstream being slow to answer.
        var upload: UploadEnd?
        if let length = request.headers[.contentLength].flatMap(Int64.init), length > 0 {
            let end = UploadEnd()
            outbound.body = .stream(ObservedBody(base: request.body, end: end), length: .known(length))
            upload = end
        } else if request.headers[.transferEncoding] != nil {
            let end = UploadEnd()
            outbound.body = .stream(ObservedBody(base: request.body, end: end), length: .unknown)
            upload = end
        }
        let answer: HTTPClientResponse
        do {
            answer = try await head(of: outbound, upload: upload, logger: context.logger)
        } catch {
            // Hummingbird reads what is left of the request body once siwa's page is written, with the iterator
            // async-http-client may still be reading it with: the upload stops reading first (`UploadEnd.stop`).
            await upload?.stop()
            switch error {
            case let error as HTTPClientError where error == .deadlineExceeded || error == .connectTimeout || error == .readTimeout:
                throw .timedOut
            case let failure as Failure:
                throw failure
            default:
                throw .unreachable(error)
            }
        }
        // Interim and switching answers are handled once, here: async-http-client reads 100 and 103 itself; a 101
        // the client did not get through the WebSocket relay, or any other 1xx, is a broken upstream.
        if answer.status.code < 200 {
            await upload?.stop()
            throw .broken("the upstream answered \(answer.status.code) to a \(request.method) that asked for no protocol switch")
        }
        let body = answer.body
        let uploading = upload
        let holder = PlaceHolder(place)
        return Response(
            status: HTTPResponse.Status(code: Int(answer.status.code), reasonPhrase: answer.status.reasonPhrase),
            headers: Self.responseHeaders(answer.headers),
            body: ResponseBody { writer in
                defer { holder.release() }
                for try await buffer in body { try await writer.write(buffer) }
                // The exchange with the upstream is over: its place goes to the next in line. Hummingbird reads what
                // is left of the request body once this answer is written, with the iterator async-http-client may
                // still be reading it with (an upstream that answered before the upload's end): two readers of one
                // body stop the server, so the upload stops reading first, and its next read finds the body ended.
                holder.release()
                await uploading?.stop()
                try await writer.finish(nil)
            }
        )
    }

    /// The upstream's response head: within the timeout of the request being sent (at once without a body, after
    /// its last byte with one). The body that follows is read by whoever reads the response, with no deadline.
    private func head(of request: HTTPClientRequest, upload: UploadEnd?, logger: Logger) async throws -> HTTPClientResponse {
        let timeout = TimeAmount.milliseconds(Int64(settings.timeoutMS))
        guard let upload else { return try await client.execute(request, deadline: .now() + timeout, logger: logger) }
        return try await withThrowingTaskGroup(of: HTTPClientResponse?.self) { group in
            group.addTask { try await client.execute(request, deadline: .distantFuture, logger: logger) }
            group.addTask {
                await upload.ended()
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

    /// The same, from the request's header fields, its authority and the peer's address. `Host` is always the
    /// upstream's own.
    func upstreamHeaders(_ fields: HTTPFields, authority: String?, peer: String?, identity: [HTTPField]) -> HTTPHeaders {
        var headers = HTTPHeaders()
        headers.reserveCapacity(fields.count + identity.count + 5)
        let forwarded = ForwardedFields(
            for: resolver.forwardedFor(fields, peer: peer), proto: resolver.scheme(fields, peer: peer), host: resolver.host(fields, authority: authority, peer: peer)
        )
        writeHead(
            to: &headers, clientFields: fields.lazy.map { ($0.name.canonicalName, $0.name.rawName, $0.value) }, connection: fields[values: .connection],
            forwarded: forwarded, identity: identity
        )
        return headers
    }

    /// Where the request came from, as the upstream is told (`X-Forwarded-For`, `-Proto`, `-Host`), worked out by
    /// the carrier with the resolver (`ClientAddressResolver`).
    struct ForwardedFields {
        let `for`: String
        let proto: String
        let host: String?
    }

    /// The upstream's request head after its request line, written here for every carrier (async-http-client, the
    /// WebSocket handshake and the byte path): `Host`, the upstream's own; the client's fields (`clientFields`:
    /// lowercased name, name as sent, value, in order) less those that stay with siwa (`staysWithSiwa`, with the
    /// names its `Connection` values list), its cookie without siwa's; where the request came from; then siwa's
    /// identity fields.
    func writeHead<Sink: UpstreamHeadSink>(
        to sink: inout Sink, clientFields: some Sequence<(String, String, String)>, connection: [String], forwarded: ForwardedFields, identity: [HTTPField]
    ) {
        let named = Self.connectionNamed(connection)
        sink.add(name: "Host", value: settings.authority)
        for (lowercased, name, value) in clientFields where !staysWithSiwa(lowercased, named: named) {
            if lowercased == "cookie" {
                if let kept = keptCookies(value) { sink.add(name: "Cookie", value: kept) }
                continue
            }
            sink.add(name: name, value: value)
        }
        sink.add(name: "X-Forwarded-For", value: forwarded.for)
        sink.add(name: "X-Forwarded-Proto", value: forwarded.proto)
        if let host = forwarded.host { sink.add(name: "X-Forwarded-Host", value: host) }
        for field in identity { sink.add(name: field.name.rawName, value: field.value) }
    }

    /// Whether a client's header of this lowercased name is not passed to the upstream: hop-by-hop, named by
    /// `Connection` (`named`), forgeable (`forgeable`, `strip_request_headers`), `Host` (the upstream's is siwa's),
    /// `Content-Length` (it goes with the body), `Expect` (answered, or not, by siwa) or `HTTP2-Settings` (siwa
    /// passes no upgrade but WebSocket's). The byte-level path (`RawFrontPath`) asks the same.
    func staysWithSiwa(_ name: String, named: Set<String>) -> Bool {
        Self.hopByHop.contains(name) || named.contains(name) || Self.forgeable(name, also: settings.strippedHeaders)
            || name == "host" || name == "content-length" || name == "expect" || name == "http2-settings"
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

    /// The upstream's headers as the client gets them (`forClient`); everything else as sent. A transfer coding other
    /// than `chunked` (`Transfer-Encoding: gzip, chunked`) cannot be said again on this path (NIO's encoder frames the
    /// answer as `chunked` alone) while the bytes are still in it: it is said as the last content coding instead, which
    /// a client undoes the same way.
    static func responseHeaders(_ headers: HTTPHeaders) -> HTTPFields {
        var headers = headers
        let codings = RawHTTP.transferCodings(headers["transfer-encoding"]).codings
        if !codings.isEmpty { headers.add(name: "Content-Encoding", value: codings.joined(separator: ", ")) }
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

    /// Whether a client's header of this (lowercased) name could pass for what siwa or a proxy says, or make the
    /// upstream read the request as another: identity (siwa's, and the names other fronts pass identity under),
    /// assertion, where the request came from, the method or URL overrides frameworks honour; or one of `also`
    /// (`strip_request_headers`, lowercased). `X_Auth_Request_User` counts as `X-Auth-Request-User`: CGI, WSGI and PHP
    /// read both spellings as one variable. The one list of what a client may not say to the upstream.
    static func forgeable(_ name: String, also: Set<String> = []) -> Bool {
        let dashed = name.utf8.contains(UInt8(ascii: "_")) ? name.replacingOccurrences(of: "_", with: "-") : name
        if !also.isEmpty, also.contains(dashed) { return true }
        guard let first = dashed.utf8.first, first == UInt8(ascii: "x") || first == UInt8(ascii: "f") || first == UInt8(ascii: "r")
            || first == UInt8(ascii: "t")
        else { return false }
        return dashed.hasPrefix("x-auth-request-") || dashed.hasPrefix("x-siwa-") || dashed.hasPrefix("x-forwarded-") || dashed == "forwarded"
            || identityAndOverrides.contains(dashed)
    }

    /// The headers of other fronts' identity, and of method and URL overrides, that no client may send upstream.
    static let identityAndOverrides: Set<String> = [
        "remote-user", "remote-email", "remote-groups", "remote-name", "x-remote-user", "x-remote-email", "x-remote-groups",
        "x-http-method-override", "x-method-override", "x-http-method", "x-original-url", "x-original-uri", "x-rewrite-url",
        "x-real-ip", "true-client-ip",
    ]
}

/// The request body on its way to the upstream: one read at a time through `end`, which says when the upload is over
/// (its last byte handed on, its reading failed, `stop`, or async-http-client let go of both the body and its reader)
/// and, once stopped, ends the body for async-http-client, so that Hummingbird can read the rest alone.
private struct ObservedBody<Base: AsyncSequence & Sendable>: AsyncSequence, Sendable where Base.Element == ByteBuffer {
    typealias Element = ByteBuffer
    let base: Base
    let reader: UploadReader

    init(base: Base, end: UploadEnd) {
        self.base = base
        reader = UploadReader(end)
    }

    func makeAsyncIterator() -> Iterator {
        Iterator(base: base.makeAsyncIterator(), reader: reader)
    }

    struct Iterator: AsyncIteratorProtocol {
        var base: Base.AsyncIterator
        let reader: UploadReader

        mutating func next() async throws -> ByteBuffer? {
            guard reader.end.beginRead() else { return nil }
            defer { reader.end.endRead() }
            do {
                let buffer = try await base.next()
                if buffer == nil { reader.end.finish() }
                return buffer
            } catch {
                reader.end.finish()
                throw error
            }
        }
    }
}

/// Ends the upload when the body and its reader are let go without reading to the end (async-http-client stops
/// reading a body once the upstream's answer has ended the exchange).
private final class UploadReader: Sendable {
    let end: UploadEnd
    init(_ end: UploadEnd) { self.end = end }
    deinit { end.finish() }
}

/// Whether a request body is still being read for the upstream, read by one reader at a time: the timeout waits for
/// the upload's end (`ended`, which a cancelled wait leaves), and the answer, once its exchange is over, stops the
/// upload (`stop`: no read begins after it, and it returns once the read in progress, if any, has ended).
final class UploadEnd: Sendable {
    private struct State {
        var done = false
        var stopped = false
        var reading = false
        var quietWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())
    private let (endStream, endContinuation) = AsyncStream<Never>.makeStream()

    /// Marks the upload over (once; later calls do nothing) and wakes whoever waits for its end.
    func finish() {
        let first = state.withLock { state -> Bool in
            defer { state.done = true }
            return !state.done
        }
        if first { endContinuation.finish() }
    }

    /// Returns once the upload is over, or the waiting task is cancelled.
    func ended() async {
        for await _ in endStream {}
    }

    /// A read of the body may begin: false once the upload is over or stopped (the body then reads as ended).
    func beginRead() -> Bool {
        state.withLock { state in
            guard !state.done, !state.stopped else { return false }
            state.reading = true
            return true
        }
    }

    /// The read begun has ended.
    func endRead() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.reading = false
            defer { state.quietWaiters = [] }
            return state.quietWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// No read begins from now on; returns once the read in progress, if any, has ended (when the client sends more
    /// of the body, or its connection ends).
    func stop() async {
        await withCheckedContinuation { continuation in
            let quiet = state.withLock { state -> Bool in
                state.stopped = true
                if state.reading {
                    state.quietWaiters.append(continuation)
                    return false
                }
                return true
            }
            if quiet { continuation.resume() }
        }
        finish()
    }
}

/// The place at the upstream of one exchange, let go once its answer has passed, or with the answer if it never did.
private final class PlaceHolder: Sendable {
    private let place: Mutex<UpstreamAdmission.Pass?>
    init(_ place: UpstreamAdmission.Pass) { self.place = Mutex(place) }
    func release() { place.withLock { $0 = nil } }
}

/// Where `UpstreamForwarder.writeHead` writes the upstream's request head: NIO's header list (async-http-client
/// and the WebSocket handshake send it) or the byte path's bytes (`RawFrontPath`).
protocol UpstreamHeadSink {
    mutating func add(name: String, value: String)
}

extension HTTPHeaders: UpstreamHeadSink {}
