import Foundation

/// A sign-in started at `/auth/apple` and not yet completed: kept server-side, consumed once.
public struct PendingAuthorization: Sendable, Hashable {
    /// The `state` sent to Apple (the key).
    public var state: String
    /// The `nonce` sent to Apple.
    public var nonce: String
    /// Where to go after signing in (a relative path).
    public var returnTo: String
    /// SHA-256 (hex) of the binding cookie set in the browser that started the sign-in.
    public var bindingHash: String
    /// When it was created.
    public var createdAt: Date
    /// When it stops being usable (10 minutes after creation).
    public var expiresAt: Date
    /// SHA-256 (hex) of the invitation's token when the sign-in was started from an invitation's page: used for the
    /// person once Apple says who they are.
    public var invitationHash: String? = nil
}

/// A person known by their Apple `sub`.
public struct UserRecord: Sendable, Hashable {
    /// The `users` columns both stores read a user from, in the order they decode them (by position: cheaper
    /// than by name on the session page's hot path); `joinedColumns` qualifies them for a join on `users u`.
    static let columns = columnList(prefix: "")
    static let joinedColumns = columnList(prefix: "u.")

    private static func columnList(prefix: String) -> String {
        ["sub", "email", "is_private_email", "first_name", "last_name", "created_at", "last_sign_in_at", "email_forwarding_disabled", "link_revoked_at"]
            .map { prefix + $0 }.joined(separator: ", ")
    }

    /// Apple's stable user id.
    public var subject: String
    /// Email from the first `user` field or the identity token.
    public var email: String?
    /// Whether `email` is a private relay address.
    public var isPrivateEmail: Bool
    /// Given name from the first sign-in.
    public var firstName: String?
    /// Family name from the first sign-in.
    public var lastName: String?
    /// First sign-in.
    public var createdAt: Date
    /// Latest sign-in.
    public var lastSignInAt: Date
    /// True after an `email-disabled` notification (relay forwarding off), false after `email-enabled`.
    public var emailForwardingDisabled: Bool = false
    /// When the user stopped using Sign in with Apple with us (`consent-revoked`, or a refresh check failing).
    public var linkRevokedAt: Date?

    /// "First Last", or whichever exists.
    public var displayName: String? {
        let parts = [firstName, lastName].compactMap { $0 }
        return parts.isEmpty ? nil : parts.joined(separator: " ")
    }
}

/// A signed-in browser. The id itself is never stored, only its SHA-256.
public struct SessionRecord: Sendable, Hashable {
    /// SHA-256 (hex) of the session id in the cookie.
    public var idHash: String
    /// The user.
    public var subject: String
    /// The token sign-out and other forms must carry.
    public var csrfToken: String
    /// When the user signed in.
    public var createdAt: Date
    /// When the session ends.
    public var expiresAt: Date
    /// How the session came and from where, for the person's sessions page and the console (issue 28).
    public var details: SessionDetails? = nil
    /// When the session was last used, to the minute (`SessionCache` notes, `SessionTouches` writes); nil until then.
    public var lastUsedAt: Date? = nil
    /// How the session began, as a session look-up reads it (`SessionDetails.via`: `page`, `client:<id>`,
    /// `native:<bundle ID>`); `token:<client_id>` for an access token read as a session (`accessToken(hash:)`).
    public var via: String? = nil
    /// For an access token read as a session: the public id of the session its grant began in (it ends with it).
    public var parentSID: String? = nil

    /// Apple's `auth_time` for this session (from the token that began it, or a native app's renewal), when known.
    public var authTime: Date? = nil

    /// When the person last authenticated with Apple for this session: Apple's `auth_time` where its token carried one,
    /// else when siwa verified Apple's token and began it (a sign-in again begins a new session in its place,
    /// `SignInCompletion`; a native app renews its own, `NativeSignIn.renew`). What `max_auth_age` measures.
    public var authenticatedAt: Date { authTime ?? createdAt }

    /// The client that holds this session as a bearer token: a native app's bundle ID, or the OpenID client an
    /// access token was issued to; nil for a browser's session, which is no bearer token.
    /// Read from `via`'s bytes in place (every bearer token's request asks, twice): the same as
    /// `bearerClientSpelledOut`.
    public var bearerClient: String? {
        guard let via else { return nil }
        switch Self.viaPrefix(via) {
        case .native: return Self.client(of: via, after: Self.native)
        case .token: return Self.client(of: via, after: Self.token)
        case .other: return nil
        case .spelledOut: return bearerClientSpelledOut
        }
    }

    /// What follows `prefix` (which `via` begins with, byte for byte) in `via`.
    private static func client(of via: String, after prefix: StaticString) -> String {
        var via = via
        return via.withUTF8 { String(decoding: UnsafeBufferPointer(rebasing: $0[prefix.utf8CodeUnitCount...]), as: UTF8.self) }
    }

    /// `bearerClient` as first written, by `String`'s `hasPrefix` and `dropFirst` (characters, not bytes).
    var bearerClientSpelledOut: String? {
        guard let via else { return nil }
        if via.hasPrefix("native:") { return String(via.dropFirst(7)) }
        if via.hasPrefix("token:") { return String(via.dropFirst(6)) }
        return nil
    }

    /// Whether this is an access token's record, not a session a cookie or a native app holds.
    public var isAccessToken: Bool {
        guard let via else { return false }
        switch Self.viaPrefix(via) {
        case .token: return true
        case .native, .other: return false
        case .spelledOut: return via.hasPrefix("token:")
        }
    }

