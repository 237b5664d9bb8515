/// A configuration value that cannot work: names the field and says what a valid one looks like.
public struct ConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The configuration field at fault, e.g. `team_id`.
    public let field: String
    /// What is wrong and what a valid value looks like.
    public let message: String

    /// Creates an error for `field`.
    public init(field: String, _ message: String) {
        self.field = field
        self.message = message
    }

    public var description: String { "\(field): \(message)" }
}
