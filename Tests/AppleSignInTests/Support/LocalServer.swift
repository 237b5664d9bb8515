#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Hummingbird
import Logging
import NIOCore
import Synchronization

/// Runs `router` on a real socket at 127.0.0.1 on a port the system picks, calls `body` with the base URL,
/// then stops the server.
func withLocalServer<Value: Sendable>(
    _ router: Router<BasicRequestContext>,
    _ body: (URL) async throws -> Value
) async throws -> Value {
    let (ports, portContinuation) = AsyncStream<Int>.makeStream()
    var logger = Logger(label: "test-server")
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
            // A server that fails to start ends the port stream, so the test fails instead of waiting forever.
            defer { portContinuation.finish() }
            do {
                try await app.run()
            } catch is CancellationError {
                // The test is over.
            }
        }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next(), port != 0 else {
            group.cancelAll()
            throw LocalServerError.didNotStart
        }
        let base = URL(string: "http://127.0.0.1:\(port)")!
        do {
            let value = try await body(base)
            group.cancelAll()
            return value
        } catch {
            group.cancelAll()
            throw error
        }
    }
}

enum LocalServerError: Error {
    case didNotStart
}

/// Calls `body` with a port on 127.0.0.1 that is bound but not listening, so a connection is refused at once,
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

/// Counts requests a test server received, safely across its handler tasks.
final class Counter: Sendable {
    private let value = Mutex(0)
    func increment() { value.withLock { $0 += 1 } }
    var count: Int { value.withLock { $0 } }
}

/// Holds tasks until `parties` of them have arrived, then releases them all at once.
final class StartingGate: Sendable {
    private struct State {
        var arrived = 0
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private let parties: Int
    private let state = Mutex(State())

    init(parties: Int) { self.parties = parties }

    func arrive() async {
        await withCheckedContinuation { continuation in
            let release: [CheckedContinuation<Void, Never>] = state.withLock { state in
                state.arrived += 1
                state.waiting.append(continuation)
                guard state.arrived >= parties else { return [] }
                defer { state.waiting = [] }
                return state.waiting
            }
            for waiter in release { waiter.resume() }
        }
    }
}
