import Foundation
import Hummingbird

/// Health, readiness and metrics for operators and load balancers.
struct OperationsController: Sendable {
    let components: ServerComponents

    func addRoutes(to router: Router<ServerContext>) {
        router.get("/healthz") { _, _ in Response.plain(.ok, "ok") }
        router.get("/readyz", use: ready)
        router.get("/metrics", use: metrics)
    }

    /// Ready when the store answers and Apple's key set is loaded (loading it now if needed).
    @Sendable func ready(_ request: Request, context: ServerContext) async throws -> Response {
        var problems: [String] = []
        do {
            try await components.store.ping()
        } catch {
            problems.append("store unreachable")
        }
        await components.keySet.warmUp()
        if !components.keySet.isLoaded { problems.append("Apple key set not loaded") }
        guard problems.isEmpty else {
            context.logger.warning("not ready", metadata: ["problems": "\(problems.joined(separator: "; "))"])
            return Response.plain(.serviceUnavailable, "not ready: " + problems.joined(separator: "; "))
        }
        return Response.plain(.ok, "ready")
    }

    @Sendable func metrics(_ request: Request, context: ServerContext) async throws -> Response {
        let active = try? await components.store.countActiveSessions(now: Date())
        let text = components.metrics.render(keySet: components.keySet, secrets: components.secrets, activeSessions: active)
        return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: text)))
    }
}
