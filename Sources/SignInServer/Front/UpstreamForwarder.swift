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
    let ownCookies: OwnCookieNames
    /// The TLS of WebSockets to an `https` upstream (`UpstreamClient.webSocketTLS`).
    let webSocketTLS: NIOSSLContext?
    /// `upstream_max_connections` (`UpstreamClient.admission`).
    let admission: UpstreamAdmission
    /// What a failure becomes (`DoorFailures`).
    let failures: DoorFailures
    /// `upstream_http2`: the upstream's HTTP/2 connection (`forwardOverHTTP2`); nil: async-http-client's HTTP/1.1.
    var http2: UpstreamHTTP2? = nil

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
        /// It answered a WebSocket upgrade without switching protocols (a 401, a 429, a page): no failure, its
        /// answer goes to the client as any answer of the upstream's does.
        case declined(DeclinedUpgrade)
    }

    /// The upstream's answer to `request`, with `identity` (siwa's identity headers, or none) added.
    func forward(_ request: Request, target: RequestTarget, context: ServerContext, identity: [HTTPField]) async throws(Failure) -> Response {
        guard let place = await admission.pass(waitingAtMost: .milliseconds(Int64(settings.timeoutMS))) else { throw .busy }
        if let http2 { return try await forwardOverHTTP2(request, target: target, context: context, identity: identity, connection: http2, place: place) }
        var outbound = HTTPClientRequest(url: settings.origin + settings.requestTarget(target.forwarded))
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
            case let error as HTTPParserError:
                // What it answered is not HTTP/1.1 siwa reads (the byte path's parser says the same of it).
                throw .broken("upstream answered with something that is not HTTP/1.1: \(error)")
            default:
                throw .unreachable(error)
            }
        }
        // The status rule every carrier follows (`AnswerFilter.rule`); async-http-client has read 100 and 103 itself.
        switch AnswerFilter.rule(status: Int(answer.status.code), method: request.method.rawValue, askedToSwitch: false) {
        case .final:
            break
        case .broken(let reason):
            await upload?.stop()
            throw .broken(reason)
        case .interim, .switched:
            await upload?.stop()
            throw .broken("the upstream answered \(answer.status.code) where its answer was due")
        }
        let body = answer.body
        let uploading = upload
        let holder = PlaceHolder(place)
        let failures = failures
        let logger = context.logger
        return Response(
            status: HTTPResponse.Status(code: Int(answer.status.code), reasonPhrase: answer.status.reasonPhrase),
            headers: Self.responseHeaders(answer.headers),
            body: ResponseBody { writer in
                defer { holder.release() }
                var parts = body.makeAsyncIterator()
                while true {
                    let part: ByteBuffer?
                    do {
                        part = try await parts.next()
                    } catch {
                        // The head has gone: the client's connection ends with what came (as on the byte path).
                        failures.brokeOff("\(error)", logger: logger)
                        throw error
                    }
                    guard let part else { break }
                    try await writer.write(part)
                }
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
        let forwarded = ForwardedFields(fields, authority: authority, peer: peer, resolver: resolver)
        writeHead(
            to: &headers, clientFields: fields.lazy.map(NamedClientField.init), connection: fields[values: .connection],
            siwa: SiwaLines(forwarded: forwarded, identity: identity)
        )
        return headers
    }

    /// Where the request came from, as the upstream is told (`X-Forwarded-For`, `-Proto`, `-Host`), worked out by
    /// the carrier with the resolver (`ClientAddressResolver`).
    struct ForwardedFields {
        let `for`: String
        let proto: String
        let host: String?

        /// What the upstream is told of a request with `fields` (the byte path passes only its `X-Forwarded-*`
        /// ones, none from a peer that is not a trusted proxy), sent to `authority` by `peer`: the one place the
        /// `X-Forwarded-*` inputs are read, for every carrier. `peerTrusted`: whether `peer` is a trusted proxy, when
        /// the carrier already knows (the byte path asks once per connection).
        init(_ fields: HTTPFields, authority: String?, peer: String?, peerTrusted: Bool? = nil, resolver: ClientAddressResolver) {
            let trusted = peerTrusted ?? resolver.trusted(peer)
            self.for = resolver.forwardedFor(fields, peer: peer, fromTrusted: trusted)
            proto = resolver.scheme(fields, fromTrusted: trusted)
            host = resolver.host(fields, authority: authority, fromTrusted: trusted)
        }
    }

    /// What siwa itself tells the upstream after the client's fields: where the request came from (`forwarded`), then
    /// who asks (`identity`), written by `write(to:)`. `rendered`: those lines as HTTP/1.1 bytes, made once by that
    /// same writer (`ByteHead.rendered`) for a carrier that writes bytes and sends them again: the byte path, for the
    /// requests of a connection that come from the same host and person (callgrind: 2,500 instructions a proxied
    /// request went to writing these lines from their `String`s).
    struct SiwaLines {
        let forwarded: ForwardedFields
        let identity: [HTTPField]
        let rendered: [UInt8]?

        init(forwarded: ForwardedFields, identity: [HTTPField], rendered: [UInt8]? = nil) {
            self.forwarded = forwarded
            self.identity = identity
            self.rendered = rendered
        }

        /// `X-Forwarded-For`, `-Proto` and `-Host`, then the identity fields, in this order on every carrier.
        func write<Sink: HeaderSink>(to sink: inout Sink) {
            sink.add(name: "X-Forwarded-For", value: forwarded.for)
            sink.add(name: "X-Forwarded-Proto", value: forwarded.proto)
            if let host = forwarded.host { sink.add(name: "X-Forwarded-Host", value: host) }
            for field in identity { sink.add(name: field.name.rawName, value: field.value) }
        }
    }

    /// The upstream's request head after its request line, written here for every carrier (async-http-client, the
    /// WebSocket handshake and the byte path): `Host`, the upstream's own; the client's fields (`clientFields`:
    /// `ClientField`s, in order) less those that stay with siwa (`staysWithSiwa`, with the
    /// names its `Connection` values list), its cookie without siwa's; then siwa's own lines (`SiwaLines`: where the
    /// request came from, and the identity fields), as rendered once when a sink of bytes can take them so.
    func writeHead<Sink: HeaderSink, Field: ClientField>(
        to sink: inout Sink, clientFields: some Sequence<Field>, connection: [String], siwa: SiwaLines
    ) {
        let named = AnswerFilter.connectionNamed(connection)
        sink.add(name: "Host", value: settings.authority)
        for field in clientFields where !staysWithSiwa(field.lowercased, named: named) {
            if field.lowercased == "cookie" {
                if let kept = keptCookies(field.value) { sink.add(name: "Cookie", value: kept) }
                continue
            }
            sink.pass(field)
        }
        if let rendered = siwa.rendered, sink.addRendered(rendered) { return }
        siwa.write(to: &sink)
    }

    /// Whether a client's header of this lowercased name is not passed to the upstream: hop-by-hop, named by
    /// `Connection` (`named`), forgeable (`forgeable`, `strip_request_headers`), `Host` (the upstream's is siwa's),
    /// `Content-Length` (it goes with the body), `Expect` (answered, or not, by siwa) or `HTTP2-Settings` (siwa
    /// passes no upgrade but WebSocket's). The byte-level path (`RawFrontPath`) asks the same.
    func staysWithSiwa(_ name: String, named: Set<String>) -> Bool {
        AnswerFilter.hopByHop.contains(name) || (!named.isEmpty && named.contains(name)) || Self.forgeable(name, also: settings.strippedHeaders)
            || name == "host" || name == "content-length" || name == "expect" || name == "http2-settings"
    }

    /// A `Cookie` value without siwa's cookies (and nameless pairs); nil when nothing is left. Pairs are split at
    /// `;`, trimmed of blanks, and their names compared by byte (this runs on every proxied request: Swift's `split`
    /// on a `String` walks grapheme clusters and cost 2 µs a request in profiles); a value with nothing to take out is
    /// passed as it came, and what is kept is joined with `; `.
    func keptCookies(_ value: String) -> String? {
        Self.keptCookies(value, own: ownCookies)
    }

    /// `keptCookies` with the names to take out given.
    static func keptCookies(_ value: String, own: Set<String>) -> String? {
        keptCookies(value, own: OwnCookieNames(own))
    }

    static func keptCookies(_ value: String, own: OwnCookieNames) -> String? {
        var value = value
        let cut: [UInt8]?? = value.withUTF8 { bytes in
            var anyKept = false
            guard Self.cookiePairs(bytes, own: own, each: { _, dropped in anyKept = anyKept || !dropped }) else { return .none }
            // Only siwa's own (a browser that has no other cookie for the site): nothing is left, no second walk.
            guard anyKept else { return .some(nil) }
            var kept: [UInt8] = []
            kept.reserveCapacity(bytes.count)
            _ = Self.cookiePairs(bytes, own: own) { pair, dropped in
                guard !dropped else { return }
                if !kept.isEmpty { kept.append(contentsOf: [UInt8(ascii: ";"), UInt8(ascii: " ")]) }
                kept.append(contentsOf: pair)
            }
            return .some(kept.isEmpty ? nil : kept)
        }
        guard let cut else { return value }
        return cut.map { String(decoding: $0, as: UTF8.self) }
    }

    /// Walks the `;`-separated pairs of a `Cookie` value, each trimmed of blanks, telling `each` whether it is dropped
    /// (no name, or one of `own`); returns whether any was.
    private static func cookiePairs(
        _ bytes: UnsafeBufferPointer<UInt8>, own: OwnCookieNames, each: (UnsafeBufferPointer<UInt8>, Bool) -> Void
    ) -> Bool {
        var anyDropped = false
        RawHTTP.forEachMember(of: bytes, separatedBy: UInt8(ascii: ";")) { pair in
            var nameEnd = pair.lowerBound
            while nameEnd < pair.upperBound, bytes[nameEnd] != UInt8(ascii: "=") { nameEnd += 1 }
            while nameEnd > pair.lowerBound, bytes[nameEnd - 1] == UInt8(ascii: " ") || bytes[nameEnd - 1] == UInt8(ascii: "\t") { nameEnd -= 1 }
            let name = UnsafeBufferPointer(rebasing: bytes[pair.lowerBound..<nameEnd])
            let dropped = name.isEmpty || own.contains(name)
            anyDropped = anyDropped || dropped
            each(UnsafeBufferPointer(rebasing: bytes[pair]), dropped)
        }
        return anyDropped
    }

    /// The upstream's header fields as the client gets them (`AnswerFilter`, the one filter of every carrier).
    static func responseHeaders(_ headers: HTTPHeaders) -> HTTPFields {
        var filter = AnswerFilter(connection: headers["connection"])
        var fields = HTTPFields()
        fields.reserveCapacity(headers.count + 1)
        for (name, value) in headers where filter.keeps(name.lowercased(), value: { value }) { fields.add(name: name, value: value) }
        filter.finish(to: &fields)
        return fields
    }

    /// Whether a client's header of this (lowercased) name could pass for what siwa or a proxy says, or make the
    /// upstream read the request as another: identity (siwa's, and the names other fronts pass identity under),
    /// assertion, where the request came from (`X-Forwarded-*`, `Forwarded`, and every field frameworks and CDNs read
    /// as the client's address, `clientAddressClaims`), the method or URL overrides frameworks honour; or one of
    /// `also` (`strip_request_headers`, lowercased). `X_Auth_Request_User` counts as `X-Auth-Request-User`: CGI, WSGI
    /// and PHP read both spellings as one variable. The one list of what a client may not say to the upstream.
    static func forgeable(_ name: String, also: Set<String> = []) -> Bool {
        let underscore = name.utf8.withContiguousStorageIfAvailable { $0.contains(UInt8(ascii: "_")) } ?? name.utf8.contains(UInt8(ascii: "_"))
        let dashed = underscore ? name.replacingOccurrences(of: "_", with: "-") : name
        if !also.isEmpty, also.contains(dashed) { return true }
        if let first = dashed.utf8.first, first == UInt8(ascii: "x") || first == UInt8(ascii: "f"),
            dashed.hasPrefix("x-auth-request-") || dashed.hasPrefix("x-siwa-") || dashed.hasPrefix("x-forwarded-") || dashed == "forwarded"
        {
            return true
        }
        return neverPassed.contains(dashed)
    }

    /// The headers of other fronts' identity, and of method and URL overrides, that no client may send upstream.
    static let identityAndOverrides: Set<String> = [
        "remote-user", "remote-email", "remote-groups", "remote-name", "x-remote-user", "x-remote-email", "x-remote-groups",
        "x-http-method-override", "x-method-override", "x-http-method", "x-original-url", "x-original-uri", "x-rewrite-url",
    ]

    /// The fields common frameworks, libraries, proxies and CDNs read as the client's address (rate limits, audit,
    /// allow-lists), besides `X-Forwarded-*` and `Forwarded`: a client's own claim is never passed on, siwa's
    /// `X-Forwarded-For` says where the request came from. The sources of each name are in docs/front.md ("The
    /// client's address"). Exact names, not prefixes: `X-Azure-Ref` is not an address.
    static let clientAddressClaims: Set<String> = [
        // Proxies' and frameworks' own (request-ip, django-ipware, Rails, CodeIgniter, hutool, WebLogic, akka-http).
        "x-real-ip", "true-client-ip", "x-client-ip", "client-ip", "x-cluster-client-ip", "x-forwarded", "forwarded-for",
        "x-original-forwarded-for", "x-original-for", "proxy-client-ip", "wl-proxy-client-ip", "remote-addr", "remote-address",
        "x-remote-ip", "x-remote-addr", "x-originating-ip", "x-proxyuser-ip", "x-coming-from", "via",
        // CGI variable names sent as header names (Java's IP_HEADER_CANDIDATES, hutool, remix-utils).
        "http-client-ip", "http-x-forwarded-for", "http-x-forwarded", "http-x-cluster-client-ip", "http-forwarded-for", "http-forwarded",
        "http-via",
        // CDNs' and platforms' (genuine only when that vendor is in front of siwa).
        "cf-connecting-ip", "cf-connecting-ipv6", "cf-pseudo-ipv4", "fastly-client-ip", "fly-client-ip", "x-appengine-user-ip",
        "x-appengine-remote-addr", "x-azure-clientip", "x-azure-socketip", "cloudfront-viewer-address", "do-connecting-ip",
        "x-envoy-external-address", "x-vercel-forwarded-for", "x-vercel-proxied-for", "x-nf-client-connection-ip", "incap-client-ip",
        "x-sucuri-clientip", "x-0-client-ip", "oxygen-buyer-ip", "ali-cdn-real-ip",
    ]

    /// Every exact name a client may not send upstream (`forgeable` reads it once per field).
    private static let neverPassed = HeaderNames(identityAndOverrides.union(clientAddressClaims))
}

