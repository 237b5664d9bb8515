import Foundation
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
            guard let gate, !owned.contains(request.uri.path) else { return try await siwa.respond(to: request, context: context) }
            return try await gate.respond(to: request, context: context)
        }
    }
}

/// The paths siwa keeps for itself in front of an upstream: everything under `/auth/` (its sign-in, sign-out,
/// forward-auth, session page, account deletion and APIs), `/.well-known/siwa/`, its OpenID Provider (`/oauth2/`,
/// `/.well-known/openid-configuration`), `/healthz`, `/readyz`, `/metrics` and its static files. Every other path,
/// `/` and siwa's older unprefixed page paths (`/session`, `/account/delete`, `/api/…`) included, is the site's.
struct SiwaPaths: Sendable {
    private var exact: Set<String> = ["/healthz", "/readyz", "/metrics", "/button.css", "/.well-known/openid-configuration"]
    private let prefixes = ["/auth/", "/.well-known/siwa/", "/oauth2/"]

    init(publicDirectory: String) {
        for prefix in prefixes { exact.insert(String(prefix.dropLast())) }
        if let files = FileManager.default.enumerator(atPath: publicDirectory) {
            while let file = files.nextObject() as? String { exact.insert("/" + file) }
        }
    }

    /// Whether siwa answers `path` itself. Empty segments count as the router counts them (`//auth/check/` is
    /// `/auth/check`).
    func contains(_ path: String) -> Bool {
        let bytes = path.utf8
        let doubleSlash = zip(bytes, bytes.dropFirst()).contains { $0 == UInt8(ascii: "/") && $1 == UInt8(ascii: "/") }
        let normalized = doubleSlash || (bytes.count > 1 && bytes.last == UInt8(ascii: "/"))
            ? "/" + path.split(separator: "/").joined(separator: "/") : path
        return exact.contains(normalized) || prefixes.contains { normalized.hasPrefix($0) }
    }
}
