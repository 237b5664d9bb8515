import Foundation
import Hummingbird

/// Where a request goes when siwa fronts an upstream: siwa's own paths to siwa's router, every other path through
/// the `UpstreamGate`. Without an upstream, everything goes to the router.
struct FrontDoor: HTTPResponderBuilder {
    let router: Router<ServerContext>
    let gate: UpstreamGate?
    /// Where siwa's static files are (they stay siwa's).
    let publicDirectory: String

    func buildResponder() -> Responder {
        Responder(siwa: router.buildResponder(), gate: gate, owned: SiwaPaths(routes: router.routes.map(\.path), publicDirectory: publicDirectory))
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

/// The paths siwa keeps for itself in front of an upstream: its routes (all but `/`, which is the upstream's home
/// page), everything under `/auth/` and `/.well-known/siwa/`, and its static files.
struct SiwaPaths: Sendable {
    private var exact: Set<String> = []
    private var prefixes = ["/auth/", "/.well-known/siwa/"]

    init(routes: [RouterPath], publicDirectory: String) {
        for route in routes {
            // A route with a parameter or a wildcard owns everything under its literal start.
            let literal = route.components.prefix { !$0.description.contains(":") && !$0.description.contains("*") }
            let path = "/" + literal.map(\.description).joined(separator: "/")
            if literal.count == route.components.count {
                if path != "/" { exact.insert(path) }
            } else {
                prefixes.append(path == "/" ? "/" : path + "/")
            }
        }
        for prefix in prefixes { exact.insert(String(prefix.dropLast())) }
        if let files = FileManager.default.enumerator(atPath: publicDirectory) {
            while let file = files.nextObject() as? String { exact.insert("/" + file) }
        }
    }

    /// Whether siwa answers `path` itself. Empty segments count as the router counts them (`//session/` is
    /// `/session`).
    func contains(_ path: String) -> Bool {
        let bytes = path.utf8
        let doubleSlash = zip(bytes, bytes.dropFirst()).contains { $0 == UInt8(ascii: "/") && $1 == UInt8(ascii: "/") }
        let normalized = doubleSlash || (bytes.count > 1 && bytes.last == UInt8(ascii: "/"))
            ? "/" + path.split(separator: "/").joined(separator: "/") : path
        return exact.contains(normalized) || prefixes.contains { normalized.hasPrefix($0) }
    }
}
