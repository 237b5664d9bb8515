import DoorHTTP
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import Prometheus
import NIOCore
import NIOHTTP1
import Synchronization

/// The front's hot paths (`RawFrontPath`), decided on the event loop without a task, a database or a signature: the
/// same answers as the handlers give (`ForwardAuthController.check`, `UpstreamGate`), from what this instance already holds in
/// memory, the session (`check_cache_seconds`) and a recently signed assertion. Whatever needs more, a session
/// not in memory, an assertion to sign, a body, a page, a refusal, goes to the handlers, which then fill those
/// caches for the next request.
final class BytePathAnswers: Sendable {
    let store: any UsersAndSessions
    let sessionCookie: String
    let front: FrontSettings
    let resolver: ClientAddressResolver
    let assertions: IdentityAssertions
    let security: SecurityHeadersMiddleware<ServerContext>
    let dates: HTTPDateCache
    let metrics: ServerMetrics
    /// With `--upstream`: the door to it.
    let upstream: Upstream?
    /// siwa's sign-in, session and invitation pages for a visitor memory decides (in front of an upstream, those below
    /// `/auth`).
    let pages: (any PagesFromMemory)?
    /// How a refusal memory decides is rendered: as the handlers render it.
    let policy: DoorPolicy
    let logger: Logger
    /// The `Server` header, as Hummingbird writes it on the handlers' answers.
    static let serverName = "siwa"
    /// What every answer of `/auth/check` and `/auth/forward` that passes carries before the identity, as
    /// `DoorPolicy.passed` makes it (made once).
    private let checkHead: HTTPFields

    init(
        store: any UsersAndSessions, sessionCookie: String, front: FrontSettings, resolver: ClientAddressResolver, assertions: IdentityAssertions,
        security: SecurityHeadersMiddleware<ServerContext>, dates: HTTPDateCache, metrics: ServerMetrics, upstream: Upstream?, pages: (any PagesFromMemory)? = nil,
        policy: DoorPolicy, logger: Logger
    ) {
        self.store = store
        self.sessionCookie = sessionCookie
        self.front = front
        self.resolver = resolver
        self.assertions = assertions
        self.security = security
        self.dates = dates
        self.metrics = metrics
        self.upstream = upstream
        self.pages = pages
        self.policy = policy
        self.logger = logger
        var fields = DoorPolicy.passed(.ok).headers
        security.secure(&fields)
        checkHead = fields
    }

    /// The built-in proxy's part: where the upstream is, which paths stay siwa's, and the gate that answers when the
    /// upstream does not.
    /// A class: the hot paths read it on every request, and a reference is cheaper to pass than its fields.
    final class Upstream: Sendable {
        let gate: UpstreamGate
        /// The gate's forwarder, read in place (`gate.forwarder` is a copy of the whole struct each time).
        let forwarder: UpstreamForwarder
        let owned: SiwaPaths
        /// The byte-level path's connections (`RawFrontPath`).
        let rawPool: UpstreamPool<ByteBuffer>

        init(gate: UpstreamGate, owned: SiwaPaths, rawPool: UpstreamPool<ByteBuffer>) {
            self.gate = gate
            forwarder = gate.forwarder
            self.owned = owned
            self.rawPool = rawPool
        }
    }

    /// As whom a request passes to the upstream.
    enum UpstreamPass {
        /// On a `public` rule: without identity headers.
        case anonymous
        /// A person let in, with their groups and the assertion addressed to the upstream; `client` holds the bearer
        /// token that let them in, and then `dropsAuthorization` unless the rule passes it (`UpstreamGate.passed`).
        case identified(Admission.Person, assertion: String, dropsAuthorization: Bool)
    }

    /// What a request presents, as the byte path read it: a session cookie's hash (nil for none), or a bearer
    /// token's, with whether it is an access token (`siwa_at_`) or a native app's session token.
    enum Presented {
        case cookie(String?)
        case bearer(String, access: Bool)
    }

    /// As whom a request of `method` for `target` (the upstream's, as `SiwaPaths.route` read it; no upgrade), sent
    /// to `host`, passes to the upstream, decided from memory by the rules the gate applies (`UpstreamGate.decision`):
    /// nil when the handlers decide (no session in memory, a person turned away, no recent assertion). The session
    /// is found by the SHA-256 of its cookie, `sessionHash` (only asked for when the rule needs a person).
    /// `authorization`: the request's one `Authorization` field (two are the handlers').
    func upstreamPass(method: HTTPRequest.Method, host: String, target: RequestTarget, authorization: String?, presented: () -> Presented, now: Date) -> UpstreamPass? {
        // A CORS preflight is judged by what only the handlers read (`Origin`, `Access-Control-Request-Method`):
        // memory decides no OPTIONS (found by `VerdictDifferentialTests`: a preflight with a session in memory was
        // let in as the person here, passed without one by a `cors_preflight` rule at the handlers).
        guard let upstream, method != .options else { return nil }
        let request = AccessRequest(host: host, method: method.rawValue, path: target.path)
        // The door's verdict (`DoorVerdicts`), with the session or token as memory holds it, looked up only when the
        // rule needs a person.
        guard let admission = DoorVerdicts.admissionFromMemory(request, authorization: authorization, front: front, visitor: { visitor(presented(), now: now) })
        else {
            // The handlers answer: a refusal is rendered and audited there, a session not in memory is looked up.
            return nil
        }
        guard let person = admission.person else { return .anonymous }
        let audience = upstream.rawPool.settings.origin
        guard let assertion = assertions.recentAssertion(for: person, audience: audience, now: now) else { return nil }
        return .identified(person, assertion: assertion, dropsAuthorization: admission.dropsAuthorization)
    }

