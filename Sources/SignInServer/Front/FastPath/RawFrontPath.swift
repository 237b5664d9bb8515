import DoorHTTP
import Foundation
import HTTPTypes
import Logging
import NIOCore

/// The built-in proxy's hottest path, below NIO's HTTP codecs: first in each connection's pipeline with
/// `--upstream`, it reads the client's bytes itself (`RawHTTP`, a strict subset of HTTP/1.1) and, for a `GET` that
/// `FastPathAnswers` passes to the upstream from memory, writes the upstream's request as bytes on a kept-alive
/// connection of the same event loop (`UpstreamPool`, no codec either) and relays the answer's bytes back as they
/// come, reading only its head and framing. Nothing is converted to header types and back, which is what a request
/// through the codecs spent most of its time on.
///
/// What reaches the upstream and the client is what the codec path sends (the head is written by
/// `UpstreamForwarder.writeHead`, the answer filtered by `dropsFromClient`, for both): siwa's `Host`, the client's headers less the hop-by-hop,
/// forgeable and `Connection`-named ones and siwa's cookies, `X-Forwarded-*`, the identity and assertion; back, the
/// upstream's status and headers less the hop-by-hop ones and a `Set-Cookie` of siwa's, with siwa's `Date` and
/// `Server`, the body as sent (a chunked one relayed chunk by chunk, one that ends with the connection re-chunked).
///
/// A `GET` whose session is not in memory (the cache holds one for `check_cache_seconds`) waits while the store is
/// asked and an assertion signed, as the handlers would, off the event loop; then it is decided again. A request it
/// does not take but can frame (another method, a body with `Content-Length`, a page of siwa's, no session or a
/// person turned away, a target the front refuses) is handed alone to NIO's parser, and the next waits until its
/// answer has ended (`SaysConnectionOutcome` says so, `codecAnswered`) and its body has passed: then the byte path
/// goes on. A head outside the subset is handed with everything after it to NIO's parser, and this handler leaves the
/// pipeline: from then on the connection is Hummingbird's, as if this path did not exist.
///
/// The target is read as every way to the upstream reads it (`SiwaPaths.route`, `RequestTarget`): the decision is
/// made on the normalized target, and the normalized target is what the upstream gets.
final class RawFrontPath: ChannelDuplexHandler, RemovableChannelHandler, UpstreamExchangeDelegate {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let answers: FastPathAnswers
    private let upstream: FastPathAnswers.Upstream?
    private var context: ChannelHandlerContext?
    /// The client's time limits, told of the heads this path reads and the answers it ends.
    private weak var clientTimer: ClientTimer?
    private var peer: String?
    /// The peer is a trusted proxy (its `X-Forwarded-*` are read); the peer of a connection does not change.
    private var peerTrusted = false
    /// What the client sent that has not been taken yet.
    private var pending: ByteBuffer?
    /// The connection ends after an answer that said so: nothing the client sends after it is taken.
    private var ended = false
    private var exchange: Exchange?
    /// A read asked for during an exchange with much already pending, issued once it is over.
    private var readHeld = false
    /// Requests handed to the codecs whose answer has not ended.
    private var codecOwes = 0
    /// Body bytes of the request handed to the codecs still to come from the client: they go on to the codecs.
    private var bodyToCodecs = 0
    /// Body bytes went to the codecs in this read, without their end of read yet (`channelReadComplete`).
    private var passedOn = false
    /// The store is being asked for the session of the request at the front of `pending` (`warm`).
    private var warming = false
    /// That request has been decided once after the store was asked: not from memory now means the handlers decide.
    private var warmed = false
    /// The one timer of the connection, armed for the exchange's deadline (scheduling and cancelling one per request
    /// showed in profiles): when it fires early, for an exchange that has ended, it is armed again for the next one.
    private var timer: Scheduled<Void>?
    /// When `timer` fires.
    private var timerDue: NIODeadline?
    /// The client half-closed while something was in progress or waiting: the connection ends once it is answered.
    private var inputClosed = false
    /// The server is shutting down: the connection ends after the exchange in progress.
    private var closeWhenIdle = false
    /// The last `Cookie` header seen on this connection and the SHA-256 of its session cookie (a browser sends the
    /// same one each time).
    private var lastCookie: (header: String, sessionHash: String?)?
    /// The last identity sent on this connection, as header fields.
    private var lastIdentity: (user: UserRecord, groups: [String], assertion: String, fields: [HTTPField])?
    /// The last check answered from memory on this connection: its status line and header lines before `Date`.
    private var lastCheck: (status: HTTPResponse.Status, user: UserRecord, groups: [String], assertion: String?, lines: ByteBuffer)?
    /// The last `X-Forwarded-*` values a trusted proxy sent on this connection, and the origin they name.
    private var lastForwarded: (fields: [(name: String, value: String)], request: AccessRequest, origin: String?)?

