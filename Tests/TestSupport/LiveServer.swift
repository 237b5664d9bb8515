import Foundation
import Synchronization
import Hummingbird
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Why a test server could not be used.
public enum LiveServerError: Error, CustomStringConvertible {
    /// It did not start listening; the text says what it printed, if anything.
    case didNotStart(String)

    public var description: String {
        switch self {
        case .didNotStart(let detail): "the server did not start listening: \(detail)"
        }
    }
}

/// Runs the application `make` builds on a free loopback port while `body` runs with that port; stops it after.
/// `make` receives the callback to give the application as its `onServerRunning`.
public func withLiveApplication<App: ApplicationProtocol, T: Sendable>(
    _ make: (@escaping @Sendable (Int) async -> Void) async throws -> App,
    _ body: (Int) async throws -> T
) async throws -> T {
    let (ports, continuation) = AsyncStream<Int>.makeStream()
    let app = try await make { port in
        continuation.yield(port)
        continuation.finish()
    }
    // Why the server stopped before announcing its port, for the failure's message (its logger may be quiet).
    let stopped = StopReason()
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask {
            // If the server cannot start, the wait for its port below ends instead of hanging.
            defer { continuation.finish() }
            do {
                try await app.runService()
                stopped.reason.withLock { $0 = $0 ?? "it returned" }
            } catch is CancellationError {
                // The test is over.
            } catch {
                stopped.reason.withLock { $0 = String(reflecting: error) }
                throw error
            }
        }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next(), port != 0 else {
            group.cancelAll()
            throw LiveServerError.didNotStart("no port was announced; the server stopped: \(stopped.reason.withLock { $0 } ?? "no reason given")")
        }
        defer { group.cancelAll() }
        return try await body(port)
    }
}

/// Serves `router` on 127.0.0.1 on a free port, quietly, while `body` runs with its base URL
/// (`http://127.0.0.1:PORT`).
public func withLocalServer<Context: RequestContext, Value: Sendable>(
    _ router: Router<Context>,
    _ body: (String) async throws -> Value
) async throws -> Value where Context.Source == ApplicationRequestContextSource {
    var logger = Logger(label: "test-server")
    logger.logLevel = .critical
    return try await withLiveApplication({ onRunning in
        Application(
            router: router,
            configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) },
            logger: logger
        )
    }) { port in
        try await body("http://127.0.0.1:\(port)")
    }
}

/// Calls `body` with a port on 127.0.0.1 that is bound but not listening, so a connection to it is refused at
/// once, and no other test can take the port meanwhile.
public func withClosedLoopbackPort<Value>(_ body: (Int) async throws -> Value) async throws -> Value {
    #if canImport(Glibc)
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    #else
    let descriptor = socket(AF_INET, SOCK_STREAM, 0)
    #endif
    guard descriptor >= 0 else { throw LiveServerError.didNotStart("socket() failed") }
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
    guard bound else { throw LiveServerError.didNotStart("could not bind a loopback port") }
    return try await body(Int(UInt16(bigEndian: address.sin_port)))
}

/// Why a server stopped, written by its task and read by the one waiting for its port.
private final class StopReason: Sendable {
    let reason = Mutex<String?>(nil)
}
