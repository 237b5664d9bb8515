import DoorHTTP
import EnvoyAuthorization
import Foundation
import HTTPTypes
import NIOCore

/// One connection's answers from memory on the byte path (`RawFrontPath`): the checks and siwa's pages it answers
/// itself, and the upstream's request for a `GET` passed from memory, decided by `BytePathAnswers` (the door's
/// policy) and written as bytes. It remembers what a connection repeats (a proxy asks for the same person again and
/// again, a browser sends the same cookie), so that each is read or made once: the `Cookie` and its session's hash,
/// the identity fields, the last check's lines, the trusted proxy's `X-Forwarded-*`.
final class ConnectionMemory {
    private let answers: BytePathAnswers
    private var peer: String?
    /// The peer is a trusted proxy (its `X-Forwarded-*` are read); the peer of a connection does not change.
    private var peerTrusted = false
    /// The last `Cookie` header seen on this connection and the SHA-256 of its session cookie.
    private var lastCookie: CookieMemo?
    /// The last identity sent on this connection, as header fields.
    private var lastIdentity: IdentityMemo?
    /// The last check answered from memory on this connection: what it said, and its status line and header lines
    /// before `Date`.
    private var lastCheck: CheckMemo?
    /// The last `Authorization` value seen on this connection and what it presents (a bearer token's hash).
    private var lastAuthorization: AuthorizationMemo?
    /// The last HTTP `ext_authz` check answered from memory on this connection: whom it let in, with which assertion,
    /// the names it had Envoy remove, and its status line and fields before `Date`.
    private var lastExtAuthz: EnvoyAnswerMemo?
    /// The last gRPC `Check` answered from memory on this connection: whom it let in, with which assertion, the names
    /// it had Envoy remove, and its framed `CheckResponse`.
    private var lastGRPCCheck: EnvoyAnswerMemo?
    /// The last `X-Forwarded-*` values a trusted proxy sent on this connection, and the origin they name.
    private var lastForwarded: ForwardedMemo?
    /// siwa's own lines to the upstream for the last request passed on this connection, and what they were made of.
    private var lastSiwaLines: SiwaLinesMemo?
    /// The connection's one timer for its exchanges' deadlines, shared by an HTTP/2 connection's streams.
    let timer = ConnectionTimer()
    /// What builds the handlers behind the byte path, called before it first hands bytes on to them (with its own
    /// context): an HTTP/2 stream's codecs, built only for a stream it does not take. Nil when they are there from the
    /// start (an HTTP/1.1 connection).
    var buildsBehind: ((ChannelHandlerContext) throws -> Void)?

    init(answers: BytePathAnswers) {
        self.answers = answers
    }

    /// The client's address for `head`, as the handlers read it (`ClientAddressResolver.clientAddress`): a trusted
    /// proxy's `X-Forwarded-For`, else the peer.
    func clientAddress(_ head: RawHTTP.RequestHead) -> String {
        answers.resolver.clientAddress(forwardedFields(head), peer: peer)
    }

    /// The connection's peer, once known.
    func learnPeer(_ address: String?) {
        peer = address
        peerTrusted = answers.resolver.trusted(address)
        lastSiwaLines = nil
    }