    /// One request on its way to the upstream and back (a class: it is read and changed on every event of the
    /// exchange, and a reference costs less to pass around than its fields).
    private final class Exchange {
        /// The client's request head (for siwa's 502 and 504 pages).
        let head: RawHTTP.RequestHead
        let headBytes: ByteBuffer
        /// The request as the upstream gets it.
        let request: ByteBuffer
        var attempt = UpstreamAttempt<ByteBuffer>()
        /// The upstream's answer so far, until its head has been read whole.
        var answer: ByteBuffer?
        var body: Body?
        /// The upstream keeps its connection open after this answer.
        var keepAlive = false
        let closeClient: Bool
        /// When the upstream's response head is due (`upstream_timeout_ms` after the request was sent); once it came,
        /// when its body is silent too long (`upstream_idle_timeout_ms` after its last bytes); nil while the client
        /// is not taking the body (the upstream is not read then).
        var deadline: NIODeadline?
        /// It holds a place at the upstream (`upstream_max_connections`).
        var admitted = false
        /// It waits in line for one.
        var ticket: UInt64?

        init(head: RawHTTP.RequestHead, headBytes: ByteBuffer, request: ByteBuffer, closeClient: Bool) {
            self.head = head
            self.headBytes = headBytes
            self.request = request
            self.closeClient = closeClient
        }
    }

    /// Where the upstream's body stands once its head has been passed on.
    private enum Body {
        case length(remaining: Int)
        case chunked(ChunkedFraming)
        /// Ends with the connection: re-chunked for the client.
        case untilClose
        /// Over; `reusable` unless the upstream's framing leaves its connection unusable.
        case ended(reusable: Bool)
    }

