import Foundation
import Logging
import Prometheus
import ServiceLifecycle
import Synchronization
import UnixSignals
#if canImport(Glibc)
import Glibc
#endif

/// One event of the audit trail. Never a token, code, cookie or secret: who, from where, what, and why.
public struct AuditEvent: Sendable, Encodable, Equatable {
    /// `sign-in`, `sign-in-failed`, `sign-out`, `sessions-ended`, `denied`, `groups-changed`, `access-reloaded`,
    /// `client-added`, `client-removed`.
    public var event: String
    public var sub: String?
    public var email: String?
    public var ip: String?
    public var host: String?
    public var method: String?
    public var path: String?
    /// The rule that decided (`3`, `skip_auth_routes[0]`, `global`).
    public var rule: String?
    public var reason: String?
    /// Who made a change (an operator's email or sub, or `cli`).
    public var actor: String?
    public var time: String = ""

    public init(
        _ event: String, sub: String? = nil, email: String? = nil, ip: String? = nil, host: String? = nil, method: String? = nil, path: String? = nil,
        rule: String? = nil, reason: String? = nil, actor: String? = nil
    ) {
        self.event = event
        self.sub = sub
        self.email = email
        self.ip = ip
        self.host = host
        self.method = method
        self.path = path
        self.rule = rule
        self.reason = reason
        self.actor = actor
    }

    /// The event as one line of JSON (sorted keys, no absent fields).
    var jsonLine: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return ((try? encoder.encode(self)).map { String(decoding: $0, as: UTF8.self) } ?? #"{"event":"unencodable"}"#) + "\n"
    }
}

/// The audit trail: every event is an info line under the label `siwa.audit` and, with `audit_log`, one JSON object
/// per line appended to that file (`O_APPEND`, so instances and the CLI may share it; reopened on SIGHUP, for
/// logrotate). Recording never waits: events go into a bounded queue that `run()` drains off the
/// request's path, and what does not fit under pressure is counted (`siwa_audit_events_dropped_total`), not queued.
public final class AuditTrail: Service, Sendable, CustomStringConvertible {
    public var description: String { "AuditTrail" }

    /// Events waiting before new ones are dropped.
    public static let capacity = 8192
    let path: String?
    private let logger: Logger
    private let dropped: Counter?
    private let written: Counter?
    private let queue: AsyncStream<AuditEvent>
    private let input: AsyncStream<AuditEvent>.Continuation
    /// The latest events of this instance, newest last (the console's list).
    private let latest = Mutex<[AuditEvent]>([])
    static let kept = 1000

    /// The latest events recorded here, newest first, that `matches`.
    public func recent(limit: Int = 200, where matches: (AuditEvent) -> Bool = { _ in true }) -> [AuditEvent] {
        Array(latest.withLock { $0 }.reversed().filter(matches).prefix(limit))
    }

    /// The open file and whether it must be opened again before the next write.
    private let file = Mutex<(descriptor: Int32, reopen: Bool)>((-1, true))

    public init(path: String?, metrics: ServerMetrics?, logger: Logger = Logger(label: "siwa.audit")) {
        self.path = path
        self.logger = logger
        dropped = metrics?.registry.makeCounter(name: "siwa_audit_events_dropped_total", help: "Audit events dropped because the writer fell behind.")
        written = metrics?.registry.makeCounter(name: "siwa_audit_events_total", help: "Audit events recorded.")
        (queue, input) = AsyncStream.makeStream(of: AuditEvent.self, bufferingPolicy: .bufferingOldest(Self.capacity))
    }

    deinit {
        input.finish()
        file.withLock { if $0.descriptor >= 0 { close($0.descriptor) } }
    }

    /// Records `event` (stamped now) without waiting.
    public func record(_ event: AuditEvent) {
        var event = event
        event.time = Date().formatted(.iso8601)
        let kept = event
        latest.withLock { latest in
            if latest.count >= Self.kept { latest.removeFirst(latest.count - Self.kept + 1) }
            latest.append(kept)
        }
        if case .dropped = input.yield(event) { dropped?.increment() }
    }

    /// The file is opened again before the next write (logrotate moved it).
    public func reopen() {
        file.withLock { $0.reopen = true }
    }

    public func run() async throws {
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        // On a graceful shutdown the queue is closed, so what is in it is still written before the loop ends.
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                group.addTask {
                    for await _ in hangups {
                        if Task.isCancelled { break }
                        self.reopen()
                    }
                }
                for await event in self.queue { self.write(event) }
                group.cancelAll()
            }
        } onGracefulShutdown: {
            self.input.finish()
        }
    }

    private func write(_ event: AuditEvent) {
        written?.increment()
        var metadata: Logger.Metadata = ["event": "\(event.event)"]
        for (key, value) in [("sub", event.sub), ("email", event.email), ("ip", event.ip), ("host", event.host), ("method", event.method), ("path", event.path), ("rule", event.rule), ("reason", event.reason), ("actor", event.actor)] {
            if let value { metadata[key] = "\(value)" }
        }
        logger.info("audit", metadata: metadata)
        guard let path else { return }
        Self.append(event.jsonLine, to: path, file: file, logger: logger)
    }

    /// Appends `line` to `path` with one `write` on a descriptor opened with `O_APPEND` (so lines from several
    /// processes never interleave), opening it first when needed.
    static func append(_ line: String, to path: String, file: borrowing Mutex<(descriptor: Int32, reopen: Bool)>, logger: Logger) {
        file.withLock { state in
            if state.reopen || state.descriptor < 0 {
                if state.descriptor >= 0 { close(state.descriptor) }
                state.descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o640)
                state.reopen = false
                if state.descriptor < 0 {
                    logger.error("audit_log cannot be opened; events go to the log only", metadata: ["path": "\(path)", "errno": "\(errno)"])
                    return
                }
            }
            let bytes = Array(line.utf8)
            let count = bytes.withUnsafeBytes { Glibc.write(state.descriptor, $0.baseAddress, $0.count) }
            if count != bytes.count {
                logger.error("audit_log write failed", metadata: ["path": "\(path)", "errno": "\(errno)"])
                state.reopen = true
            }
        }
    }

    /// Appends one event to `path` now, for the CLI's changes (no server runs to queue them).
    public static func appendNow(_ event: AuditEvent, to path: String, logger: Logger) {
        var event = event
        event.time = Date().formatted(.iso8601)
        let file = Mutex<(descriptor: Int32, reopen: Bool)>((-1, true))
        append(event.jsonLine, to: path, file: file, logger: logger)
        file.withLock { if $0.descriptor >= 0 { close($0.descriptor) } }
    }
}
