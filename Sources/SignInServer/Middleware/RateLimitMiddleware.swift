import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import Synchronization

/// Limits sign-in starts and callbacks per client (a token bucket per address), answering a 429 page.
/// The buckets live in this instance's memory: behind a load balancer each instance limits on its own.
struct RateLimitMiddleware: RouterMiddleware {
    typealias Context = ServerContext

    private final class Buckets: Sendable {
        struct Bucket {
            var tokens: Double
            var updated: ContinuousClock.Instant
        }
        let state = Mutex<[String: Bucket]>([:])
    }

    private let buckets = Buckets()
    let perMinute: Double
    let burst: Double
    let paths: [String]
    let resolver: ClientAddressResolver
    let renderer: PageRenderer

    init(perMinute: Int, paths: [String], resolver: ClientAddressResolver, renderer: PageRenderer) {
        self.perMinute = Double(max(1, perMinute))
        burst = Double(max(1, perMinute))
        self.paths = paths
        self.resolver = resolver
        self.renderer = renderer
    }

    func handle(_ request: Request, context: ServerContext, next: (Request, ServerContext) async throws -> Response) async throws -> Response {
        guard perMinute > 0, paths.contains(request.uri.path) else { return try await next(request, context) }
        let client = resolver.clientAddress(request, context: context)
        let now = ContinuousClock.now
        let allowed = buckets.state.withLock { buckets -> Bool in
            if buckets.count > 100_000 { buckets.removeAll(keepingCapacity: true) }
            var bucket = buckets[client] ?? Buckets.Bucket(tokens: burst, updated: now)
            let elapsed = (now - bucket.updated).timeInterval
            bucket.tokens = min(burst, bucket.tokens + elapsed * perMinute / 60)
            bucket.updated = now
            let ok = bucket.tokens >= 1
            if ok { bucket.tokens -= 1 }
            buckets[client] = bucket
            return ok
        }
        guard allowed else {
            context.logger.notice("rate limited", metadata: ["path": "\(request.uri.path)"])
            var response = renderer.render(.rateLimited, language: request.pageLanguage)
            response.headers[.retryAfter] = "60"
            return response
        }
        return try await next(request, context)
    }
}
