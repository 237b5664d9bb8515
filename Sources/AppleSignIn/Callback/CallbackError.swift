/// Why Apple's return (form body or query string) could not be read.
public struct CallbackError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kinds of malformed return.
    public struct Reason: Sendable, Hashable, CustomStringConvertible {
        let rawValue: String
        /// The body is larger than 64 KiB.
        public static let bodyTooLarge = Reason(rawValue: "body_too_large")
        /// One field is larger than its bound.
        public static let fieldTooLarge = Reason(rawValue: "field_too_large")
        /// A parameter appears twice.
        public static let duplicateParameter = Reason(rawValue: "duplicate_parameter")
        /// A byte sequence is not UTF-8 after percent-decoding.
        public static let notUTF8 = Reason(rawValue: "not_utf8")
        /// A `%` not followed by two hex digits.
        public static let badEncoding = Reason(rawValue: "bad_encoding")
        /// The `user` field is not the JSON Apple sends.
        public static let malformedUser = Reason(rawValue: "malformed_user")
        /// Neither a result (`code`) nor an `error` is present, or `state` is missing.
        public static let missingField = Reason(rawValue: "missing_field")
        public var description: String { rawValue }
    }

    /// What kind of malformation.
    public let reason: Reason
    /// The field concerned, if any.
    public let field: String?
    /// A sentence for logs.
    public let message: String

    public var description: String { message }
}
