import Foundation

/// The soak driver's command line, parsed by hand (a benchmark tool, like VerifyBenchmark).
struct Options {
    /// The site under test, e.g. `http://127.0.0.1:8080`.
    var server = ""
    /// The standalone emulator, e.g. `http://127.0.0.1:9090` (its admin API is used for faults and notifications).
    var emulator = ""
    /// The emulator's configuration file: its test users are shared out among the clients.
    var emulatorConfig = ""
    /// Concurrent clients.
    var clients = 200
    /// Length of the load phase.
    var seconds = 300.0
    /// Share of emulator calls (authorize, token, keys, revoke) that fail.
    var faultRate = 0.05
    /// Seconds between changes of the kind of injected fault (500, 503, dropped connection, bad JSON, slowness).
    var faultPeriod = 20.0
    /// Share of successful sign-ins followed by a server-to-server notification.
    var notifyShare = 0.04
    /// Share of sign-ins that bring a user the client has not used yet, while it has some left.
    var newUserShare = 0.1
    /// Timeout of every request the driver makes; a request to the site that takes longer is a hang.
    var requestTimeout = 30
    /// Written by the run script after the PostgreSQL restart: `stop_ms start_ms` (Unix epoch milliseconds).
    var outageFile: String?
    /// Where to write the subs that must exist in the users table at the end (one a line).
    var expectedUsersFile: String?
    /// Where to write the subs deleted by an `account-delete` notification (must be gone, with a tombstone).
    var deletedUsersFile: String?

    static let usage = """
        usage: Soak --server URL --emulator URL --emulator-config FILE [--clients N] [--seconds S] [--fault-rate P]
                    [--fault-period S] [--notify-share P] [--new-user-share P] [--request-timeout S]
                    [--outage-file FILE] [--expected-users FILE] [--deleted-users FILE]
        """

    init(arguments: [String]) throws {
        var iterator = arguments.dropFirst().makeIterator()
        func value(_ name: String) throws -> String {
            guard let next = iterator.next() else { throw UsageError(message: "\(name) needs a value") }
            return next
        }
        func number(_ name: String) throws -> Double {
            let text = try value(name)
            guard let number = Double(text), number >= 0 else { throw UsageError(message: "\(name): not a number: \(text)") }
            return number
        }
        while let argument = iterator.next() {
            switch argument {
            case "--server": server = try value(argument)
            case "--emulator": emulator = try value(argument)
            case "--emulator-config": emulatorConfig = try value(argument)
            case "--clients": clients = max(1, Int(try number(argument)))
            case "--seconds": seconds = try number(argument)
            case "--fault-rate": faultRate = min(1, try number(argument))
            case "--fault-period": faultPeriod = max(1, try number(argument))
            case "--notify-share": notifyShare = min(1, try number(argument))
            case "--new-user-share": newUserShare = min(1, try number(argument))
            case "--request-timeout": requestTimeout = max(1, Int(try number(argument)))
            case "--outage-file": outageFile = try value(argument)
            case "--expected-users": expectedUsersFile = try value(argument)
            case "--deleted-users": deletedUsersFile = try value(argument)
            default: throw UsageError(message: "unknown argument \(argument)")
            }
        }
        guard !server.isEmpty, !emulator.isEmpty, !emulatorConfig.isEmpty else {
            throw UsageError(message: "--server, --emulator and --emulator-config are required")
        }
        while server.hasSuffix("/") { server.removeLast() }
        while emulator.hasSuffix("/") { emulator.removeLast() }
    }
}

/// A command line the driver cannot run with.
struct UsageError: Error {
    var message: String
}

/// The part of the emulator configuration the driver needs: its test users.
struct EmulatorUsers: Decodable {
    struct User: Decodable, Sendable {
        var sub: String
        var firstName: String
        var lastName: String
    }

    var users: [User]

    static func load(_ path: String) throws -> [User] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw UsageError(message: "cannot read \(path)")
        }
        return try JSONDecoder().decode(EmulatorUsers.self, from: data).users
    }
}