    private enum ViaPrefix { case native, token, other, spelledOut }
    private static let native: StaticString = "native:"
    private static let token: StaticString = "token:"

    /// What `via` begins with, read from its bytes in place: `native:` or `token:` followed by an ASCII byte or
    /// nothing (a byte past ASCII could be a mark that joins the colon into another character, which `hasPrefix` would
    /// not match: `spelledOut` then), or neither (`spelledOut` too when a byte past ASCII could spell either otherwise).
    private static func viaPrefix(_ via: String) -> ViaPrefix {
        var via = via
        return via.withUTF8 { bytes in
            /// `prefix`'s kind when `bytes` begin with it, nil when they do not.
            func begins(with prefix: StaticString, _ kind: ViaPrefix) -> ViaPrefix? {
                let count = prefix.utf8CodeUnitCount
                guard bytes.count >= count, let base = bytes.baseAddress, memcmp(base, prefix.utf8Start, count) == 0 else { return nil }
                return bytes.count == count || bytes[count] < 0x80 ? kind : .spelledOut
            }
            return begins(with: native, .native) ?? begins(with: token, .token) ?? (bytes.contains { $0 >= 0x80 } ? .spelledOut : .other)
        }
    }

    /// The session's public id (`sid` in id_tokens and Logout Tokens, the sessions page's and console's handle):
    /// derived from the stored hash by a second, labelled hash, so it names the session without revealing the
    /// cookie or the stored hash.
    public var publicID: String { Self.publicID(idHash: idHash) }

    public static func publicID(idHash: String) -> String {
        String(SessionCookie.digest("siwa-sid:" + idHash).prefix(32))
    }
}

/// The result of a sign-in to store in one transaction.
public struct CompletedSignIn: Sendable {
    /// Apple's user id.
    public var subject: String
    /// Email asserted by the identity token (or the first-time `user` field).
    public var email: String?
    /// Whether it is a relay address.
    public var isPrivateEmail: Bool
    /// Names from the first-time `user` field, if sent.
    public var firstName: String?
    /// Names from the first-time `user` field, if sent.
    public var lastName: String?
    /// Apple's refresh token, if one was returned.
    public var refreshToken: String?
    /// The client the token belongs to.
    public var clientID: String
    /// `transfer_sub` from the identity token, during a team transfer.
    public var transferSubject: String?
    /// The new session.
    public var session: SessionRecord
    /// Now.
    public var at: Date
}

extension CompletedSignIn {
    /// Whether an email is a private relay address: as the token asserts, else by Apple's relay domain.
    static func isPrivate(email: String?, asserted: Bool?) -> Bool {
        asserted ?? (email?.hasSuffix("@privaterelay.appleid.com") ?? false)
    }
}

/// A stored refresh token due for its daily check, claimed by one instance.
public struct RefreshCheck: Sendable, Hashable {
    /// The user.
    public var subject: String
    /// The client the token was issued to.
    public var clientID: String
    /// The token (decrypted).
    public var token: String
}

/// A revocation Apple could not be told about yet.
public struct PendingRevocation: Sendable, Hashable {
    /// Row id.
    public var id: Int64
    /// The client the token was issued to.
    public var clientID: String
    /// The token to revoke.
    public var token: String
    /// Attempts so far.
    public var attempts: Int
}

/// What a notification did, for the log and the answer.
public enum NotificationOutcome: String, Sendable {
    /// Applied now.
    case applied
    /// Already received (same `jti`): nothing done again.
    case duplicate
    /// An event type we do not act on: recorded only.
    case recorded
}

/// One of siwa's signing keys (ES256 for the front's assertions, RS256 or ES256 for the provider's id_tokens):
/// published from creation, used from `activatesAt`, published until `retiresAt` (nil: not retiring).
public struct SigningKeyRecord: Sendable, Hashable {
    public var kid: String
    /// PKCS#8 PEM of the private key (sealed in the store).
    public var privateKeyPEM: String
    public var createdAt: Date
    public var activatesAt: Date
    public var retiresAt: Date?
    /// The JWS algorithm the key signs with: "ES256" (a P-256 key) or "RS256" (an RSA key).
    public var algorithm: String

    /// A key as created; ES256 unless said otherwise.
    public init(kid: String, privateKeyPEM: String, createdAt: Date, activatesAt: Date, retiresAt: Date? = nil, algorithm: String = "ES256") {
        self.kid = kid
        self.privateKeyPEM = privateKeyPEM
        self.createdAt = createdAt
        self.activatesAt = activatesAt
        self.retiresAt = retiresAt
        self.algorithm = algorithm
    }
}

extension SigningKeyRecord {
    /// Whether the key is in the published key set at `date`: until it retires.
    public func isPublished(at date: Date) -> Bool {
        retiresAt.map { $0 > date } ?? true
    }

    /// Whether the key may sign at `date`: active and not retired.
    public func canSign(at date: Date) -> Bool {
        activatesAt <= date && isPublished(at: date)
    }
}

/// What a person sees of one of their sessions besides its times: the browser and system in words (from the
/// `User-Agent`, read once at sign-in), the network (the address with its last part masked) and how it came.
public struct SessionDetails: Sendable, Hashable {
    /// `Chrome on macOS`.
    public var device: String
    /// `203.0.113.x`.
    public var network: String
    /// `page` (the sign-in page), `client:<client_id>` (an OpenID client's sign-in), `native` (an app).
    public var via: String

    public init(device: String, network: String, via: String) {
        self.device = device
        self.network = network
        self.via = via
    }
}
