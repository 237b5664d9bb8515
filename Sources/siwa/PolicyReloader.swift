import Logging
import ServiceLifecycle
import SignInServer
import UnixSignals

/// SIGHUP: reads the configuration again (the same command line, the environment `siwa serve` started with, the
/// config file and `.env` as they are now) and puts its access policy (`allowed_emails`, `allowed_email_domains`,
/// `allowed_subs`) in force for the next request, without a restart and without dropping a connection. The log
/// says what changed. A configuration that no longer reads leaves the running policy as it was and says why.
/// Everything else (ports, the store, Apple's credentials) still needs a restart.
struct PolicyReloader: Service, CustomStringConvertible {
    /// ServiceLifecycle logs its services at start: the name only, never the arguments (they may hold secrets).
    var description: String { "PolicyReloader" }

    let arguments: [String]
    let front: FrontSettings
    let logger: Logger

    func run() async throws {
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        try await cancelWhenGracefulShutdown {
            for await _ in hangups {
                await reload()
            }
        }
    }

    func reload() async {
        let policy: AccessPolicy
        do {
            policy = ServePlan.accessPolicy(try await LayeredValues(commandArguments: arguments))
        } catch {
            logger.error("SIGHUP: configuration not reloaded, the access policy in force is unchanged", metadata: ["error": "\(error)"])
            return
        }
        let previous = front.reload(policy: policy)
        let changes = Self.changes(from: previous, to: policy)
        if changes.isEmpty {
            logger.info("SIGHUP: access policy reloaded, unchanged")
        } else {
            logger.notice("SIGHUP: access policy reloaded", metadata: ["changes": "\(changes.joined(separator: "; "))", "open": "\(policy.isOpen)"])
        }
    }

    /// What differs, rule by rule: `allowed_emails +a@x.org -b@y.org`.
    static func changes(from old: AccessPolicy, to new: AccessPolicy) -> [String] {
        [("allowed_emails", old.emails, new.emails), ("allowed_email_domains", old.emailDomains, new.emailDomains), ("allowed_subs", old.subjects, new.subjects)]
            .compactMap { key, before, after in
                let added = after.subtracting(before).sorted().map { "+" + $0 }
                let removed = before.subtracting(after).sorted().map { "-" + $0 }
                return added.isEmpty && removed.isEmpty ? nil : key + " " + (added + removed).joined(separator: " ")
            }
    }
}
