import Foundation

/// A verified server-to-server notification (APPLE.md §7).
public struct AppleNotification: Sendable, Hashable, Codable {
    /// What happened at Apple's end.
    public enum EventType: Sendable, Hashable, Codable, CustomStringConvertible {
        /// The user turned off forwarding to their relay address.
        case emailDisabled
        /// The user turned forwarding back on.
        case emailEnabled
        /// The user stopped using Sign in with Apple with this app.
        case consentRevoked
        /// The user deleted their Apple ID.
        case accountDelete
        /// A type this version does not know, kept as sent.
        case unknown(String)

        /// Parses Apple's type string.
        public init(rawValue: String) {
            switch rawValue {
            case "email-disabled": self = .emailDisabled
            case "email-enabled": self = .emailEnabled
            case "consent-revoked": self = .consentRevoked
            case "account-delete": self = .accountDelete
            default: self = .unknown(rawValue)
            }
        }

        /// Apple's type string.
        public var rawValue: String {
            switch self {
            case .emailDisabled: "email-disabled"
            case .emailEnabled: "email-enabled"
            case .consentRevoked: "consent-revoked"
            case .accountDelete: "account-delete"
            case .unknown(let text): text
            }
        }

        public var description: String { rawValue }

        public init(from decoder: any Decoder) throws {
            self.init(rawValue: try decoder.singleValueContainer().decode(String.self))
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(rawValue)
        }
    }

    /// One event.
    public struct Event: Sendable, Hashable, Codable {
        /// The event type.
        public var type: EventType
        /// The user concerned.
        public var subject: String
        /// When it happened (Apple sends milliseconds).
        public var eventTime: Date
        /// The relay address concerned, for email events.
        public var email: String?
        /// Whether `email` is a relay address.
        public var isPrivateEmail: Bool?

        enum CodingKeys: String, CodingKey {
            case type, subject = "sub", eventTime = "event_time", email, isPrivateEmail = "is_private_email"
        }
    }

    /// Unique id of this delivery; repeated deliveries carry the same one.
    public var id: String
    /// The `client_id` it is for.
    public var audience: String
    /// When Apple signed it.
    public var issuedAt: Date
    /// The event.
    public var event: Event

    enum CodingKeys: String, CodingKey {
        case id = "jti", audience = "aud", issuedAt = "iat", event = "events"
    }
}