    /// The answer to `head` when it is a check (`/auth/check`, `/auth/forward`) that memory decides, as HTTP/1.1
    /// bytes; `closing`: the connection ends after it. The same bytes as `written` makes of `BytePathAnswers.decide`'s
    /// answer, but the lines before `Date` are made once per person, assertion and status on a connection, and the
    /// forwarded origin once per set of `X-Forwarded-*` values: a proxy asks for the same person again and again.
    /// A person memory holds whose sign-in is too old for the rule (`max_auth_age`) is answered as the handlers answer
    /// (`stepUpAnswer`). `buffer` starts with `head`.
    func checkAnswer(_ head: RawHTTP.RequestHead, from buffer: ByteBuffer, closing: Bool, allocator: ByteBufferAllocator) -> ByteBuffer? {
        let path = Self.path(of: head.target)
        // A bearer token is the handlers' to read (`BearerCredential`): in the check's own request, or in the original
        // URI's query a trusted proxy names (found by `BytePathTests.tokenInOriginalQuery`:
        // memory passed a cookie's person where the handlers refuse the token in the URL).
        guard DoorRoutes.Check(path: path) != nil, !head.mayHoldToken, !originalQueryMayHoldToken(head) else { return nil }
        let query = RawHTTP.queryMark(head.target).map { head.target[head.target.index(after: $0)...] }
        let narrowing = query.map(CheckNarrowing.parse) ?? []
        let (checked, origin) = forwardedOrigin(head)
        guard let presented = presented(head), let found = answers.checkPass(
            path: path, request: checked, narrowing: narrowing, audience: origin, presented: presented, authorization: head.authorization, now: Date()
        ) else { return nil }
        let pass: BytePathAnswers.CheckPass
        switch found {
        case .pass(let passed):
            pass = passed
        case .stepUp(let decision, let check):
            return stepUpAnswer(decision, at: check, head, from: buffer, checked: checked, narrowing: narrowing, closing: closing, allocator: allocator)
        }
        let lines: ByteBuffer
        if let last = lastCheck, last.status == pass.status, last.assertion == pass.assertion, last.person == pass.person,
            last.authorization == pass.authorization
        {
            lines = last.lines
        } else {
            var made = allocator.buffer(capacity: 1024)
            ByteHead.writeStatusAndFields(&made, pass.status, answers.checkFields(pass))
            lastCheck = CheckMemo(status: pass.status, person: pass.person, assertion: pass.assertion, authorization: pass.authorization, lines: made)
            lines = made
        }
        var out = allocator.buffer(capacity: lines.readableBytes + 80)
        out.writeImmutableBuffer(lines)
        ByteHead.writeStamp(&out, dates: answers.dates)
        ByteHead.endHead(&out, closing: closing, keptHTTP10: head.isHTTP10 && !closing)
        return out
    }

    /// A check's answer for a person memory holds whose sign-in is older than the rule allows: the door's request built
    /// from `head` as the handlers build it (`ForwardAuthController.doorRequest`), its verdict rendered as they render
    /// it (nginx's check: 401 with RFC 9470's challenge; Traefik's and Caddy's: for a navigation, the page that says
    /// why, whose button signs in again and comes back to the original URL). HTTP/1.0 is the handlers'.
    private func stepUpAnswer(
        _ decision: AccessDecision, at check: DoorRoutes.Check, _ head: RawHTTP.RequestHead, from buffer: ByteBuffer, checked: AccessRequest,
        narrowing: [AccessPolicy], closing: Bool, allocator: ByteBufferAllocator
    ) -> ByteBuffer? {
        guard !head.isHTTP10 else { return nil }
        let fields = Self.fields(of: head, in: buffer)
        let resolver = answers.resolver
        let forward = check == .forward
        let original = forward ? resolver.forwardedURL(fields, fromTrusted: peerTrusted) : nil
        let request = DoorRequest(
            asked: checked, method: forward ? resolver.forwardedMethod(fields, fromTrusted: peerTrusted, own: head.method) : head.method, fields: fields,
            credential: .none, clientAddress: clientAddress(head), original: original, narrowing: narrowing
        )
        return written(answers.refusal(decision, for: request, at: forward ? .forward : .check), closing: closing, allocator: allocator)
    }

    /// One of siwa's pages (or a refusal) as HTTP/1.1 bytes, body included: its fields, its length, the security
    /// headers, `Date` and `Server`, as the middleware and Hummingbird add them to the handlers' answer.
    private func written(_ page: RenderedPage, closing: Bool, allocator: ByteBufferAllocator) -> ByteBuffer {
        var fields = page.headers
        fields[.contentLength] = String(page.body.readableBytes)
        answers.security.secure(&fields)
        var out = allocator.buffer(capacity: page.body.readableBytes + 1024)
        ByteHead.writeStatusAndFields(&out, page.status, fields)
        ByteHead.writeStamp(&out, dates: answers.dates)
        ByteHead.endHead(&out, closing: closing)
        out.writeImmutableBuffer(page.body)
        return out
    }

