import Foundation
import Synchronization

/// What one client saw; merged into one at the end (each client owns its tally, so no locks on the hot path).
struct Tally {
    /// Requests by kind and outcome label (status, or the transport error).
    var requests: [String: [String: Int]] = [:]
    /// Latencies by kind, in milliseconds.
    var latencies: [String: [Double]] = [:]

    var signInsAttempted = 0
    var signInsCompleted = 0
    var freshSignIns = 0
    var returningSignIns = 0
    /// Sign-ins the site refused with a proper error page, by "status heading".
    var failedCleanly: [String: Int] = [:]
    /// Sign-ins that never reached the site because the emulator's authorize step failed (injected fault).
    var abandonedAtEmulator: [String: Int] = [:]
    /// Anything the site must never do, by description.
    var defects: [String: Int] = [:]
    /// Each defect with the time its request was sent and how long it waited (Unix epoch seconds; seconds).
    var defectLog: [(sentAt: Double, waited: Double, description: String)] = []
    var sessionViews = 0
    /// Session views answered with the outage page (503) while PostgreSQL was down.
    var sessionViewsUnavailable = 0

    /// When each sign-in completed (callback answered 303), Unix epoch seconds.
    var completions: [Double] = []
    /// When the site answered a 503 page (store or Apple unavailable), Unix epoch seconds.
    var unavailableAnswers: [Double] = []
    /// When a session page (which asks only the store) was answered with the outage page, Unix epoch seconds.
    var sessionOutages: [Double] = []

    var notificationsSent: [String: Int] = [:]
    var notificationsAccepted: [String: Int] = [:]
    /// Deliveries the site did not accept (a retry followed), by type and status.
    var notificationRetries: [String: Int] = [:]
    /// Notifications whose effect was then seen on the session page (flag shown/hidden, session ended).
    var notificationsSeenApplied: [String: Int] = [:]

    var sessionsExpected = 0
    var sessionsValid = 0
    var sessionsEndedExpected = 0
    var sessionsEndedConfirmed = 0

    mutating func request(_ kind: String, _ outcome: String, milliseconds: Double? = nil) {
        requests[kind, default: [:]][outcome, default: 0] += 1
        if let milliseconds { latencies[kind, default: []].append(milliseconds) }
    }

    mutating func defect(_ description: String, sentAt: Double = epochNow(), waited: Double = 0) {
        defects[description, default: 0] += 1
        defectLog.append((sentAt, waited, description))
    }

    mutating func merge(_ other: Tally) {
        for (kind, outcomes) in other.requests {
            for (outcome, count) in outcomes { requests[kind, default: [:]][outcome, default: 0] += count }
        }
        for (kind, values) in other.latencies { latencies[kind, default: []].append(contentsOf: values) }
        signInsAttempted += other.signInsAttempted
        signInsCompleted += other.signInsCompleted
        freshSignIns += other.freshSignIns
        returningSignIns += other.returningSignIns
        failedCleanly.merge(other.failedCleanly, uniquingKeysWith: +)
        abandonedAtEmulator.merge(other.abandonedAtEmulator, uniquingKeysWith: +)
        defects.merge(other.defects, uniquingKeysWith: +)
        defectLog.append(contentsOf: other.defectLog)
        sessionViews += other.sessionViews
        sessionViewsUnavailable += other.sessionViewsUnavailable
        completions.append(contentsOf: other.completions)
        unavailableAnswers.append(contentsOf: other.unavailableAnswers)
        sessionOutages.append(contentsOf: other.sessionOutages)
        notificationsSent.merge(other.notificationsSent, uniquingKeysWith: +)
        notificationsAccepted.merge(other.notificationsAccepted, uniquingKeysWith: +)
        notificationRetries.merge(other.notificationRetries, uniquingKeysWith: +)
        notificationsSeenApplied.merge(other.notificationsSeenApplied, uniquingKeysWith: +)
        sessionsExpected += other.sessionsExpected
        sessionsValid += other.sessionsValid
        sessionsEndedExpected += other.sessionsEndedExpected
        sessionsEndedConfirmed += other.sessionsEndedConfirmed
    }

    var defectCount: Int { defects.values.reduce(0, +) }
}

/// Running totals for the progress line on stderr.
final class Progress: Sendable {
    let completed = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    let defects = Atomic<Int>(0)
    let notifications = Atomic<Int>(0)
}

/// Percentile of unsorted values (nearest rank).
func percentile(_ values: [Double], _ p: Double) -> Double? {
    guard !values.isEmpty else { return nil }
    let sorted = values.sorted()
    let rank = Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1
    return sorted[min(max(rank, 0), sorted.count - 1)]
}

func milliseconds(_ value: Double?) -> String {
    guard let value else { return "–" }
    return value >= 100 ? String(format: "%.0f ms", value) : String(format: "%.1f ms", value)
}

func grouped(_ value: Int) -> String {
    let formatter = NumberFormatter()
    formatter.numberStyle = .decimal
    formatter.groupingSeparator = ","
    return formatter.string(from: NSNumber(value: value)) ?? "\(value)"
}

/// `a: 3, b: 1`, largest first.
func breakdown(_ counts: [String: Int]) -> String {
    counts.isEmpty ? "none" : counts.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }.map { "\($0.key): \(grouped($0.value))" }.joined(separator: "; ")
}
