import DoorHTTP
import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// Envoy's external authorization (`ext_authz`), the door of Envoy Gateway, Istio, Contour and any Envoy: Envoy asks
/// siwa about each request before its upstream sees it, and renders siwa's answer.
///
/// - Over HTTP (`http_service` with `path_prefix: /auth/ext-authz`): Envoy sends the original method, the original
///   target below the prefix, the original `Host` and the fields its `allowed_headers` names. Allowed: 200 with the
///   identity headers (Envoy sets them on the upstream's request, `allowed_upstream_headers`) and
///   `x-envoy-auth-headers-to-remove` naming every identity field siwa does not set (a client's own
///   `X-Auth-Request-Groups` never reaches the app). Refused: the answer `/auth/forward` gives, which Envoy passes
///   to the client (302 to sign in, 401 with `WWW-Authenticate`, 403).
/// - Over gRPC (`envoy.service.auth.v3.Authorization/Check`, `ExtAuthzController+GRPC.swift`): the same verdict in a
///   `CheckResponse`.
///
/// What Envoy says of the original request (host, path, method, the client's address) is believed from a trusted
/// proxy only (`trusted_proxies`), as `/auth/check` believes nginx; from anyone else the rules see no host and no
/// path, and no assertion is signed. The decision is the door's one verdict (`DoorVerdicts`); nothing is decided here.
struct ExtAuthzController: Sendable {
    let policy: DoorPolicy
    let proxy: ClientAddressResolver
    let assertions: IdentityAssertions
    let sessions: SessionMiddleware
    let metrics: ServerMetrics

    /// The prefix Envoy's `http_service.path_prefix` names.
    static let prefix = EnvoyOriginal.prefix

    /// The methods a request Envoy asks about may have (the router registers a route per method).
    static let methods: [HTTPRequest.Method] = [.get, .head, .post, .put, .patch, .delete, .options, .trace]
        + ["PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "REPORT", "SEARCH", "PURGE"].compactMap { HTTPRequest.Method($0) }

    func addRoutes(to router: Router<ServerContext>) {
        for method in Self.methods {
            router.on(RouterPath(Self.prefix), method: method, use: http)
            router.on(RouterPath(Self.prefix + "/**"), method: method, use: http)
        }
    }

    /// The original request as Envoy describes it, in either mode.
    struct Original: Sendable {
        /// As the client sent it.
        var method: String
        /// Path and query, as Envoy got them.
        var target: String
        /// The original `Host` (`:authority`).
        var host: String?
        /// `http` or `https`, as Envoy says (`x-forwarded-proto`, or gRPC's `scheme`).
        var scheme: String?
        /// The fields Envoy passes on.
        var fields: HTTPFields
        /// Whether the peer that asks (Envoy) is a trusted proxy.
        var fromTrusted: Bool
        /// The client's address (`x-forwarded-for` or gRPC's `source.address`, from a trusted proxy), else the peer's.
        var clientAddress: String
    }

    /// What Envoy is to do.
    enum Answer {
        /// Let through: `set` on the upstream's request (overwriting), `remove` from it.
        case allowed(set: [HTTPField], remove: [String])
        /// Answer the client with this (rendered as `/auth/forward`'s refusal).
        case denied(RenderedPage)
    }

    /// The verdict on `original`, rendered for Envoy (`mode`: `http` or `grpc`, for the metrics).
    func check(_ original: Original, mode: String, logger: Logger) async -> Answer {
        let request = doorRequest(original)
        let verdict = await policy.decide(request, logger: logger) {
            await sessions.doorVisitor(
                fields: original.fields, credential: request.credential, clientAddress: original.clientAddress,
                retryURL: request.original ?? "/", logger: logger
            )
        }
        metrics.extAuthz(verdict.kind, mode: mode)
        guard case .allow(let admission) = verdict else {
            return .denied(policy.refusal(verdict, at: .forward, fields: original.fields, original: request.original))
        }
        var assertion: String?
        // Signed only for a request whose URL the door knows (a trusted proxy's, its target read).
        if let person = admission.person, request.original != nil, let audience = origin(of: original) {
            assertion = await assertions.assertion(for: person, audience: audience)
        }
        let set = admission.identityFields(assertion: assertion)
        return .allowed(set: set, remove: admission.removedNames(given: set, from: original.fields))
    }

    /// `original` as every door describes it. From a peer that is not a trusted proxy the rules see no host, method
    /// or path (as `/auth/check` sees an untrusted asker), so no rule that names them applies, and there is no URL to
    /// come back to.
    func doorRequest(_ original: Original) -> DoorRequest {
        let method = original.method.uppercased()
        let (asked, url) = EnvoyOriginal.asked(
            method: method, target: original.target, host: original.host, origin: origin(of: original),
            isPreflight: original.fields.isCORSPreflight(method: method)
        )
        let query = original.target.firstIndex(of: "?").map { original.target[original.target.index(after: $0)...] }
        return DoorRequest(
            asked: asked, method: method, fields: original.fields,
            credential: BearerCredential.read(authorization: original.fields[values: .authorization], query: query),
            clientAddress: original.clientAddress, original: url
        )
    }

    /// The origin (`scheme://host`) Envoy says the request was made to, believed from a trusted proxy only: the
    /// assertion's audience, and the start of the URL to come back to.
    func origin(of original: Original) -> String? {
        EnvoyOriginal.origin(host: original.host, scheme: original.scheme, fromTrusted: original.fromTrusted)
    }

    /// The HTTP mode: the original request is this one, its target below `prefix`.
    @Sendable func http(_ request: Request, context: ServerContext) async throws -> Response {
        let peer = context.remoteAddress?.ipAddress
        let fromTrusted = proxy.trusted(peer)
        let target = EnvoyOriginal.target(checkTarget: request.head.path ?? "/") ?? "/"
        let original = Original(
            method: request.method.rawValue, target: target, host: request.head.authority,
            scheme: proxy.forwarded(.xForwardedProto, request.headers, fromTrusted: fromTrusted), fields: request.headers, fromTrusted: fromTrusted,
            clientAddress: proxy.clientAddress(request.headers, peer: peer)
        )
        switch await check(original, mode: "http", logger: context.logger) {
        case .allowed(let set, let remove):
            var response = DoorPolicy.passed(.ok).response
            response.headers.append(contentsOf: set)
            if !remove.isEmpty, let name = HTTPField.Name.envoyAuthHeadersToRemove { response.headers[name] = remove.joined(separator: ",") }
            return response
        case .denied(let refusal):
            return refusal.response
        }
    }
}