    /// The header fields of `head` (which `buffer` starts with) as the handlers read them: every line but `Host`,
    /// which HTTP's types keep as the authority.
    static func fields(of head: RawHTTP.RequestHead, in buffer: ByteBuffer) -> HTTPFields {
        var fields = HTTPFields()
        for line in head.lines {
            guard line.name != "host", let name = HTTPField.Name(line.name),
                let value = buffer.getBytes(at: buffer.readerIndex + line.value.lowerBound, length: line.value.count)
            else { continue }
            fields.append(HTTPField(name: name, lenientValue: value))
        }
        return fields
    }

    /// The answer to `head` when it is Envoy's `ext_authz` check over HTTP (`/auth/ext-authz/<original target>`) from a
    /// trusted proxy that memory lets pass, as HTTP/1.1 bytes: 200 with the identity fields, the assertion addressed to
    /// the original origin and `x-envoy-auth-headers-to-remove`, as `ExtAuthzController.http` answers it. Anything
    /// else (an asker that is not a trusted proxy, a preflight, a refusal) is the handlers'.
    func extAuthzAnswer(_ head: RawHTTP.RequestHead, closing: Bool, allocator: ByteBufferAllocator) -> ByteBuffer? {
        guard peerTrusted, !head.mayHoldToken, let target = EnvoyOriginal.target(checkTarget: head.target) else { return nil }
        // `X-Forwarded-Proto` as the handlers read it (its first item).
        let scheme = head.forwarded.first { $0.name == "x-forwarded-proto" }.flatMap { field -> String? in
            guard let name = HTTPField.Name.xForwardedProto else { return nil }
            return answers.resolver.forwarded(name, HTTPFields([HTTPField(name: name, value: field.value)]), fromTrusted: true)
        }
        guard let (admission, assertion, set, removed) = envoyPass(
            method: head.method, target: target, host: head.host, scheme: scheme, authorization: head.authorization, cookie: head.cookie,
            claimed: head.lines.lazy.map(\.name), mode: "http"
        ) else { return nil }
        var out = allocator.buffer(capacity: 2048)
        // The status line and fields before `Date`, made once per person, assertion and removed names on a connection:
        // Envoy asks for the same person again and again.
        if let last = lastExtAuthz, last.person == admission.person, last.assertion == assertion, last.removed == removed {
            out.writeImmutableBuffer(last.answer)
        } else {
            var fields = DoorPolicy.passed(.ok).headers
            fields.append(contentsOf: set)
            if !removed.isEmpty, let name = HTTPField.Name.envoyAuthHeadersToRemove { fields[name] = removed.joined(separator: ",") }
            fields[.contentLength] = "0"
            answers.security.secure(&fields)
            ByteHead.writeStatusAndFields(&out, .ok, fields)
            lastExtAuthz = EnvoyAnswerMemo(person: admission.person, assertion: assertion, removed: removed, answer: out)
        }
        ByteHead.writeStamp(&out, dates: answers.dates)
        ByteHead.endHead(&out, closing: closing, keptHTTP10: head.isHTTP10 && !closing)
        return out
    }

    /// What an Envoy check (`mode` `http` or `grpc`) from a trusted proxy that memory lets pass comes to: the admission,
    /// the assertion for the original origin, the identity fields (made once per person and assertion on a connection)
    /// and the names Envoy is to remove of those the client sent (`claimed`); nil when the handler answers (a preflight,
    /// no origin or URL, a credential the handlers refuse, a refusal, a sign-in, a session or assertion not in memory).
    /// Both modes read the original request here; the caller has already turned away a token in its URL and two
    /// `Authorization` fields.
    private func envoyPass(
        method: String, target: String, host: String?, scheme: String?, authorization: String?, cookie: String?, claimed: some Sequence<String>, mode: String
    ) -> (admission: Admission, assertion: String?, set: [HTTPField], removed: [String])? {
        // An `OPTIONS` may be a CORS preflight, judged by fields only the handlers read (as `upstreamPass`).
        guard method != "OPTIONS", let origin = EnvoyOriginal.origin(host: host, scheme: scheme, fromTrusted: true) else { return nil }
        let (asked, url) = EnvoyOriginal.asked(method: method, target: target, host: host, origin: origin, isPreflight: false)
        guard url != nil, let presented = presented(authorization: authorization, cookie: cookie),
            let (admission, assertion) = answers.extAuthzPass(asked, audience: origin, presented: presented, authorization: authorization, mode: mode, now: Date())
        else { return nil }
        let set = admission.person.flatMap { person in assertion.map { identityFields(person, assertion: $0) } } ?? admission.identityFields(assertion: assertion)
        return (admission, assertion, set, admission.removedNames(given: set, claimed: claimed))
    }