    init(answers: FastPathAnswers) {
        self.answers = answers
        upstream = answers.upstream
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        clientTimer = try? context.pipeline.syncOperations.handler(type: ClientTimer.self)
        learnPeer(context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        abandonExchange()
        timer?.cancel()
        timer = nil
        self.context = nil
    }

    private func learnPeer(_ context: ChannelHandlerContext) {
        peer = context.channel.remoteAddress?.ipAddress
        peerTrusted = answers.resolver.trusted(peer)
    }

    func channelActive(context: ChannelHandlerContext) {
        learnPeer(context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        abandonExchange()
        timer?.cancel()
        timer = nil
        pending = nil
        context.fireChannelInactive()
    }

    // MARK: The client's side

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if ended { return }
        var buffer = unwrapInboundIn(data)
        if bodyToCodecs > 0 {
            // The body of the request the codecs are reading goes to them as it comes.
            let passed = min(bodyToCodecs, buffer.readableBytes)
            bodyToCodecs -= passed
            if let body = buffer.readSlice(length: passed) {
                context.fireChannelRead(wrapInboundOut(body))
                passedOn = true
            }
            guard buffer.readableBytes > 0 else { return }
        }
        if pending == nil {
            pending = buffer
        } else {
            pending?.writeBuffer(&buffer)
        }
        if isIdle { takePending(context) }
    }

    /// The end of a read is the codecs' only when bytes of it went to them: a read this path took whole ends here, not
    /// in every handler behind it (which showed in profiles of `/auth/check`).
    func channelReadComplete(context: ChannelHandlerContext) {
        if passedOn {
            passedOn = false
            context.fireChannelReadComplete()
        }
    }

    /// Nothing is in progress: no exchange, no store lookup, no request with the codecs.
    private var isIdle: Bool {
        exchange == nil && !warming && codecOwes == 0 && bodyToCodecs == 0
    }

    /// The codecs' answer to a request handed to them has ended (`SaysConnectionOutcome` calls this once per answer). Called
    /// from within their write: what waits is taken up after it.
    func codecAnswered() {
        codecOwes = max(0, codecOwes - 1)
        guard let context, isIdle else { return }
        context.eventLoop.assumeIsolated().execute {
            guard self.isIdle, let context = self.context else { return }
            if self.readHeld {
                self.readHeld = false
                context.read()
            }
            self.takePending(context)
        }
    }

    func read(context: ChannelHandlerContext) {
        // While something is in progress the client may send its next requests; past a limit it is no longer read.
        if !isIdle, bodyToCodecs == 0, (pending?.readableBytes ?? 0) >= RawHTTP.requestHeadLimit {
            readHeld = true
            return
        }
        context.read()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // Shutting down: Hummingbird's connection handler would close a connection it sees as idle at once, under an
        // exchange in progress here. This path ends its connection itself once it is idle.
        if event is ChannelShouldQuiesceEvent {
            if codecOwes > 0 || bodyToCodecs > 0 {
                // Hummingbird ends the connection after the answer it owes; nothing after it is taken.
                pending = nil
                closeWhenIdle = true
                context.fireUserInboundEventTriggered(event)
            } else if isIdle {
                // Nothing in progress (what is pending is a head not yet whole).
                context.close(promise: nil)
            } else {
                closeWhenIdle = true
            }
            return
        }
        // The client has sent all it will (a half-close): what it sent before is answered first, then the
        // connection ends. Without anything of this path's in progress or waiting, the codecs decide, as ever.
        if event as? ChannelEvent == .inputClosed, exchange != nil || warming || pending != nil {
            inputClosed = true
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, let exchange, let connection = exchange.attempt.connection {
            if exchange.body != nil, exchange.deadline == nil {
                exchange.deadline = idleDeadline()
                armTimer(context)
            }
            try? connection.channel.syncOptions?.setOption(.autoRead, value: true)
        }
        context.fireChannelWritabilityChanged()
    }

    /// Takes the requests waiting, one at a time, until one goes to the upstream or to the handlers.
    private func takePending(_ context: ChannelHandlerContext) {
        taking: while isIdle, !closeWhenIdle, var buffer = pending {
            guard buffer.readableBytes > 0 else {
                pending = nil
                break
            }
            let parse = buffer.withUnsafeReadableBytes { RawHTTP.request($0) }
            switch parse {
            case .incomplete:
                break taking
            case .notTaken:
                return handOn(context)
            case .head(let head):
                let close = head.closesAfter
                if head.isBodilessGET,
                    let answer = checkAnswer(head, closing: close, allocator: context.channel.allocator)
                        ?? pageAnswer(head, from: buffer, closing: close, allocator: context.channel.allocator)
                {
                    // `/auth/check` or `/auth/forward`, or the sign-in or session page, from memory: answered at once,
                    // as the codec path would.
                    buffer.moveReaderIndex(forwardBy: head.length)
                    pending = buffer.readableBytes > 0 ? buffer : nil
                    warmed = false
                    clientTimer?.wholeRequestRead()
                    let written = context.writeAndFlush(wrapOutboundOut(answer))
                    if close { return endConnection(context, after: written) }
                    clientTimer?.answerEnded()
                    continue
                }
                let route = upstream?.owned.route(head.target, host: head.host)
                let takeable = head.isTakeable(available: buffer.readableBytes)
                guard takeable, case .upstream(let target)? = route, let request = upstreamRequest(head, target: target, from: buffer) else {
                    if takeable, !warmed, let hash = sessionHash(head.cookie), case .upstream(let target)? = route {
                        return warm(sessionHash: hash, request: AccessRequest(host: head.host, method: head.method, path: target.path), client: answers.resolver.clientAddress(forwardedFields(head), peer: peer), context: context)
                    }
                    // Counted while the store was asked: NIO's reader of heads counts it again.
                    if warmed { clientTimer?.headForgotten() }
                    warmed = false
                    handToCodecs(head, from: &buffer, context: context)
                    continue
                }
                guard let headBytes = buffer.readSlice(length: head.length) else { return handOn(context) }
                // The body, whole (`isTakeable`), went into the upstream's request.
                buffer.moveReaderIndex(forwardBy: head.contentLength ?? 0)
                pending = buffer.readableBytes > 0 ? buffer : nil
                exchange = Exchange(head: head, headBytes: headBytes, request: request, closeClient: close)
                exchange?.attempt.idempotent = head.isIdempotent
                // Its body came whole with it. A head that waited for the store was counted then.
                if !warmed {
                    clientTimer?.wholeRequestRead()
                }
                warmed = false
                answers.metrics.fastProxiedBytes.increment()
                admit()
            }
        }
        // Shutting down, or the client will send nothing more: what is left is at most a head that will not be whole.
        if isIdle, closeWhenIdle || inputClosed { context.close(promise: nil) }
    }

    /// Hands the request at the front of `buffer` (its head, and as much of its body as has come) to NIO's parser;
    /// the rest of its body follows as it comes, and the next request waits for the codecs' answer.
    private func handToCodecs(_ head: RawHTTP.RequestHead, from buffer: inout ByteBuffer, context: ChannelHandlerContext) {
        let body = head.contentLength ?? 0
        let passed = min(buffer.readableBytes, head.length + body)
        guard let request = buffer.readSlice(length: passed) else { return }
        pending = buffer.readableBytes > 0 ? buffer : nil
        codecOwes += 1
        bodyToCodecs = head.length + body - passed
        context.fireChannelRead(wrapInboundOut(request))
        context.fireChannelReadComplete()
    }

    /// Asks the store for the session (and has an assertion signed) off the event loop, then decides the request at
    /// the front of `pending` again, once.
    private func warm(sessionHash: String, request: AccessRequest, client: String, context: ChannelHandlerContext) {
        warming = true
        // The head is whole: the client's header limit no longer runs while the store is asked.
        clientTimer?.wholeRequestRead()
        let answers = answers
        let loop = context.eventLoop
        let handler = NIOLoopBound(self, eventLoop: loop)
        Task {
            await answers.warmUpstream(sessionHash: sessionHash, request: request, client: client)
            loop.execute { handler.value.warmedUp() }
        }
    }

    private func warmedUp() {
        warming = false
        guard let context, context.channel.isActive else { return }
        warmed = true
        if readHeld {
            readHeld = false
            context.read()
        }
        takePending(context)
    }

    /// Hands what is pending to NIO's parser and leaves the pipeline: the connection is Hummingbird's from here on.
    private func handOn(_ context: ChannelHandlerContext) {
        let rest = pending
        pending = nil
        // Handed on before leaving: a context that has left the pipeline reaches no handler.
        if let rest {
            context.fireChannelRead(wrapInboundOut(rest))
            context.fireChannelReadComplete()
        }
        if closeWhenIdle { context.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent()) }
        let askRead = readHeld
        readHeld = false
        let channel = context.channel
        _ = context.pipeline.syncOperations.removeHandler(context: context)
        if askRead { channel.read() }
    }

    /// The answer to `head` when it is a check (`/auth/check`, `/auth/forward`) that memory decides, as HTTP/1.1
    /// bytes; `closing`: the connection ends after it. The same bytes as `written` makes of `FastPathAnswers.decide`'s
    /// answer, but the lines before `Date` are made once per person, assertion and status on a connection, and the
    /// forwarded origin once per set of `X-Forwarded-*` values: a proxy asks for the same person again and again.
    private func checkAnswer(_ head: RawHTTP.RequestHead, closing: Bool, allocator: ByteBufferAllocator) -> ByteBuffer? {
        let path = Self.path(of: head.target)
        guard path == "/auth/check" || path == "/auth/forward" else { return nil }
        let query = head.target.utf8.firstIndex(of: UInt8(ascii: "?")).map { head.target[head.target.index(after: $0)...] }
        let (checked, origin) = forwardedOrigin(head)
        guard let pass = answers.checkPass(
            path: path, request: checked, narrowing: query.map(CheckNarrowing.parse) ?? [], audience: origin, idHash: sessionHash(head.cookie), now: Date()
        ) else { return nil }
        let lines: ByteBuffer
        if let last = lastCheck, last.status == pass.status, last.assertion == pass.assertion, last.user == pass.user, last.groups == pass.groups {
            lines = last.lines
        } else {
            var made = allocator.buffer(capacity: 1024)
            Self.writeStatusAndFields(&made, pass.status, answers.checkFields(pass))
            lastCheck = (pass.status, pass.user, pass.groups, pass.assertion, made)
            lines = made
        }
        var out = allocator.buffer(capacity: lines.readableBytes + 80)
        out.writeImmutableBuffer(lines)
        writeStamp(&out)
        Self.endHead(&out, closing: closing, keptHTTP10: head.isHTTP10 && !closing)
        return out
    }

    /// The sign-in or session page when memory decides who asks (`SitePages`), as HTTP/1.1 bytes, body included: the
    /// page's fields, its length, the security headers, `Date` and `Server`, as the middleware and Hummingbird add
    /// them to the handlers' answer. `buffer` starts with `head`. HTTP/1.0 and two `Accept-Language` fields (which
    /// the handlers read joined) are the handlers'.
    private func pageAnswer(_ head: RawHTTP.RequestHead, from buffer: ByteBuffer, closing: Bool, allocator: ByteBufferAllocator) -> ByteBuffer? {
        guard let pages = answers.pages, !head.isHTTP10, SitePages.page(head.target) != nil else { return nil }
        var language: String?
        for line in head.lines where line.name == "accept-language" {
            guard language == nil else { return nil }
            language = buffer.getString(at: buffer.readerIndex + line.value.lowerBound, length: line.value.count)
        }
        guard let page = pages.fromMemory(target: head.target, sessionHash: sessionHash(head.cookie), cookie: head.cookie, acceptLanguage: language, now: Date())
        else { return nil }
        answers.metrics.fastPages.increment()
        var fields = page.headers
        fields[.contentLength] = String(page.body.readableBytes)
        answers.security.secure(&fields)
        var out = allocator.buffer(capacity: page.body.readableBytes + 1024)
        Self.writeStatusAndFields(&out, page.status, fields)
        writeStamp(&out)
        Self.endHead(&out, closing: closing)
        out.writeImmutableBuffer(page.body)
        return out
    }

    /// What a trusted proxy says of the request it checks (`ClientAddressResolver.checkedRequest`) and the origin it
    /// was made to (`forwardedOrigin`), read once per set of `X-Forwarded-*` and `X-Original-*` values on a connection.
    private func forwardedOrigin(_ head: RawHTTP.RequestHead) -> (AccessRequest, String?) {
        guard peerTrusted, !head.forwarded.isEmpty else { return (AccessRequest(host: nil, method: nil, path: nil), nil) }
        if let last = lastForwarded, last.fields.elementsEqual(head.forwarded, by: { $0.name == $1.name && $0.value == $1.value }) {
            return (last.request, last.origin)
        }
        let fields = forwardedFields(head)
        let origin = answers.resolver.forwardedOrigin(fields, fromTrusted: true)
        let request = answers.resolver.checkedRequest(fields, fromTrusted: true)
        lastForwarded = (head.forwarded, request, origin)
        return (request, origin)
    }

    /// The `X-Forwarded-*` fields of `head` as the resolver reads them: none from a peer that is not a trusted proxy.
    private func forwardedFields(_ head: RawHTTP.RequestHead) -> HTTPFields {
        var fields = HTTPFields()
        guard peerTrusted else { return fields }
        for (name, value) in head.forwarded {
            if let fieldName = HTTPField.Name(name) { fields.append(HTTPField(name: fieldName, lenientValue: Array(value.utf8))) }
        }
        return fields
    }

    /// The request the upstream gets for `head` (at the front of `source`, with its body if it has one; its target
    /// read as `target`), when it passes from memory; nil when the handlers decide.
    private func upstreamRequest(_ head: RawHTTP.RequestHead, target: RequestTarget, from source: ByteBuffer) -> ByteBuffer? {
        guard let upstream, let context, let method = HTTPRequest.Method(head.method) else { return nil }
        let now = Date()
        guard let pass = answers.upstreamPass(method: method, host: head.host, target: target, sessionHash: { sessionHash(head.cookie) }, now: now) else { return nil }
        let settings = upstream.rawPool.settings
        let forwarder = upstream.gate.forwarder
        var out = context.channel.allocator.buffer(capacity: head.length + (head.contentLength ?? 0) + 1024)
        out.writeString(head.method)
        out.writeString(" ")
        out.writeString(settings.basePath)
        out.writeString(target.forwarded)
        out.writeString(" HTTP/1.1\r\n")
        // Where the request came from, as the codec path says it (from a trusted proxy's headers, else the peer).
        let resolver = answers.resolver
        let forwarded: UpstreamForwarder.ForwardedFields
        if peerTrusted, !head.forwarded.isEmpty {
            let fields = forwardedFields(head)
            forwarded = .init(
                for: resolver.forwardedFor(fields, peer: peer), proto: resolver.scheme(fields, peer: peer),
                host: resolver.host(fields, authority: head.host, peer: peer) ?? head.host
            )
        } else {
            // From a client, or a trusted proxy that said nothing: what the resolver answers then.
            forwarded = .init(for: resolver.peerName(peer), proto: "http", host: head.host)
        }
        var identity: [HTTPField] = []
        if case .identified(let user, let groups, let assertion) = pass { identity = identityFields(user, groups: groups, assertion: assertion) }
        // The rest of the head as the handlers' carriers write it: one writer (`UpstreamForwarder.writeHead`).
        let fields = head.lines.lazy.map { line -> (String, String, String) in
            let name = source.getString(at: source.readerIndex + line.line.lowerBound, length: line.name.utf8.count) ?? line.name
            let value = source.getString(at: source.readerIndex + line.value.lowerBound, length: line.value.count) ?? ""
            return (line.name, name, value)
        }
        var sink = RawHeadSink(buffer: out)
        forwarder.writeHead(to: &sink, clientFields: fields, connection: head.connection, forwarded: forwarded, identity: identity)
        out = sink.buffer
        if let length = head.contentLength {
            // The body's length goes with the body (the client's `Content-Length` stays with siwa, as on the handlers').
            Self.writeField(&out, "Content-Length", String(length))
            out.writeString("\r\n")
            guard let body = source.viewBytes(at: source.readerIndex + head.length, length: length) else { return nil }
            out.writeBytes(body)
            return out
        }
        out.writeString("\r\n")
        return out
    }

    /// One of siwa's own answers as HTTP/1.1 bytes, up to its body; `closing`: the connection ends after it.
    private static func written(_ response: HTTPResponse, closing: Bool, allocator: ByteBufferAllocator) -> ByteBuffer {
        var out = allocator.buffer(capacity: 1024)
        writeStatusAndFields(&out, response.status, response.headerFields)
        endHead(&out, closing: closing)
        return out
    }

    /// The status line and the header lines of one of siwa's answers.
    private static func writeStatusAndFields(_ out: inout ByteBuffer, _ status: HTTPResponse.Status, _ fields: HTTPFields) {
        out.writeString("HTTP/1.1 \(status.code) \(status.reasonPhrase)\r\n")
        for field in fields { writeField(&out, field.name.rawName, field.value) }
    }

    /// The end of an answer's head: `Connection: close` when the connection ends after it (`Connection: keep-alive`
    /// to an HTTP/1.0 request that keeps it, as `SaysConnectionOutcome` says it on the codecs' answers), then the
    /// empty line.
    private static func endHead(_ out: inout ByteBuffer, closing: Bool, keptHTTP10: Bool = false) {
        if closing { out.writeString("Connection: close\r\n") }
        if keptHTTP10 { out.writeString("Connection: keep-alive\r\n") }
        out.writeString("\r\n")
    }

    /// siwa's `Date` and `Server`, as Hummingbird writes them on the handlers' answers.
    private func writeStamp(_ out: inout ByteBuffer) {
        Self.writeField(&out, "Date", answers.dates.now)
        Self.writeField(&out, "Server", FastPathAnswers.serverName)
    }

    fileprivate static func writeField(_ out: inout ByteBuffer, _ name: String, _ value: String) {
        out.writeString(name)
        out.writeString(": ")
        out.writeString(value)
        out.writeString("\r\n")
    }

    /// The identity fields of `user` in `groups` with `assertion`, made once per person, groups and assertion on a
    /// connection.
    private func identityFields(_ user: UserRecord, groups: [String], assertion: String) -> [HTTPField] {
        if let last = lastIdentity, last.assertion == assertion, last.user == user, last.groups == groups { return last.fields }
        let fields = UpstreamGate.identityFields(user, groups: groups, assertion: assertion)
        lastIdentity = (user, groups, assertion, fields)
        return fields
    }

    /// The SHA-256 of the session cookie in `cookie` (the `Cookie` header).
    private func sessionHash(_ cookie: String?) -> String? {
        cookie.flatMap { read($0).sessionHash }
    }

    /// What the `Cookie` header says, read once per header on a connection.
    private func read(_ cookie: String) -> (header: String, sessionHash: String?) {
        if let last = lastCookie, last.header == cookie { return last }
        var fields = HTTPFields()
        fields.append(HTTPField(name: .cookie, lenientValue: Array(cookie.utf8)))
        let hash = fields.cookieValue(answers.sessionCookie).flatMap(FastPathAnswers.sessionHash)
        let read = (cookie, hash)
        lastCookie = read
        return read
    }

    /// The path of an origin-form target, as Hummingbird's `URI` reads it: up to the query.
    static func path(of target: String) -> String {
        guard let query = target.utf8.firstIndex(of: UInt8(ascii: "?")) else { return target }
        return String(target[..<query])
    }

    // MARK: The upstream's side

    /// Takes a place at the upstream for the exchange (`upstream_max_connections`), then connects; with none free, waits
    /// in line for one for at most `upstream_timeout_ms` (then, or with the line full, siwa's 503 page).
    private func admit() {
        guard let exchange, let context, let upstream else { return }
        let admission = upstream.gate.forwarder.admission
        if admission.tryEnter() {
            exchange.admitted = true
            return connect(fresh: false)
        }
        let loop = context.eventLoop
        let handler = NIOLoopBound(self, eventLoop: loop)
        let waiting = NIOLoopBound(exchange, eventLoop: loop)
        guard let ticket = admission.enter({ granted in loop.execute { handler.value.admitted(granted, waiting.value) } }) else { return }
        exchange.ticket = ticket
        loop.assumeIsolated().scheduleTask(in: .milliseconds(Int64(upstream.rawPool.settings.timeoutMS))) {
            if admission.giveUp(ticket) { self.admitted(false, exchange) }
        }
    }

    /// The wait for a place at the upstream is over for `waited`: connect, or answer 503.
    private func admitted(_ granted: Bool, _ waited: Exchange) {
        guard let exchange, exchange === waited else {
            // The client left meanwhile: the place goes to the next in line.
            if granted { upstream?.gate.forwarder.admission.leave() }
            return
        }
        exchange.ticket = nil
        guard granted else { return failed(.busy) }
        exchange.admitted = true
        connect(fresh: false)
    }

    /// Frees the exchange's place at the upstream, or its place in line.
    private func release(_ exchange: Exchange) {
        guard let admission = upstream?.gate.forwarder.admission else { return }
        if exchange.admitted {
            exchange.admitted = false
            admission.leave()
        } else if let ticket = exchange.ticket {
            exchange.ticket = nil
            // Its place came meanwhile: `admitted` frees it when it arrives.
            _ = admission.giveUp(ticket)
        }
    }

    private func connect(fresh: Bool) {
        guard let context, let pool = upstream?.rawPool else { return }
        pool.acquire(on: context.eventLoop, fresh: fresh) { result in
            switch result {
            case .success(let (connection, reused)): self.connected(connection, reused: reused)
            case .failure(let failure): self.failed(failure)
            }
        }
    }

    private func connected(_ connection: UpstreamConnection<ByteBuffer>, reused: Bool) {
        guard let exchange, let context else {
            // The client left meanwhile: the connection goes back unused.
            upstream?.rawPool.finish(connection, reusable: true)
            return
        }
        let handler = connection.handler.value
        handler.delegate = self
        exchange.attempt.connection = connection
        exchange.attempt.reused = reused
        let timeoutMS = Int64(upstream?.rawPool.settings.timeoutMS ?? 30_000)
        exchange.deadline = .now() + .milliseconds(timeoutMS)
        armTimer(context)
        handler.send(exchange.request)
    }

    /// When an answer's body that has gone silent now is ended (`upstream_idle_timeout_ms` from now).
    private func idleDeadline() -> NIODeadline {
        .now() + .milliseconds(Int64(upstream?.rawPool.settings.idleTimeoutMS ?? 300_000))
    }

    private func armTimer(_ context: ChannelHandlerContext) {
        guard let deadline = exchange?.deadline else { return }
        // A timer due no later serves; one due later (the head's, when the body's idle limit is shorter) is replaced.
        if timer != nil, let due = timerDue, due <= deadline { return }
        timer?.cancel()
        timerDue = deadline
        timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) {
            self.timer = nil
            self.timerDue = nil
            guard let context = self.context, let due = self.exchange?.deadline else { return }
            if due <= .now() {
                self.timedOut()
            } else {
                self.armTimer(context)
            }
        }
    }