    /// A check (`/auth/check`, `/auth/forward`) that memory lets pass: its status, the person and their groups, and
    /// the assertion addressed to the forwarded origin when a trusted proxy names one.
    struct CheckPass {
        let status: HTTPResponse.Status
        /// The person, their groups, who holds the bearer token that let them in, when they authenticated.
        let person: Admission.Person
        let assertion: String?
        /// The `Authorization` the upstream is to get, said back (`ForwardAuthController.upstreamAuthorization`).
        let authorization: String?
    }

    /// What memory decides of a check.
    enum CheckFromMemory {
        case pass(CheckPass)
        /// A person memory holds must sign in again (`max_auth_age`): the decision, rendered as the handlers render it.
        case stepUp(AccessDecision, DoorRoutes.Check)
    }

    /// `GET /auth/check` (202) and `GET /auth/forward` (200) of a person let in, decided from memory for `request`
    /// (what the proxy says of the original request), narrowed by the check's query (`narrowing`), for `audience`
    /// (the forwarded origin, nil when no trusted proxy names one) and counted; or a person memory holds whose sign-in
    /// is too old for the rule. Nil for any other path, or when the handlers answer (no session in memory, a person
    /// turned away, a public or deny rule, no recent assertion). The byte path's way in (`RawFrontPath`), which writes
    /// the answer's lines itself. `authorization`: the request's `Authorization` field, said back as the handlers say it.
    func checkPass(
        path: String, request: AccessRequest, narrowing: [AccessPolicy], audience: String?, presented: Presented, authorization: String?, now: Date
    ) -> CheckFromMemory? {
        // The original request may be a CORS preflight, which memory does not judge (as `upstreamPass`).
        guard let check = DoorRoutes.Check(path: path), request.method != "OPTIONS" else { return nil }
        let status = check.passStatus
        let counter = check == .check ? metrics.fastChecks : metrics.fastForwards
        // The door's verdict (`DoorVerdicts`); a check passes only a person (a public rule's check is the handlers').
        switch DoorVerdicts.fromMemory(request, narrowing: narrowing, authorization: authorization, front: front, visitor: { visitor(presented, now: now) }) {
        case .admit(let admission)?:
            guard let person = admission.person else { return nil }
            var assertion: String?
            if let audience {
                guard let recent = assertions.recentAssertion(for: person, audience: audience, now: now) else { return nil }
                assertion = recent
            }
            counter.increment()
            return .pass(CheckPass(status: status, person: person, assertion: assertion, authorization: admission.authorization))
        case .stepUp(let decision)?:
            counter.increment()
            return .stepUp(decision, check)
        case nil:
            return nil
        }
    }

    /// A refusal memory decided (`DoorVerdicts.FromMemory.stepUp`) at `door`, for `request` (as every door describes
    /// it), rendered as the handlers render it (`DoorPolicy.refusal`).
    func refusal(_ decision: AccessDecision, for request: DoorRequest, at door: DoorPolicy.Door) -> RenderedPage {
        policy.refusal(policy.verdicts.verdict(decision, for: request), at: door, fields: request.fields, original: request.original)
    }

    /// Envoy's `ext_authz` check (`ExtAuthzController.http`, `.grpc`; `mode` `http` or `grpc`, for the metrics) that memory lets pass: the admission and the
    /// assertion addressed to `audience` (the original origin); nil when the handlers answer (a refusal, a sign-in, a
    /// session not in memory, no recent assertion). `asked` is what a trusted Envoy says (`EnvoyOriginal.asked`).
    func extAuthzPass(_ asked: AccessRequest, audience: String, presented: Presented, authorization: String?, mode: String, now: Date) -> (Admission, assertion: String?)? {
        guard let admission = DoorVerdicts.admissionFromMemory(asked, authorization: authorization, front: front, visitor: { visitor(presented, now: now) })
        else { return nil }
        var assertion: String?
        if let person = admission.person {
            guard let recent = assertions.recentAssertion(for: person, audience: audience, now: now) else { return nil }
            assertion = recent
        }
        metrics.fastExtAuthz.increment()
        metrics.extAuthz(DoorVerdict.allow(admission).kind, mode: mode)
        return (admission, assertion)
    }

    /// The header fields of a check's answer that passes, as `ForwardAuthController` answers it, less `Date` and
    /// `Server` (`stamp`): the identity, the assertion, and the empty body's length.
    func checkFields(_ pass: CheckPass) -> HTTPFields {
        var fields = checkHead
        fields.append(contentsOf: IdentityHeaders.fields(for: pass.person, assertion: pass.assertion))
        if let authorization = pass.authorization {
            fields[.authorization] = authorization
            if let name = IdentityHeaders.authorization { fields[name] = authorization }
        }
        fields[.contentLength] = "0"
        return fields
    }

