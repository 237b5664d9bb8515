import Foundation
import Synchronization

/// Date formatters are expensive to create: made once, reused (they are thread-safe for formatting).
final class DateFormatters: @unchecked Sendable {
    // @unchecked: the formatters are configured once in init and only used to format afterwards, which
    // Foundation documents as thread-safe; the memo is behind its own lock.
    static let shared = DateFormatters()
    private let iso = ISO8601DateFormatter()
    private let english: DateFormatter
    private let chinese: DateFormatter
    /// Formatted text by (kind, second): a session's two dates are formatted on every view of its page, and ICU
    /// formatting cost more than the rest of the page. Cleared when full.
    private let memo = Mutex<[MemoKey: String]>([:])
    private static let memoLimit = 8192

    private struct MemoKey: Hashable {
        var kind: UInt8
        var second: Int64
    }

    private init() {
        func make(_ locale: String) -> DateFormatter {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: locale)
            formatter.dateStyle = .medium
            formatter.timeStyle = .short
            formatter.timeZone = TimeZone(identifier: "UTC")
            return formatter
        }
        english = make("en_US")
        chinese = make("zh_Hans_CN")
    }

    /// Medium date and short time in `language`, UTC.
    func display(_ date: Date, _ language: PageLanguage) -> String {
        memoized(kind: language == .english ? 0 : 1, date) { language == .english ? english.string(from: $0) : chinese.string(from: $0) }
    }

    /// ISO 8601, UTC.
    func isoString(_ date: Date) -> String {
        memoized(kind: 2, date) { iso.string(from: $0) }
    }

    private func memoized(kind: UInt8, _ date: Date, _ format: (Date) -> String) -> String {
        let key = MemoKey(kind: kind, second: Int64(date.timeIntervalSince1970.rounded(.down)))
        if let text = memo.withLock({ $0[key] }) { return text }
        let text = format(Date(timeIntervalSince1970: Double(key.second)))
        memo.withLock { memo in
            if memo.count >= Self.memoLimit { memo.removeAll(keepingCapacity: true) }
            memo[key] = text
        }
        return text
    }
}