    private func timedOut() {
        guard let exchange else { return }
        guard exchange.body == nil else {
            return upstreamBrokeMidway("the upstream's answer was silent for upstream_idle_timeout_ms (\(upstream?.rawPool.settings.idleTimeoutMS ?? 0) ms)")
        }
        upstream?.rawPool.finish(exchange.attempt.connection, reusable: false)
        failed(.timedOut)
    }

    /// No answer came: a reused connection is tried once more with a new one; otherwise siwa's 502 or 504 page.
    private func failed(_ failure: UpstreamForwarder.Failure) {
        guard let exchange, let context else { return }
        exchange.deadline = nil
        if exchange.attempt.retries(after: failure) {
            exchange.answer = nil
            return connect(fresh: true)
        }
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        answers.failurePage(failure, for: requestForPage(exchange), on: context.eventLoop) { head, body in handler.value.answerFailure(head, body: body) }
    }

    /// The client's request as the page renderer reads it (its language, whether it asks for JSON).
    private func requestForPage(_ exchange: Exchange) -> HTTPRequest {
        var fields = HTTPFields()
        for line in exchange.head.lines {
            guard line.name != "host", let name = HTTPField.Name(line.name),
                let value = exchange.headBytes.getBytes(at: exchange.headBytes.readerIndex + line.value.lowerBound, length: line.value.count)
            else { continue }
            fields.append(HTTPField(name: name, lenientValue: value))
        }
        return HTTPRequest(method: .get, scheme: nil, authority: exchange.head.host, path: exchange.head.target, headerFields: fields)
    }

