import Foundation
import Hummingbird
import Synchronization
import TestSupport

/// A tiny HTTP server standing in for a website's notification endpoint: records every body posted to
/// `/notifications`, and answers `/failing` with 500.
final class NotificationReceiver: Sendable {
    private let received = Mutex<[String]>([])

    var bodies: [String] { received.withLock { $0 } }

    /// Runs the receiver on 127.0.0.1 on a free port and calls `body` with its base URL.
    func run<Value: Sendable>(_ body: (String) async throws -> Value) async throws -> Value {
        let router = Router()
        router.post("notifications") { request, _ -> HTTPResponse.Status in
            var request = request
            let bytes = try await request.collectBody(upTo: 64 * 1024)
            self.received.withLock { $0.append(String(buffer: bytes)) }
            return .ok
        }
        router.post("failing") { _, _ -> HTTPResponse.Status in .internalServerError }
        return try await withLocalServer(router, body)
    }
}
