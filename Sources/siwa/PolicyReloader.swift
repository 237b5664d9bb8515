import Foundation
import Logging
import ServiceLifecycle
import SignInServer
import UnixSignals

/// Reads the configuration again (the same command line, the environment `siwa serve` started with, the config file
/// and `.env` as they are now) and puts its access configuration in force for the next request, without a restart
/// and without dropping a connection: `access_rules`, `groups`, and the global policy (`allowed_emails`,
/// `allowed_email_domains`, `allowed_subs`, `allowed_groups`). On SIGHUP, and when the config file changes on disk
/// (its modification time or size, looked at every second, as oauth2-proxy watches its emails file). The log says
/// what changed. A configuration that no longer reads leaves what is in force as it was and says why. Everything
/// else (ports, the store, Apple's credentials) still needs a restart.
struct PolicyReloader: Service, CustomStringConvertible {
    /// ServiceLifecycle logs its services at start: the name only, never the arguments (they may hold secrets).
    var description: String { "PolicyReloader" }

    let arguments: [String]
    let front: FrontSettings
    let logger: Logger
    /// The config file to watch; nil watches none.
    let watched: String?
    /// The file as it was when the configuration in force was read: a change made before the watch starts counts.
    private let readStamp: String?

    init(arguments: [String], front: FrontSettings, logger: Logger, watched: String? = nil) {
        self.arguments = arguments
        self.front = front
        self.logger = logger
        self.watched = watched
        readStamp = watched.flatMap(Self.stamp)
    }

    func run() async throws {
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        try await cancelWhenGracefulShutdown {
            try await withThrowingDiscardingTaskGroup { group in
                group.addTask {
                    for await _ in hangups { await reload(because: "SIGHUP") }
                }
                if let watched {
                    group.addTask { try await watch(watched) }
                }
            }
        }
    }

    /// Reloads when `path`'s modification time or size changes (an editor that writes a new file and renames it
    /// included), until cancelled.
    private func watch(_ path: String) async throws {
        var seen = readStamp
        while !Task.isCancelled {
            try await Task.sleep(for: .seconds(1))
            let now = Self.stamp(path)
            if now != seen {
                seen = now
                await reload(because: "configuration file changed")
            }
        }
    }

    private static func stamp(_ path: String) -> String? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path) else { return nil }
        let modified = (attributes[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0
        return "\(modified) \(attributes[.size] as? Int ?? -1) \(attributes[.systemFileNumber] as? Int ?? -1)"
    }

    func reload(because trigger: String = "SIGHUP") async {
        let configuration: AccessConfiguration
        do {
            configuration = try ServePlan.access(try await LayeredValues(commandArguments: arguments))
        } catch {
            logger.error("\(trigger): configuration not reloaded, the access rules, groups and policy in force are unchanged", metadata: ["error": "\(error)"])
            return
        }
        let previous = front.access.reload(configuration)
        let changes = AccessConfiguration.changes(from: previous, to: configuration)
        if changes.isEmpty {
            logger.info("\(trigger): access configuration reloaded, unchanged")
        } else {
            logger.notice("\(trigger): access configuration reloaded", metadata: ["changes": "\(changes.joined(separator: "; "))", "open": "\(configuration.global.isOpen)"])
        }
    }
}