    private func answerFailure(_ head: HTTPResponse, body: ByteBuffer) {
        guard let context, let exchange, exchange.body == nil else { return }
        var out = Self.written(head, closing: exchange.closeClient, allocator: context.channel.allocator)
        var body = body
        out.writeBuffer(&body)
        context.writeAndFlush(wrapOutboundOut(out), promise: nil)
        finish(reusable: false)
    }

    func upstream(read buffer: ByteBuffer) {
        guard let exchange, let context else { return }
        var buffer = buffer
        if exchange.body == nil {
            // The head, read whole first (interim answers skipped).
            if exchange.answer == nil {
                exchange.answer = buffer
            } else {
                exchange.answer?.writeBuffer(&buffer)
            }
            guard var answer = exchange.answer else { return }
            while true {
                let parse = answer.withUnsafeReadableBytes { RawHTTP.response($0) }
                switch parse {
                case .incomplete:
                    exchange.answer = answer
                    return
                case .invalid(let reason):
                    return upstreamBroke("upstream answered with something that is not HTTP/1.1: \(reason)")
                case .head(let head):
                    if head.status < 200 {
                        // An interim answer (100, 102, 103) is not passed on, as async-http-client does not pass one
                        // on the handlers' path; a 101 (nobody asked to switch) is a broken upstream on both.
                        guard head.status != 101 else {
                            return upstreamBroke("the upstream answered \(head.status) to a \(exchange.head.method) that asked for no protocol switch")
                        }
                        answer.moveReaderIndex(forwardBy: head.length)
                        continue
                    }
                    exchange.answer = nil
                    exchange.keepAlive = head.keepAlive
                    var (out, body) = answerHead(head, from: answer, closeClient: exchange.closeClient, context: context)
                    answer.moveReaderIndex(forwardBy: head.length)
                    // A small body that came whole with its head goes out with it, in one write.
                    if case .length(let remaining) = body, remaining <= 16 * 1024, answer.readableBytes >= remaining,
                        var whole = answer.readSlice(length: remaining)
                    {
                        out.writeBuffer(&whole)
                        body = .ended(reusable: true)
                    }
                    context.write(wrapOutboundOut(out), promise: nil)
                    exchange.body = body
                    buffer = answer
                }
                break
            }
        }
        guard let body = relay(&buffer, body: exchange.body ?? .ended(reusable: false), context: context) else { return }
        exchange.body = body
        if case .ended(let reusable) = body {
            context.flush()
            // Bytes after the answer's end answer no request: that connection is not used again.
            finish(reusable: reusable && exchange.keepAlive && buffer.readableBytes == 0)
        } else if !context.channel.isWritable, let connection = exchange.attempt.connection {
            // The client is slower than the upstream: stop reading the upstream until it catches up (and its silence
            // meanwhile is siwa's doing, not the upstream's).
            exchange.deadline = nil
            try? connection.channel.syncOptions?.setOption(.autoRead, value: false)
        } else {
            exchange.deadline = idleDeadline()
            armTimer(context)
        }
    }

