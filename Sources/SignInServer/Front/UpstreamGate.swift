import DoorHTTP
import HTTPTypes
import Hummingbird
import Logging

/// The built-in proxy's door (`--upstream`): a request for a path siwa does not own passes to the upstream when
/// its session's person is let in by the rules (with siwa's identity headers and `X-Siwa-Assertion` addressed to
/// the upstream's origin), or when a `public` rule (`skip_auth_routes` among them) matches (with none); otherwise
/// siwa answers: a browser is sent to the sign-in and comes back to the same URL, anything else gets 401; a person
/// the rules turn away, and anyone on a `deny` rule, gets 403. The upstream's answers pass as
/// they are; siwa's own carry its security headers.
struct UpstreamGate: Sendable {
    let forwarder: UpstreamForwarder
    let sessions: SessionMiddleware
    let policy: DoorPolicy
    let assertions: IdentityAssertions
    let resolver: ClientAddressResolver
    var front: FrontSettings { policy.front }
    /// What a failure becomes: page, log line and count (`DoorFailures`), for every carrier.
    var failures: DoorFailures { forwarder.failures }

    /// Why the upstream did not switch protocols for the WebSocket handshake being answered (set by the WebSocket
    /// carrier around the responder's answer to it).
    @TaskLocal static var switchFailure: UpstreamForwarder.Failure?

    /// The answer to `request`, whose target the front read as `target` (`SiwaPaths.route`): decided on it by the
    /// door's verdict, and forwarded with it, or answered as the verdict says.
    func respond(to request: Request, target: RequestTarget, context: ServerContext) async throws -> Response {
        let asked = doorRequest(request, target: target, context: context)
        let verdict = await decide(asked, request, context: context)
        guard case .allow(let admission) = verdict else {
            return policy.refusal(verdict, at: .upstream, fields: request.headers, original: asked.original).response
        }
        return await forward(passed(request, admission), target: target, context: context, identity: await identity(of: admission))
    }

    /// `request` as every door describes it (`DoorRequest`), for `target`, the host it was sent to and its method.
    func doorRequest(_ request: Request, target: RequestTarget, context: ServerContext) -> DoorRequest {
        let method = request.method.rawValue
        return DoorRequest(
            asked: AccessRequest(host: request.head.authority, method: method, path: target.path, isPreflight: request.headers.isCORSPreflight(method: method)),
            method: method, fields: request.headers,
            credential: BearerCredential.read(authorization: request.headers[values: .authorization], query: request.uri.query.map { Substring($0) }),
            clientAddress: resolver.clientAddress(request, context: context), original: front.publicOrigin + target.forwarded
        )
    }

    /// The verdict on `asked`: the bearer token or the session is looked up only when the rule that applies needs
    /// a person.
    func decide(_ asked: DoorRequest, _ request: Request, context: ServerContext) async -> DoorVerdict {
        await policy.decide(asked, logger: context.logger) {
            await sessions.doorVisitor(request, credential: asked.credential, context: context)
        }
    }

    /// `request` as it goes to the upstream: without its `Authorization` field when the verdict does not pass it on
    /// (a bearer token let the person in, for which the identity headers and the assertion stand).
    func passed(_ request: Request, _ admission: Admission) -> Request {
        guard admission.dropsAuthorization else { return request }
        var head = request.head
        head.headerFields[.authorization] = nil
        return Request(head: head, body: request.body)
    }

    /// The identity headers of an admission, with the assertion addressed to the upstream's origin when a key can sign.
    func identity(of admission: Admission) async -> [HTTPField] {
        guard let person = admission.person else { return [] }
        return await identity(of: person)
    }

    /// The identity headers of `person` and, when a key can sign, the assertion addressed to the upstream's origin.
    func identity(of person: Admission.Person) async -> [HTTPField] {
        IdentityHeaders.fields(for: person, assertion: await assertions.assertion(for: person, audience: forwarder.settings.origin))
    }

    /// The upstream's side of the WebSocket `request` asks for, opened with the same identity as a plain request
    /// would carry: nil (nothing sent to the upstream) when the request would not be forwarded (`respond` then
    /// answers the same request: 401 or 403), the failure when the upstream did not switch protocols (answered by
    /// `failed`, as any carrier's).
    func openWebSocket(_ request: Request, target: RequestTarget, context: ServerContext) async -> Result<UpstreamWebSocket, UpstreamForwarder.Failure>? {
        guard case .allow(let admission) = await decide(doorRequest(request, target: target, context: context), request, context: context) else { return nil }
        let identity = await self.identity(of: admission)
        let request = passed(request, admission)
        do {
            return .success(try await forwarder.openWebSocket(request, target: target, context: context, identity: identity))
        } catch {
            return .failure(error)
        }
    }

    /// The upstream's answer, or siwa's 502 or 504 page when none came.
    private func forward(_ request: Request, target: RequestTarget, context: ServerContext, identity: [HTTPField]) async -> Response {
        // A WebSocket upgrade that may pass reaches here only when the upstream did not switch protocols for it
        // (`openWebSocket`): passed on as a plain request it would lose its Upgrade header and mean something else.
        if request.isWebSocketUpgrade {
            // The upstream answered without switching (a 401, a 429): that answer, as any answer of the upstream's.
            if case .declined(let answer) = Self.switchFailure { return answer.response }
            return failed(Self.switchFailure ?? .broken("the upstream did not switch protocols for a WebSocket"), request, logger: context.logger)
        }
        do {
            return try await forwarder.forward(request, target: target, context: context, identity: identity)
        } catch {
            return failed(error, request, logger: context.logger)
        }
    }

    /// siwa's 400 page for a request the front does not pass on (`reason`, logged): nothing reaches the upstream.
    func refuse(_ request: Request, because reason: String, logger: Logger) -> Response {
        logger.notice("request refused at the door", metadata: ["reason": "\(reason)", "method": "\(request.method)"])
        return policy.page(.badTarget, request.headers).response
    }

    /// siwa's page when the upstream gave no answer to `request` (`DoorFailures`: logged and counted).
    func failed(_ failure: UpstreamForwarder.Failure, _ request: Request, logger: Logger) -> Response {
        failed(failure, fields: request.headers, retryURL: request.head.path ?? "/", logger: logger).response
    }

    /// The same, for a request known by its fields and target (the byte path's, which has no `Request`).
    func failed(_ failure: UpstreamForwarder.Failure, fields: HTTPFields, retryURL: String, logger: Logger) -> RenderedPage {
        policy.page(failures.page(for: failure, retryURL: retryURL, logger: logger), fields)
    }
}
