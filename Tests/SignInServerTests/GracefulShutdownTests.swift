import AppleIDEmulator
import AppleSignIn
import AsyncHTTPClient
import Foundation
import Hummingbird
import JOSE
import Logging
import NIOCore
import ServiceLifecycle
import SignInServer
import TestSupport
import Testing

@Suite("Graceful shutdown")
struct GracefulShutdownTests {
    @Test("SIGTERM's graceful shutdown lets an in-flight callback finish: the person still gets their session")
    func inFlightCallbackFinishes() async throws {
        var quiet = Logger(label: "test.shutdown")
        quiet.logLevel = .critical
        let returnURL = "http://localhost/auth/apple/callback"
        let emulator = try AppleIDEmulator(configuration: .defaults(redirectURIs: [returnURL], notificationURL: nil), logger: quiet)
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(redirectConfiguration: .disallow))
        do {
            try await run(client: client, emulator: emulator, returnURL: returnURL, logger: quiet)
        } catch {
            try? await client.shutdown()
            throw error
        }
        try await client.shutdown()
    }

    private func run(client: HTTPClient, emulator: AppleIDEmulator, returnURL: String, logger quiet: Logger) async throws {
        try await withLiveApplication({ emulator.buildApplication(host: "127.0.0.1", port: 0, onRunning: $0) }) { emulatorPort in
            let emulatorURL = "http://127.0.0.1:\(emulatorPort)"
            let apple = try AppleSignInConfiguration(
                teamID: EmulatorConfiguration.testTeamID, keyID: EmulatorConfiguration.testKeyID, servicesID: EmulatorConfiguration.testServicesID,
                returnURLs: [returnURL], privateKeyPEM: EmulatorConfiguration.testPrivateKeyPEM, appleBaseURL: emulatorURL
            )
            let database = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-shutdown-\(UUID().uuidString).sqlite").path
            defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: database + suffix) } }
            let settings = ServerSettings(mode: .apple, host: "127.0.0.1", port: 0, database: database, apple: apple)
            let (ports, continuation) = AsyncStream<Int>.makeStream()
            let app = try await buildApplication(settings: settings, httpClient: .shared, logger: quiet) { port in
                continuation.yield(port)
                continuation.finish()
            }
            let group = ServiceGroup(services: [app], gracefulShutdownSignals: [], logger: quiet)
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await group.run() }
                var iterator = ports.makeAsyncIterator()
                let port = try #require(await iterator.next())
                let site = "http://127.0.0.1:\(port)"

                // Start a sign-in and consent headlessly.
                let start = try await client.execute(HTTPClientRequest(url: site + "/auth/apple"), timeout: .seconds(10))
                let location = try #require(start.headers.first(name: "Location"))
                let cookie = try #require(start.headers["Set-Cookie"].first { $0.hasPrefix("siwa_binding=") }?.split(separator: ";").first.map(String.init))
                let consent = try await client.execute(HTTPClientRequest(url: location + "&emulator_user=\(EmulatorConfiguration.defaults().users[0].sub)&emulator_respond=json"), timeout: .seconds(10))
                let json = try JSONSerialization.jsonObject(with: Data(buffer: try await consent.body.collect(upTo: 1 << 20))) as? [String: Any]
                let fields = try #require(json?["fields"] as? [String: String])

                // Apple's token endpoint is slow: the callback will be in flight when shutdown begins.
                var fault = HTTPClientRequest(url: emulatorURL + "/emulator/admin/faults/token")
                fault.method = .PUT
                fault.headers.add(name: "Content-Type", value: "application/json")
                fault.body = .bytes(ByteBuffer(string: #"{"latency_ms":3000}"#))
                _ = try await client.execute(fault, timeout: .seconds(5))

                var callback = HTTPClientRequest(url: site + "/auth/apple/callback")
                callback.method = .POST
                callback.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
                callback.headers.add(name: "Cookie", value: cookie)
                callback.body = .bytes(ByteBuffer(string: FormEncoding.encode(fields.sorted { $0.key < $1.key })))
                let inFlight = Task { try await client.execute(callback, timeout: .seconds(10)) }
                try await Task.sleep(for: .milliseconds(1000))
                await group.triggerGracefulShutdown()
                let response = try await inFlight.value
                #expect(response.status == .seeOther)
                #expect(response.headers.first(name: "Location") == "/session")
                #expect(response.headers["Set-Cookie"].contains { $0.hasPrefix("siwa_session=") })
                // The connection ends after this answer, and the answer says so (a proxy keeping it would lose its next request).
                #expect(response.headers.first(name: "Connection")?.lowercased() == "close", "\(response.headers)")
                try await tasks.waitForAll()
            }
        }
    }
}