    /// The upstream's response head as the client gets it, and the body's framing from here.
    private func answerHead(_ head: RawHTTP.ResponseHead, from answer: ByteBuffer, closeClient: Bool, context: ChannelHandlerContext) -> (ByteBuffer, Body) {
        var out = context.channel.allocator.buffer(capacity: head.length + 64)
        out.writeString("HTTP/1.1 ")
        out.writeString(String(head.status))
        out.writeString(" ")
        let start = answer.readerIndex
        if let reason = answer.viewBytes(at: start + head.reason.lowerBound, length: head.reason.count) { out.writeBytes(reason) }
        out.writeString("\r\n")
        let named = UpstreamForwarder.connectionNamed(head.connection)
        var lengthWritten = false
        for line in head.lines where line.name != "date" && line.name != "server" {
            // Equal lengths repeated are one length (the head was refused if they differed).
            if line.name == "content-length" {
                if lengthWritten { continue }
                lengthWritten = true
            }
            let dropped = UpstreamForwarder.dropsFromClient(line.name, named: named) {
                answer.getString(at: start + line.value.lowerBound, length: line.value.count) ?? ""
            }
            guard !dropped, let bytes = answer.viewBytes(at: start + line.line.lowerBound, length: line.line.count) else { continue }
            out.writeBytes(bytes)
            out.writeString("\r\n")
        }
        writeStamp(&out)
        let body: Body
        switch head.framing {
        case .none:
            body = .ended(reusable: true)
        case .length(let length):
            body = length == 0 ? .ended(reusable: true) : .length(remaining: length)
        case .chunked:
            Self.writeTransferCodings(&out, head.codings)
            body = .chunked(ChunkedFraming())
        case .close:
            Self.writeTransferCodings(&out, head.codings)
            body = .untilClose
        }
        if closeClient { out.writeString("Connection: close\r\n") }
        out.writeString("\r\n")
        return (out, body)
    }

