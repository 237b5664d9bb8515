import Foundation

/// Calls `body` in batches until `seconds` have passed; returns the calls made and the time they took.
/// Not isolated to the main actor, like the loops that call it: a hop per call would be measured too.
func measure(seconds: Double, batch: Int = 20, _ body: () async throws -> Void) async rethrows -> (calls: Int, seconds: Double) {
    let clock = ContinuousClock()
    let start = clock.now
    let limit = Duration.milliseconds(Int(seconds * 1000))
    var calls = 0
    while clock.now - start < limit {
        for _ in 0..<batch { try await body() }
        calls += batch
    }
    let elapsed = clock.now - start
    return (calls, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
}

/// The rates of one implementation of one operation, one per round.
struct Samples {
    var rates: [Double] = []

    var median: Double {
        let sorted = rates.sorted()
        guard !sorted.isEmpty else { return 0 }
        return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
    }

    var minimum: Double { rates.min() ?? 0 }
    var maximum: Double { rates.max() ?? 0 }

    /// (max − min) / median: the run-to-run spread this benchmark calls noise.
    var spread: Double { median > 0 ? (maximum - minimum) / median : 0 }

    /// Sample standard deviation over the mean.
    var relativeStandardDeviation: Double {
        guard rates.count > 1 else { return 0 }
        let mean = rates.reduce(0, +) / Double(rates.count)
        let variance = rates.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(rates.count - 1)
        return variance.squareRoot() / mean
    }
}

/// `12,345/s`-style rate.
func formatRate(_ rate: Double) -> String {
    let formatter = NumberFormatter()
    formatter.numberStyle = .decimal
    formatter.maximumFractionDigits = 0
    return formatter.string(from: NSNumber(value: rate)) ?? "\(Int(rate))"
}

/// Cost of one call, in µs or ns.
func formatCost(_ rate: Double) -> String {
    let nanoseconds = 1e9 / rate
    return nanoseconds >= 1000 ? String(format: "%.1f µs", nanoseconds / 1000) : String(format: "%.0f ns", nanoseconds)
}

func formatPercent(_ fraction: Double) -> String { String(format: "%.1f %%", fraction * 100) }

/// One Markdown table row, padded so the raw output is readable too.
func row(_ cells: [String], widths: [Int]) -> String {
    "| " + zip(cells, widths).map { $0.padding(toLength: max($1, $0.count), withPad: " ", startingAt: 0) }.joined(separator: " | ") + " |"
}

func separator(_ widths: [Int]) -> String { row(widths.map { String(repeating: "-", count: $0) }, widths: widths) }
