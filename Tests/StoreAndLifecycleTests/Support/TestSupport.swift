import Foundation
import Logging

/// Why a test could not set itself up (a missing service, a command that failed).
struct SetupError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Small shared values and helpers.
enum Support {
    /// A logger that stays quiet unless SIWA_TEST_LOG is set (failures the tests provoke would fill the output).
    static func logger(_ label: String) -> Logger {
        var logger = Logger(label: label)
        logger.logLevel = ProcessInfo.processInfo.environment["SIWA_TEST_LOG"] == nil ? .critical : .debug
        return logger
    }

    /// Lower-case random hex, `bytes` long before encoding.
    static func randomHex(_ bytes: Int = 8) -> String {
        (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

    /// Now, to the whole second (both stores keep times as seconds in a double; whole seconds compare exactly).
    static func now() -> Date {
        Date(timeIntervalSince1970: Double(Int(Date().timeIntervalSince1970)))
    }

    /// A SQL string literal (tests only build SQL from their own values).
    static func literal(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
    }

    /// Polls `condition` every 100 ms until it holds or `timeout` passes; returns whether it held.
    static func eventually(timeout: Duration = .seconds(10), _ condition: () async throws -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if try await condition() { return true }
            try await Task.sleep(for: .milliseconds(100))
        }
        return try await condition()
    }
}
