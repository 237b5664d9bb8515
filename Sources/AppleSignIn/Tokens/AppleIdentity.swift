import Foundation

/// What a verified identity token asserts about the user.
public struct AppleIdentity: Sendable, Hashable, Codable {
    /// Stable user id for this team (`sub`).
    public var subject: String
    /// The `client_id` the token was issued to.
    public var audience: String
    /// Who issued the token.
    public var issuer: String
    /// When the token was issued.
    public var issuedAt: Date
    /// When the token expires.
    public var expiresAt: Date
    /// When the user authenticated, if stated.
    public var authTime: Date?
    /// The email (real or relay), if shared.
    public var email: String?
    /// Whether Apple verified the email.
    public var emailVerified: Bool?
    /// Whether the email is a private relay address.
    public var isPrivateEmail: Bool?
    /// Whether the device supports nonces.
    public var nonceSupported: Bool?
    /// The nonce in the token, if any.
    public var nonce: String?
    /// 0 unsupported, 1 unknown, 2 likely real (native apps only).
    public var realUserStatus: Int?
    /// The user's `sub` under the previous team, during a team transfer.
    public var transferSubject: String?
    /// The organisation id for managed Apple IDs, if present.
    public var organizationID: String?

    enum CodingKeys: String, CodingKey {
        case subject = "sub", audience = "aud", issuer = "iss", issuedAt = "iat", expiresAt = "exp", authTime = "auth_time"
        case email, emailVerified = "email_verified", isPrivateEmail = "is_private_email", nonceSupported = "nonce_supported"
        case nonce, realUserStatus = "real_user_status", transferSubject = "transfer_sub", organizationID = "org_id"
    }
}