    /// Envoy's gRPC `Check` (`ExtAuthzController.grpc`) for a request memory lets pass, from a trusted proxy: the
    /// `CheckResponse` the handler would make (framed as the call's answer), read from the call's `body` (its framed `CheckRequest`); nil when the
    /// handler answers (a refusal, a sign-in, a session or assertion not in memory, a preflight, a token in the URL,
    /// two `Authorization` fields, a body that is not one plain message).
    func grpcCheckAnswer(_ body: ByteBuffer) -> ByteBuffer? {
        // The message's HTTP attributes read in one pass (`CheckRequestReader`); one it does not read as swift-protobuf
        // would is the handler's.
        guard peerTrusted, case .success(let bytes) = EnvoyCheckMessages.unframe(body), let http = CheckRequestReader.http(of: bytes)
        else { return nil }
        let target = http.path.isEmpty ? "/" : http.path
        let fields = EnvoyCheckMessages.fields(of: http)
        let cookies = fields[values: .cookie]
        let authorizations = fields[values: .authorization]
        guard authorizations.count <= 1, !RawHTTP.queryMayHoldToken(target),
            let (admission, assertion, set, remove) = envoyPass(
                method: http.method.isEmpty ? "GET" : http.method.uppercased(), target: target, host: http.host.isEmpty ? nil : http.host,
                scheme: http.scheme.isEmpty ? nil : http.scheme, authorization: authorizations.first,
                // `Cookie` fields read as one (RFC 9113 §8.2.3), as the handler reads them.
                cookie: cookies.count > 1 ? cookies.joined(separator: "; ") : cookies.first, claimed: fields.lazy.map(\.name.rawName), mode: "grpc"
            )
        else { return nil }
        // Envoy asks for the same person again and again on a connection: the answer's message is made once.
        if let last = lastGRPCCheck, last.person == admission.person, last.assertion == assertion, last.removed == remove { return last.answer }
        let frame = EnvoyCheckMessages.frame(EnvoyCheckMessages.allowed(set: set, remove: remove))
        lastGRPCCheck = EnvoyAnswerMemo(person: admission.person, assertion: assertion, removed: remove, answer: frame)
        return frame
    }

    /// The sign-in, session or an invitation's page when memory decides who asks (`SitePages`), as HTTP/1.1 bytes
    /// (`written`). `buffer` starts with `head`. HTTP/1.0 and two `Accept-Language` fields (which
    /// the handlers read joined) are the handlers'.
    func pageAnswer(_ head: RawHTTP.RequestHead, from buffer: ByteBuffer, closing: Bool, allocator: ByteBufferAllocator) -> ByteBuffer? {
        guard let pages = answers.pages, !head.isHTTP10, DoorRoutes.Page(target: head.target) != nil else { return nil }
        var language: String?
        for line in head.lines where line.name == "accept-language" {
            guard language == nil else { return nil }
            language = buffer.getString(at: buffer.readerIndex + line.value.lowerBound, length: line.value.count)
        }
        guard let page = pages.fromMemory(target: head.target, sessionHash: sessionHash(head.cookie), cookie: head.cookie, acceptLanguage: language, now: Date())
        else { return nil }
        answers.metrics.fastPages.increment()
        return written(page, closing: closing, allocator: allocator)
    }

    /// What a trusted proxy says of the request it checks (`ClientAddressResolver.checkedRequest`) and the origin it
    /// was made to (`forwardedOrigin`), read once per set of `X-Forwarded-*` and `X-Original-*` values on a connection.
    private func forwardedOrigin(_ head: RawHTTP.RequestHead) -> (AccessRequest, String?) {
        guard peerTrusted, !head.forwarded.isEmpty else { return (AccessRequest(host: nil, method: nil, path: nil), nil) }
        if let last = lastForwarded, last.fields == head.forwarded {
            return (last.request, last.origin)
        }
        let fields = forwardedFields(head)
        let origin = answers.resolver.forwardedOrigin(fields, fromTrusted: true)
        let request = answers.resolver.checkedRequest(fields, fromTrusted: true)
        lastForwarded = ForwardedMemo(fields: head.forwarded, request: request, origin: origin)
        return (request, origin)
    }

