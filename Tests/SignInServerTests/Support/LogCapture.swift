import Logging
import SignInServer
import Synchronization

/// Keeps every line logged through `logger`, at every level, with its metadata.
final class LogCapture: Sendable {
    private let lines = Mutex<[String]>([])

    /// A logger at `trace` writing here through the escaping handler `siwa serve` logs through.
    var logger: Logger {
        Logger(label: "siwa.test") { _ in EscapingLogHandler(CapturingLogHandler(capture: self)) }
    }

    /// Everything logged so far, one line per event.
    var text: String { lines.withLock { $0.joined(separator: "\n") } }

    /// The lines logged so far.
    var all: [String] { lines.withLock { $0 } }

    fileprivate func append(_ line: String) {
        lines.withLock { $0.append(line) }
    }
}

private struct CapturingLogHandler: LogHandler {
    let capture: LogCapture
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        let rendered = merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        let error = event.error.map { " error=\($0)" } ?? ""
        capture.append("\(event.level) [\(event.source)] \(event.message) \(rendered)\(error)")
    }
}
