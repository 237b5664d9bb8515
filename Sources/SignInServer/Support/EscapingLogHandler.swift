import Logging

/// A log handler that escapes control characters in every message and metadata value before another handler
/// writes them, so no value from outside (a form field, a token header, a query string) can start a forged line.
///
/// It keeps the logger's metadata itself and hands it to the inner handler with each event: Hummingbird sets a
/// request id on every request's logger, and `StreamLogHandler` formats its whole metadata again on every change,
/// which a profile of siwa's pages put at 2 % of their CPU for lines that are mostly never written.
public struct EscapingLogHandler: LogHandler {
    private var inner: any LogHandler
    /// Makes the inner handler of a label, when this handler was made with it: a handler writes the label it was
    /// made with, so `Logger.module` needs a new inner handler to log under another label (`siwa.audit`).
    private let makeInner: (@Sendable (String) -> any LogHandler)?

    /// Wraps `inner` (e.g. `StreamLogHandler.standardError`).
    public init(_ inner: any LogHandler) {
        self.inner = inner
        makeInner = nil
    }

    /// Wraps the handler `makeInner` makes for `label`; `relabelled(_:)` makes one for another label the same way.
    public init(label: String, makeInner: @escaping @Sendable (String) -> any LogHandler) {
        inner = makeInner(label)
        self.makeInner = makeInner
    }

    /// This handler (its level and metadata) writing under `label`; nil when it wraps a handler made elsewhere.
    public func relabelled(_ label: String) -> EscapingLogHandler? {
        guard let makeInner else { return nil }
        var handler = EscapingLogHandler(label: label, makeInner: makeInner)
        handler.logLevel = logLevel
        handler.metadata = metadata
        handler.metadataProvider = metadataProvider
        return handler
    }

    public var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    public var metadata: Logger.Metadata = [:]

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public var metadataProvider: Logger.MetadataProvider? {
        get { inner.metadataProvider }
        set { inner.metadataProvider = newValue }
    }

    public func log(event: LogEvent) {
        var escaped = event
        escaped.message = Logger.Message(stringLiteral: Self.escape(event.message.description))
        // The logger's own metadata, then the call's (which wins on a shared key, as in swift-log's handlers).
        let merged = event.metadata.map { metadata.merging($0) { $1 } } ?? metadata
        escaped.metadata = merged.isEmpty ? nil : Self.escape(merged)
        escaped.error = event.error.map { EscapedError(description: Self.escape("\($0)")) }
        inner.log(event: escaped)
    }

    /// An error as its escaped description.
    private struct EscapedError: Error, CustomStringConvertible {
        var description: String
    }

    /// Makes every logger of the process write escaped lines to standard error at `level`.
    public static func bootstrap(level: Logger.Level) {
        LoggingSystem.bootstrap { label in
            EscapingLogHandler(label: label) { label in
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = level
                return handler
            }
        }
    }

    /// `text` with every control character written as an escape (`\n`, `\r`, `\t`, `\u{…}`); other text unchanged.
    public static func escape(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isControl) else { return text }
        var result = ""
        result.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            case _ where isControl(scalar): result += "\\u{\(String(scalar.value, radix: 16))}"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar.value == 0x2028 || scalar.value == 0x2029
    }

    private static func escape(_ metadata: Logger.Metadata) -> Logger.Metadata {
        metadata.mapValues(escape)
    }

    private static func escape(_ value: Logger.MetadataValue) -> Logger.MetadataValue {
        switch value {
        case .string(let text): .string(escape(text))
        case .stringConvertible(let convertible): .string(escape(convertible.description))
        case .array(let values): .array(values.map(escape))
        case .dictionary(let values): .dictionary(escape(values))
        }
    }
}