    /// Whether a trusted proxy's `X-Forwarded-Uri` or `X-Original-URI` has a query that may name `access_token`, which the
    /// handlers refuse (`ClientAddressResolver.checkedQuery`, `BearerCredential.read`).
    private func originalQueryMayHoldToken(_ head: RawHTTP.RequestHead) -> Bool {
        peerTrusted && head.forwarded.contains { ($0.name == "x-forwarded-uri" || $0.name == "x-original-uri") && RawHTTP.queryMayHoldToken($0.value) }
    }

    /// The `X-Forwarded-*` fields of `head` as the resolver reads them: none from a peer that is not a trusted proxy.
    private func forwardedFields(_ head: RawHTTP.RequestHead) -> HTTPFields {
        var fields = HTTPFields()
        guard peerTrusted else { return fields }
        for field in head.forwarded {
            if let name = HTTPField.Name(field.name) { fields.append(HTTPField(name: name, lenientValue: Array(field.value.utf8))) }
        }
        return fields
    }

    /// The request the upstream gets for `head` (at the front of `source`, with its body if it has one; its target
    /// read as `target`), when it passes from memory; nil when the handlers decide.
    func upstreamRequest(_ head: RawHTTP.RequestHead, target: RequestTarget, from source: ByteBuffer, allocator: ByteBufferAllocator) -> ByteBuffer? {
        guard let upstream = answers.upstream, !head.mayHoldToken, let method = HTTPRequest.Method(head.method) else { return nil }
        let now = Date()
        guard let presented = presented(head), let pass = answers.upstreamPass(
            method: method, host: head.host, target: target, authorization: head.authorization, presented: { presented }, now: now
        )
        else { return nil }
        let siwa: UpstreamForwarder.SiwaLines
        var dropsAuthorization = false
        if case .identified(let person, let assertion, let drops) = pass {
            siwa = siwaLines(head, identity: identity(person, assertion: assertion))
            dropsAuthorization = drops
        } else {
            siwa = siwaLines(head, identity: nil)
        }
        let requestTarget = upstream.rawPool.settings.requestTarget(target.forwarded)
        // Room for the request line, the client's lines, siwa's own (the assertion most of them) and the rest, made
        // once: the whole head is copied into it (`RawHeadSink`).
        let expected = head.length + requestTarget.utf8.count + 256 + (siwa.rendered?.count ?? 0)
        var out = allocator.buffer(capacity: expected + (head.contentLength ?? 0) + 64)
        source.withUnsafeReadableBytes { bytes in
            let fields = head.lines.lazy.filter { !dropsAuthorization || $0.name != "authorization" }.map { RawClientLine(line: $0, head: bytes) }
            ByteHead.fields(into: &out, expected: expected) { sink in
                sink.putRequestLine(method: head.method, target: requestTarget)
                // The rest of the head as the handlers' carriers write it: one writer (`UpstreamForwarder.writeHead`);
                // the bearer token that let the person in stays here unless the rule passes it (`UpstreamGate.passed`).
                upstream.forwarder.writeHead(to: &sink, clientFields: fields, connection: head.connection, siwa: siwa)
                // The body's length goes with the body (the client's `Content-Length` stays with siwa, as on the
                // handlers').
                if let length = head.contentLength { sink.add(name: "Content-Length", value: String(length)) }
                sink.putLineEnd()
            }
        }
        if let length = head.contentLength {
            guard let body = source.viewBytes(at: source.readerIndex + head.length, length: length) else { return nil }
            out.writeBytes(body)
        }
        return out
    }