    /// Passes on the part of `buffer` that belongs to the body; what is left after its end stays in `buffer`. Nil when
    /// the body broke off (the exchange is then abandoned and the client's connection closed).
    private func relay(_ buffer: inout ByteBuffer, body: Body, context: ChannelHandlerContext) -> Body? {
        switch body {
        case .ended:
            return body
        case .length(let remaining):
            guard buffer.readableBytes > 0 else { return body }
            let taken = min(remaining, buffer.readableBytes)
            if let slice = buffer.readSlice(length: taken) { context.write(wrapOutboundOut(slice), promise: nil) }
            return taken == remaining ? .ended(reusable: true) : .length(remaining: remaining - taken)
        case .chunked(var framing):
            // Chunked again by siwa, its data as it came: the upstream's chunk extensions and trailers (which could
            // set a cookie of siwa's) stay behind, as they do on the codec path.
            guard buffer.readableBytes > 0 else { return body }
            var data: [Range<Int>] = []
            let progress = buffer.withUnsafeReadableBytes { framing.consume($0) { data.append($0) } }
            if progress == .invalid {
                upstreamBrokeMidway("upstream sent a malformed chunked body")
                return nil
            }
            let start = buffer.readerIndex
            for range in data {
                if let slice = buffer.getSlice(at: start + range.lowerBound, length: range.count) { writeChunk(slice, context: context) }
            }
            switch progress {
            case .ended(let length):
                buffer.moveReaderIndex(forwardBy: length)
                context.write(wrapOutboundOut(ByteBuffer(string: "0\r\n\r\n")), promise: nil)
                return .ended(reusable: true)
            case .more, .invalid:
                buffer.moveReaderIndex(forwardBy: buffer.readableBytes)
                return .chunked(framing)
            }
        case .untilClose:
            guard buffer.readableBytes > 0, let slice = buffer.readSlice(length: buffer.readableBytes) else { return body }
            writeChunk(slice, context: context)
            return body
        }
    }

