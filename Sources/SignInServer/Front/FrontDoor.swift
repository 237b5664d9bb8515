import DoorHTTP
import Foundation
import HTTPTypes
import Hummingbird

/// Where a request goes when siwa fronts an upstream: siwa's own paths to siwa's router, every other path through
/// the `UpstreamGate`. Without an upstream, everything goes to the router.
struct FrontDoor: HTTPResponderBuilder {
    let router: Router<ServerContext>
    let gate: UpstreamGate?
    /// The paths that stay siwa's.
    let owned: SiwaPaths

    func buildResponder() -> Responder {
        Responder(siwa: router.buildResponder(), gate: gate, owned: owned)
    }

    struct Responder: HTTPResponder {
        let siwa: RouterResponder<ServerContext>
        let gate: UpstreamGate?
        let owned: SiwaPaths

        func respond(to request: Request, context: ServerContext) async throws -> Response {
            guard let gate else { return try await siwa.respond(to: request, context: context) }
            switch owned.route(request.head.path ?? "", host: request.head.authority) {
            case .siwa:
                return try await siwa.respond(to: request, context: context)
            case .refused(let refusal):
                return gate.refuse(request, because: refusal.description, logger: context.logger)
            case .upstream(let target):
                // NIO's conversion takes the first `Host` as the authority and leaves a second among the fields.
                guard !request.headers.carriesHost else {
                    return gate.refuse(request, because: "two Host fields", logger: context.logger)
                }
                return try await gate.respond(to: request, target: target, context: context)
            }
        }
    }
}

/// The paths siwa keeps for itself in front of an upstream: everything under `/auth/` (its sign-in, sign-out,
/// forward-auth, session page, account deletion and APIs), `/.well-known/siwa/`, its OpenID Provider (`/oauth2/`,
/// `/.well-known/openid-configuration`), `/healthz`, `/readyz`, `/metrics` and its static files. Every other path,
/// `/` and siwa's older unprefixed page paths (`/session`, `/account/delete`, `/api/…`) included, is the site's.
struct SiwaPaths: Sendable {
    /// Envoy's gRPC `ext_authz` call is siwa's too, so that one siwa can be Envoy's authorization service and the
    /// proxy of an app at once.
    private var exact: Set<String> = ["/healthz", "/readyz", "/metrics", "/button.css", "/.well-known/openid-configuration", "/envoy.service.auth.v3.Authorization/Check"]
    private let prefixes = ["/auth/", "/.well-known/siwa/", "/oauth2/"]

    /// The first segment of every path above (`auth`, `healthz`, …): a path whose first segment is none of them is
    /// not siwa's, which is told without making a string (the front asks for every request it passes).
    private var firstSegments: [[UInt8]] = []

    init(publicDirectory: String) {
        for prefix in prefixes { exact.insert(String(prefix.dropLast())) }
        if let files = FileManager.default.enumerator(atPath: publicDirectory) {
            while let file = files.nextObject() as? String { exact.insert("/" + file) }
        }
        for path in exact.union(prefixes) {
            let first = Array(Self.firstSegment(path.utf8))
            if !firstSegments.contains(first) { firstSegments.append(first) }
        }
    }

    /// Where a request for `target` (as the request line carried it; `host`, its `Host`) goes in front of an
    /// upstream: to siwa when the path as sent, or as normalized, is siwa's (so nothing for one of siwa's paths ever
    /// reaches the upstream); otherwise the target is read as `RequestTarget` reads it, for the upstream, or refused.
    /// Every way to the upstream asks this, and decides and forwards the target it returns.
    func route(_ target: String, host: String?) -> FrontRoute {
        let query = RawHTTP.queryMark(target) ?? target.endIndex
        if target.utf8.first == UInt8(ascii: "/"), mayHold(target[..<query]), containsAfterNormalizing(String(target[..<query])) { return .siwa }
        do {
            let normalized = try RequestTarget(target, host: host)
            return contains(normalized.path) ? .siwa : .upstream(normalized)
        } catch {
            return .refused(error)
        }
    }

    /// Whether siwa answers `path` itself. Empty segments count as the router counts them (`//auth/check/` is
    /// `/auth/check`).
    func contains(_ path: String) -> Bool {
        mayHold(path[...]) && containsAfterNormalizing(path)
    }

    /// Whether `path` may be one of siwa's: its first segment (after any empty ones) is the first of one of siwa's
    /// paths. A path of siwa's always passes (`RequestTargetTests.ownedFilterAgrees`), since normalizing keeps the first
    /// segment.
    func mayHold(_ path: Substring) -> Bool {
        // Over the path's bytes in place (`elementsEqual` over the view walked it byte by byte through its indices; the
        // view's `withContiguousStorageIfAvailable` went through the standard library's generic code, 320
        // instructions a call, twice a proxied request).
        var path = path
        return path.withUTF8 { bytes in
            let first = Self.firstSegment(bytes)
            return firstSegments.contains { $0.count == first.count && $0.withUnsafeBufferPointer { $0.elementsEqual(first) } }
        }
    }

    /// The bytes of the first non-empty segment of `path`; none for `/`, `//` or an empty path.
    private static func firstSegment<Bytes: Collection<UInt8>>(_ path: Bytes) -> Bytes.SubSequence {
        let slash = UInt8(ascii: "/")
        let start = path.firstIndex { $0 != slash } ?? path.endIndex
        let end = path[start...].firstIndex(of: slash) ?? path.endIndex
        return path[start..<end]
    }

    /// The full reading of `contains`, after `mayHold` let the path by.
    func containsAfterNormalizing(_ path: String) -> Bool {
        let bytes = path.utf8
        let doubleSlash = zip(bytes, bytes.dropFirst()).contains { $0 == UInt8(ascii: "/") && $1 == UInt8(ascii: "/") }
        let normalized = doubleSlash || (bytes.count > 1 && bytes.last == UInt8(ascii: "/"))
            ? "/" + path.split(separator: "/").joined(separator: "/") : path
        // By byte: a prefix of siwa's ends in `/`, so a byte match is a path match, and `hasPrefix` compares characters.
        return exact.contains(normalized) || prefixes.contains { normalized.utf8.starts(with: $0.utf8) }
    }
}

/// Where the front sends one request (`SiwaPaths.route`).
enum FrontRoute: Sendable, Equatable {
    /// One of siwa's own paths: its router answers.
    case siwa
    /// A target the front does not pass on: siwa's 400 page, nothing forwarded.
    case refused(RequestTarget.Refusal)
    /// The upstream's: decided, and forwarded, with this target.
    case upstream(RequestTarget)
}

extension HTTPFields {
    /// Whether a `Host` is among the fields: a second one, since NIO's conversion made the first the authority.
    var carriesHost: Bool {
        contains { $0.name.canonicalName == "host" }
    }
}