    /// siwa's own lines to the upstream for `head` (where it came from, as the handlers' carriers say it: a trusted
    /// proxy's `X-Forwarded-*`, else the peer; then `identity`'s fields), rendered as bytes once per host, forwarded
    /// values and identity on a connection: a browser's requests on a connection all come from one host and person, and
    /// a proxy's come mostly in runs. The identity is the connection's one memo of it (`identity(_:assertion:)`),
    /// compared by reference: comparing the person here again, through an optional, copied it (each string of the user
    /// record retained) twice a request.
    private func siwaLines(_ head: RawHTTP.RequestHead, identity: IdentityMemo?) -> UpstreamForwarder.SiwaLines {
        let forwardedKey = peerTrusted ? head.forwarded : []
        if let last = lastSiwaLines, last.identity === identity, last.host == head.host, last.forwarded == forwardedKey {
            return last.lines
        }
        let forwarded = UpstreamForwarder.ForwardedFields(
            forwardedKey.isEmpty ? HTTPFields() : forwardedFields(head), authority: head.host, peer: peer, peerTrusted: peerTrusted, resolver: answers.resolver
        )
        let fields = identity?.fields ?? []
        let unrendered = UpstreamForwarder.SiwaLines(forwarded: forwarded, identity: fields)
        let lines = UpstreamForwarder.SiwaLines(forwarded: forwarded, identity: fields, rendered: ByteHead.rendered { unrendered.write(to: &$0) })
        lastSiwaLines = SiwaLinesMemo(host: head.host, forwarded: forwardedKey, identity: identity, lines: lines)
        return lines
    }

    /// The identity fields of `person` with `assertion`, made once per person and assertion on a connection.
    private func identityFields(_ person: Admission.Person, assertion: String) -> [HTTPField] {
        identity(person, assertion: assertion).fields
    }

    /// The connection's memo of `person`'s identity fields with `assertion`: the same object for as long as they are
    /// the last asked for.
    private func identity(_ person: Admission.Person, assertion: String) -> IdentityMemo {
        if let last = lastIdentity, last.assertion == assertion, last.person == person { return last }
        let memo = IdentityMemo(person: person, assertion: assertion, fields: IdentityHeaders.fields(for: person, assertion: assertion))
        lastIdentity = memo
        return memo
    }

    /// What `head` presents that the store could be asked about (`RawFrontPath.warm`): a bearer token, or a session
    /// cookie; nil for neither.
    func presentedToLookUp(_ head: RawHTTP.RequestHead) -> BytePathAnswers.Presented? {
        switch presented(head) {
        case .cookie(nil), nil: nil
        case let presented: presented
        }
    }

    /// What `head` presents: its bearer token (read once per `Authorization` value on a connection), else its
    /// session cookie; nil when the handlers read it (a malformed `Bearer` value).
    private func presented(_ head: RawHTTP.RequestHead) -> BytePathAnswers.Presented? {
        presented(authorization: head.authorization, cookie: head.cookie)
    }

    /// What a request with this `Authorization` and `Cookie` presents: a bearer token's hash, else the session
    /// cookie's; nil for a credential the handlers refuse.
    private func presented(authorization: String?, cookie: String?) -> BytePathAnswers.Presented? {
        guard let authorization else { return .cookie(sessionHash(cookie)) }
        if let last = lastAuthorization, last.header == authorization {
            return last.presented ?? .cookie(sessionHash(cookie))
        }
        let presented: BytePathAnswers.Presented?
        switch BearerCredential.read(authorization: [authorization], query: nil) {
        case .token(let token): presented = .bearer(SessionCookie.digest(token), access: token.hasPrefix(BearerCredential.accessTokenPrefix))
        case .none: presented = nil
        case .refused, .malformed: return nil
        }
        lastAuthorization = AuthorizationMemo(header: authorization, presented: presented)
        return presented ?? .cookie(sessionHash(cookie))
    }

    /// The SHA-256 of the session cookie in `cookie` (the `Cookie` header).
    func sessionHash(_ cookie: String?) -> String? {
        cookie.flatMap { read($0).sessionHash }
    }

    /// What the `Cookie` header says, read once per header on a connection.
    private func read(_ cookie: String) -> CookieMemo {
        if let last = lastCookie, last.header == cookie { return last }
        var fields = HTTPFields()
        fields.append(HTTPField(name: .cookie, lenientValue: Array(cookie.utf8)))
        let read = CookieMemo(header: cookie, sessionHash: fields.cookieValue(answers.sessionCookie).flatMap(SessionCookie.hash))
        lastCookie = read
        return read
    }

    /// The path of an origin-form target, as Hummingbird's `URI` reads it: up to the query.
    static func path(of target: String) -> String {
        guard let query = RawHTTP.queryMark(target) else { return target }
        return String(target[..<query])
    }
}

