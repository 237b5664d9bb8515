import Foundation

extension Duration {
    /// This duration in seconds, fractions included (for `Date` arithmetic and rates).
    var timeInterval: TimeInterval {
        TimeInterval(components.seconds) + TimeInterval(components.attoseconds) / 1e18
    }
}