    /// What the handlers would do first for a request the fast path could not decide from memory: the session (a
    /// session cookie's, or the record of a bearer token: a native app's session, an access token) looked up in the
    /// store and, for a person let in, the assertion for the upstream signed, so that the caches `upstreamPass` reads
    /// hold both when it asks again. Whatever the outcome, `upstreamPass` then decides. Without it for a bearer token, an
    /// app's request went to the handlers whenever its assertion was over 20 s old (`IdentityAssertions.reuse`), as a
    /// browser's no longer did.
    func warmUpstream(_ presented: Presented, request: AccessRequest, authorization: String?, client: String) async {
        guard let upstream else { return }
        let visitor: Visitor
        switch presented {
        case .cookie(nil): return
        case .cookie(let idHash?):
            guard let (session, user) = try? await store.session(idHash: idHash, now: Date(), askedBy: client), !session.isAccessToken else { return }
            visitor = .signedIn(session, user)
        case .bearer(let hash, let access):
            guard let (session, user, holder) = try? await store.bearerRecord(hash: hash, access: access, now: Date(), askedBy: client),
                session.isAccessToken == access
            else { return }
            visitor = .bearer(session, user, client: holder)
        }
        guard let person = DoorVerdicts.admissionFromMemory(request, authorization: authorization, front: front, visitor: { visitor })?.person else { return }
        _ = await upstream.gate.identity(of: person)
    }

    /// Who the session whose cookie value hashes to `idHash` is, as far as this instance's memory knows: signed in,
    /// or not known here (`.notLooked`: the handlers look it up).
    /// Who presents `presented`, as far as this instance's memory knows (`.notLooked`: the handlers look it up). A
    /// token's record must be of the kind its form says: an access token's for `siwa_at_`, a native app's session
    /// for any other (a browser's session id is no bearer token).
    func visitor(_ presented: Presented, now: Date) -> Visitor {
        switch presented {
        case .cookie(let idHash?): return visitor(idHash: idHash, now: now)
        case .cookie(nil): return .notLooked
        case .bearer(let hash, let access):
            guard let (session, user) = store.cachedSession(idHash: hash, now: now), session.isAccessToken == access, let client = session.bearerClient
            else { return .notLooked }
            return .bearer(session, user, client: client)
        }
    }

    func visitor(idHash: String, now: Date) -> Visitor {
        // An access token is no cookie (both share the cache): its record opens nothing sent as one.
        guard let (session, user) = store.cachedSession(idHash: idHash, now: now), !session.isAccessToken else { return .notLooked }
        return .signedIn(session, user)
    }

    /// siwa's 502 or 504 page for a `GET` the upstream did not answer, rendered by the gate as the handlers render it
    /// (with `Content-Length`, `Date` and `Server`), handed to `answer` on `loop`.
    func failurePage(
        _ failure: UpstreamForwarder.Failure, for request: HTTPRequest, on loop: any EventLoop,
        answer: @escaping @Sendable (HTTPResponse, ByteBuffer) -> Void
    ) {
        guard let gate = upstream?.gate else { return }
        let page = gate.failed(failure, fields: request.headerFields, retryURL: request.path ?? "/", logger: logger)
        var head = HTTPResponse(status: page.status, headerFields: page.headers)
        head.headerFields[.contentLength] = String(page.body.readableBytes)
        head.headerFields[.date] = dates.now
        head.headerFields[.server] = Self.serverName
        let (stamped, body) = (head, page.body)
        // Answered after the caller's own work on the loop, as before (the page was made in a task).
        loop.execute { answer(stamped, body) }
    }
}

/// The `Date` header's value (RFC 9110 IMF-fixdate), made at most once a second, and the byte path's `Date` and
/// `Server` lines with it.
final class HTTPDateCache: Sendable {
    private let cached = Mutex<Stamp>(Stamp(second: -1, text: "", lines: []))

    private struct Stamp {
        let second: Int
        let text: String
        /// `Date: <text>` and `Server: siwa`, each with its CRLF, as HTTP/1.1 bytes.
        let lines: [UInt8]
    }

    var now: String { current.text }

    /// `Date` and `Server` as the byte path writes them after an answer's fields (`ByteHead.writeStamp`), made with
    /// `now`: two lines copied at once, where writing them from their `String`s cost 900 instructions an answer.
    var stampLines: [UInt8] { current.lines }

    private var current: Stamp {
        let second = Int(time(nil))
        if let stamp = cached.withLock({ $0.second == second ? $0 : nil }) { return stamp }
        let text = Self.format(second)
        let stamp = Stamp(second: second, text: text, lines: Array("Date: \(text)\r\nServer: \(BytePathAnswers.serverName)\r\n".utf8))
        cached.withLock { $0 = stamp }
        return stamp
    }

    static func format(_ second: Int) -> String {
        var seconds = time_t(second)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }
}