/// One of the client's header lines on the byte path, in the bytes of its head: the line is copied as it lies, and a
/// `String` made only of what the head writer reads as one (the cookie). A request's values are visible ASCII, SP and
/// HTAB (`RawHTTP.request` takes no other), so the bytes are those the `String`s would hold.
private struct RawClientLine: ClientField {
    let line: RawHTTP.Line
    let head: UnsafeRawBufferPointer

    var lowercased: String { line.name }
    var name: String { String(decoding: nameBytes, as: UTF8.self) }
    var value: String { String(decoding: valueBytes, as: UTF8.self) }

    private var nameBytes: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: head[line.line.lowerBound..<(line.line.lowerBound + line.name.utf8.count)])
    }
    private var valueBytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: head[line.value]) }

    func withLine<Result>(_ body: (_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) -> Result) -> Result {
        body(nameBytes, valueBytes)
    }
}

// What a connection remembers from one request to the next, each behind one reference with named fields: reading one
// costs a retain, where an optional tuple was copied and destroyed whole, each time a field was read, through the
// run time's generic tuple witnesses (callgrind: about 1,500 instructions of each check answered from memory).

/// A `Cookie` header and the SHA-256 of its session cookie.
private final class CookieMemo {
    let header: String
    let sessionHash: String?
    init(header: String, sessionHash: String?) {
        self.header = header
        self.sessionHash = sessionHash
    }
}

/// A person's identity fields with an assertion.
private final class IdentityMemo {
    let person: Admission.Person
    let assertion: String
    let fields: [HTTPField]
    init(person: Admission.Person, assertion: String, fields: [HTTPField]) {
        self.person = person
        self.assertion = assertion
        self.fields = fields
    }
}

/// A check's answer from memory: what it said, and its status line and header lines before `Date`.
private final class CheckMemo {
    let status: HTTPResponse.Status
    let person: Admission.Person
    let assertion: String?
    let authorization: String?
    let lines: ByteBuffer
    init(status: HTTPResponse.Status, person: Admission.Person, assertion: String?, authorization: String?, lines: ByteBuffer) {
        self.status = status
        self.person = person
        self.assertion = assertion
        self.authorization = authorization
        self.lines = lines
    }
}

/// An `Authorization` value and what it presents.
private final class AuthorizationMemo {
    let header: String
    let presented: BytePathAnswers.Presented?
    init(header: String, presented: BytePathAnswers.Presented?) {
        self.header = header
        self.presented = presented
    }
}

/// An Envoy check's answer from memory (HTTP or gRPC): whom it let in, with which assertion, the names it had Envoy
/// remove, and the answer's bytes (HTTP: its status line and fields before `Date`; gRPC: the framed `CheckResponse`).
private final class EnvoyAnswerMemo {
    let person: Admission.Person?
    let assertion: String?
    let removed: [String]
    let answer: ByteBuffer
    init(person: Admission.Person?, assertion: String?, removed: [String], answer: ByteBuffer) {
        self.person = person
        self.assertion = assertion
        self.removed = removed
        self.answer = answer
    }
}

/// siwa's own lines to the upstream (`UpstreamForwarder.SiwaLines`, rendered) and what they were made of: the request's
/// `Host`, a trusted proxy's `X-Forwarded-*` values (none from another peer), and the connection's identity memo (nil:
/// no one's identity goes on).
private final class SiwaLinesMemo {
    let host: String?
    let forwarded: [RawHTTP.Field]
    let identity: IdentityMemo?
    let lines: UpstreamForwarder.SiwaLines
    init(host: String?, forwarded: [RawHTTP.Field], identity: IdentityMemo?, lines: UpstreamForwarder.SiwaLines) {
        self.host = host
        self.forwarded = forwarded
        self.identity = identity
        self.lines = lines
    }
}

/// A trusted proxy's `X-Forwarded-*` values, the request they describe and the origin they name.
private final class ForwardedMemo {
    let fields: [RawHTTP.Field]
    let request: AccessRequest
    let origin: String?
    init(fields: [RawHTTP.Field], request: AccessRequest, origin: String?) {
        self.fields = fields
        self.request = request
        self.origin = origin
    }
}