/// The names of siwa's cookies as bytes, compared by byte with each pair of a client's `Cookie` value.
struct OwnCookieNames: Sendable {
    let bytes: [[UInt8]]

    init(_ names: some Sequence<String>) {
        bytes = names.map { Array($0.utf8) }
    }

    /// Whether `name` is one of them, byte for byte (`elementsEqual` from an array to a buffer went through their
    /// iterators: 1,000 instructions of every proxied request with siwa's cookie).
    func contains(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
        bytes.contains { own in
            own.count == name.count && own.withUnsafeBufferPointer { own in
                for index in 0..<own.count where own[index] != name[index] { return false }
                return true
            }
        }
    }
}

/// The request body on its way to the upstream: one read at a time through `end`, which says when the upload is over
/// (its last byte handed on, its reading failed, `stop`, or async-http-client let go of both the body and its reader)
/// and, once stopped, ends the body for async-http-client, so that Hummingbird can read the rest alone.
struct ObservedBody<Base: AsyncSequence & Sendable>: AsyncSequence, Sendable where Base.Element == ByteBuffer {
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
final class UploadReader: Sendable {
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
final class PlaceHolder: Sendable {
    private let place: Mutex<UpstreamAdmission.Pass?>
    init(_ place: UpstreamAdmission.Pass) { self.place = Mutex(place) }
    func release() { place.withLock { $0 = nil } }
}

/// One of the client's header fields as the upstream's head writer reads it (`UpstreamForwarder.writeHead`): its
/// name lowercased (what decides whether it passes), its name as sent, its value; and the bytes of both, for a sink
/// of bytes (the byte path's are in the client's head, and no `String` of either is made).
protocol ClientField {
    var lowercased: String { get }
    var name: String { get }
    var value: String { get }
    func withLine<Result>(_ body: (_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) -> Result) -> Result
}

extension ClientField {
    func withLine<Result>(_ body: (_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) -> Result) -> Result {
        ByteHead.bytes(of: name, value, body)
    }
}

/// A field of HTTP types' fields, as the handlers' carriers and HTTP/2 pass it.
struct NamedClientField: ClientField {
    let lowercased: String
    let name: String
    let value: String

    init(_ field: HTTPField) {
        lowercased = field.name.canonicalName
        name = field.name.rawName
        value = field.value
    }
}

extension HTTPHeaders: HeaderSink {}

extension HTTPFields: HeaderSink {
    /// Adds the field when its name is a valid one (an upstream's names were read by NIO's parser).
    mutating func add(name: String, value: String) {
        guard let fieldName = HTTPField.Name(name) else { return }
        append(HTTPField(name: fieldName, value: value))
    }
}