    /// The `Transfer-Encoding` of a body siwa chunks for the client: the upstream's codings other than `chunked`
    /// (`gzip`, say) kept as they came, since the bytes relayed are still in them, then `chunked`.
    private static func writeTransferCodings(_ out: inout ByteBuffer, _ codings: String?) {
        out.writeString("Transfer-Encoding: ")
        if let codings {
            out.writeString(codings)
            out.writeString(", ")
        }
        out.writeString("chunked\r\n")
    }

    /// Writes `data` to the client as one chunk.
    private func writeChunk(_ data: ByteBuffer, context: ChannelHandlerContext) {
        guard data.readableBytes > 0 else { return }
        var size = context.channel.allocator.buffer(capacity: 16)
        size.writeString(String(data.readableBytes, radix: 16) + "\r\n")
        context.write(wrapOutboundOut(size), promise: nil)
        context.write(wrapOutboundOut(data), promise: nil)
        context.write(wrapOutboundOut(ByteBuffer(string: "\r\n")), promise: nil)
    }

    func upstreamReadComplete() {
        context?.flush()
    }

    func upstream(failed error: (any Error)?) {
        guard let exchange, let context else { return }
        exchange.attempt.connection = nil
        switch exchange.body {
        case nil:
            failed(.unreachable(error ?? UpstreamClosed()))
        case .untilClose?:
            guard error == nil else {
                // Reset, or TLS ended without its close: the body may be cut, and must not look whole.
                return upstreamBrokeMidway("upstream connection failed before its answer was over: \(error.map { "\($0)" } ?? "")")
            }
            // The end of the body, as the upstream framed it.
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: "0\r\n\r\n")), promise: nil)
            finish(reusable: false)
        case .ended?:
            break
        case .length?, .chunked?:
            upstreamBrokeMidway("upstream connection ended before its answer did: \(error.map { "\($0)" } ?? "closed")")
        }
    }

    /// The upstream's answer cannot be read before anything reached the client: the 502 page, its connection closed.
    private func upstreamBroke(_ reason: String) {
        guard let exchange else { return }
        upstream?.rawPool.finish(exchange.attempt.connection, reusable: false)
        // Not a connection the upstream closed while idle: nothing to try again.
        exchange.attempt.retried = true
        failed(.broken(reason))
    }

    /// The answer broke off midway: the client cannot be told otherwise than by ending its connection.
    private func upstreamBrokeMidway(_ reason: String) {
        answers.logger.error("upstream answer broke off", metadata: ["error": "\(reason)"])
        abandonExchange()
        context?.close(promise: nil)
    }

    /// The exchange is over: its connection goes back to the pool (or is closed), and what waited is taken up.
    private func finish(reusable: Bool) {
        guard let exchange, let context else { return }
        self.exchange = nil
        release(exchange)
        upstream?.rawPool.finish(exchange.attempt.connection, reusable: reusable)
        if exchange.closeClient { return endConnection(context, after: context.writeAndFlush(wrapOutboundOut(ByteBuffer()))) }
        clientTimer?.answerEnded()
        if readHeld {
            readHeld = false
            context.read()
        }
        takePending(context)
    }

    /// Ends the connection after an answer that closes it, as every carrier does (`SaysConnectionOutcome.end`);
    /// what the client sends after it is not read.
    private func endConnection(_ context: ChannelHandlerContext, after written: EventLoopFuture<Void>) {
        ended = true
        pending = nil
        SaysConnectionOutcome.end(context, after: written)
    }

    private func abandonExchange() {
        guard let exchange else { return }
        self.exchange = nil
        release(exchange)
        upstream?.rawPool.finish(exchange.attempt.connection, reusable: false)
    }
}

/// The byte path's upstream request head, written as HTTP/1.1 lines (`UpstreamForwarder.writeHead`).
private struct RawHeadSink: UpstreamHeadSink {
    var buffer: ByteBuffer

    mutating func add(name: String, value: String) {
        RawFrontPath.writeField(&buffer, name, value)
    }
}
