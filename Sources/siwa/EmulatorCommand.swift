import AppleIDEmulator
import ArgumentParser
import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import NIOCore
import SignInServer

/// `siwa emulator`: the local stand-in for appleid.apple.com.
struct EmulatorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "emulator",
        abstract: "Run the local emulator of appleid.apple.com, or send it commands.",
        discussion: "Example: siwa emulator run --port 9090",
        subcommands: [EmulatorRunCommand.self, EmulatorNotifyCommand.self],
        defaultSubcommand: EmulatorRunCommand.self
    )
}

/// Loads an emulator configuration file, or the defaults.
func loadEmulatorConfiguration(_ path: String?) throws -> EmulatorConfiguration {
    guard let path else { return .defaults() }
    guard let data = FileManager.default.contents(atPath: path) else {
        throw ValidationError("cannot read the emulator configuration \(path)")
    }
    do {
        return try JSONDecoder().decode(EmulatorConfiguration.self, from: data)
    } catch {
        throw ValidationError("\(path) is not an emulator configuration (see siwa emulator --print-config): \(error)")
    }
}

/// `siwa emulator [run]`.
struct EmulatorRunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "run", abstract: "Serve the emulator (the default).", discussion: "Example: siwa emulator run --port 9090")

    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on.") var port = 9090
    @Option(help: "Emulator configuration (JSON); see --print-config.") var config: String?
    @Flag(help: "Print the configuration in use (including the test client's private key) and exit.") var printConfig = false

    func run() async throws {
        let configuration = try loadEmulatorConfiguration(config)
        if printConfig {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(configuration), as: UTF8.self))
            return
        }
        EscapingLogHandler.bootstrap(level: .info)
        let logger = Logger(label: "siwa.emulator")
        let emulator = try AppleIDEmulator(configuration: configuration, logger: logger)
        let app = emulator.buildApplication(host: host, port: port) { port in
            CLIOutput.stderr("Apple ID emulator listening on http://\(host):\(port) (issuer \(emulator.issuer)); admin API under /emulator/admin")
        }
        try await app.runService()
    }
}

/// `siwa emulator notify`: asks a running emulator to send a server-to-server notification.
struct EmulatorNotifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "notify", abstract: "Send a server-to-server notification through a running emulator.",
        discussion: "Example: siwa emulator notify --type consent-revoked --sub 000123.a1b2c3d4e5f60718293a4b5c6d7e8f90.1234"
    )

    @Option(help: "email-disabled, email-enabled, consent-revoked or account-delete.") var type: String
    @Option(help: "The user's sub.") var sub: String
    @Option(help: "The client_id (default: the first registered client).") var clientId: String?
    @Option(help: "Where to post (default: the client's notification URL).") var url: String?
    @Option(help: "Deliver the same notification this many times.") var copies = 1
    @Option(help: "The running emulator.") var emulator = "http://127.0.0.1:9090"

    func run() async throws {
        var request = HTTPClientRequest(url: emulator + "/emulator/admin/notify")
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        let body = AppleIDEmulator.NotifyRequest(type: type, sub: sub, clientID: clientId, url: url, copies: copies)
        request.body = .bytes(ByteBuffer(bytes: try JSONEncoder().encode(body)))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let answer = try await response.body.collect(upTo: 1 << 20)
        print(String(buffer: answer))
        guard response.status == .ok else { throw ExitCode.failure }
    }
}
