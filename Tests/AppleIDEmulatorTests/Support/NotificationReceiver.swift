import Foundation
import Hummingbird
import Logging
import Synchronization

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
        let (ports, portContinuation) = AsyncStream<Int>.makeStream()
        var logger = Logger(label: "test-receiver")
        logger.logLevel = .critical
        let app = Application(
            router: router,
            configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in
                portContinuation.yield(channel.localAddress?.port ?? 0)
                portContinuation.finish()
            },
            logger: logger
        )
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                defer { portContinuation.finish() }
                do {
                    try await app.runService()
                } catch is CancellationError {
                    // The test is over.
                }
            }
            var iterator = ports.makeAsyncIterator()
            guard let port = await iterator.next(), port != 0 else {
                group.cancelAll()
                throw HarnessError.didNotStart
            }
            do {
                let value = try await body("http://127.0.0.1:\(port)")
                group.cancelAll()
                return value
            } catch {
                group.cancelAll()
                throw error
            }
        }
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Calls `body` with a port on 127.0.0.1 that is bound but not listening, so a connection to it is refused,
/// and no other test can take the port meanwhile.
func withClosedLoopbackPort<Value>(_ body: (Int) async throws -> Value) async throws -> Value {
    #if canImport(Glibc)
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    #else
    let descriptor = socket(AF_INET, SOCK_STREAM, 0)
    #endif
    precondition(descriptor >= 0)
    defer { close(descriptor) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
            bind(descriptor, socketAddress, length) == 0 && getsockname(descriptor, socketAddress, &length) == 0
        }
    }
    precondition(bound)
    return try await body(Int(UInt16(bigEndian: address.sin_port)))
}
