import Foundation

/// A relying party of siwa's OpenID Provider.
public struct ProviderClientRecord: Sendable, Hashable {
    /// The `client_id` (the name it was registered under).
    public var clientID: String
    /// Lowercase hex SHA-256 of the client secret; nil for a public client.
    public var secretHash: String?
    /// Where authorization responses may go, compared exactly.
    public var redirectURIs: [String]
    /// Where the end-session endpoint may send the browser afterwards, compared exactly.
    public var postLogoutRedirectURIs: [String]
    /// Scopes the client may ask for; empty means openid, email, profile.
    public var scopes: [String]
    /// A client that cannot keep a secret (PKCE required).
    public var isPublic: Bool
    /// "RS256" (default) or "ES256".
    public var idTokenAlgorithm: String
    /// Whether `sub` is pairwise for this client.
    public var pairwiseSubject: Bool
    /// When it was registered.
    public var createdAt: Date
    /// The groups whose members it may sign in (`--allowed-group`, `allowed_groups`); empty: anyone.
    public var allowedGroups: [String]
    /// Where siwa posts a Logout Token when a session it issued tokens in ends (Back-Channel Logout 1.0).
    public var backchannelLogoutURI: String?
    /// Whether the authorization endpoint's error responses carry `iss` as its others do (RFC 9207, the default);
    /// false for mod_auth_openidc, which takes any response with `iss` for a sign-in the provider started
    /// (`--no-iss-in-errors`, `"iss_in_errors": false`).
    public var issInErrors: Bool = true
    /// Whether it may start the device flow (RFC 8628) at `/oauth2/device_authorization` (`--device`, `"device": true`):
    /// a command line that shows a code the person enters at `/auth/device`.
    public var deviceFlow: Bool = false
    /// A service (`--service`): a confidential client that gets `client_credentials` tokens naming itself
    /// (`service:<client_id>`), never a person, with the groups it was registered in.
    public var isService: Bool = false
    /// The secret replaced by `siwa oidc rotate-secret`, still accepted until `previousSecretUntil`.
    public var previousSecretHash: String? = nil
    public var previousSecretUntil: Date? = nil

    /// The subject a service's tokens carry (`X-Auth-Request-User`, the assertion's `sub`): never an Apple sub.
    public var serviceSubject: String { ServiceIdentity.prefix + clientID }

    /// A client as registered; only the id, the redirect URIs and the time have no default.
    public init(
        clientID: String,
        secretHash: String? = nil,
        redirectURIs: [String],
        postLogoutRedirectURIs: [String] = [],
        scopes: [String] = [],
        isPublic: Bool = false,
        idTokenAlgorithm: String = "RS256",
        pairwiseSubject: Bool = false,
        createdAt: Date,
        allowedGroups: [String] = [],
        backchannelLogoutURI: String? = nil
    ) {
        self.backchannelLogoutURI = backchannelLogoutURI
        self.clientID = clientID
        self.secretHash = secretHash
        self.redirectURIs = redirectURIs
        self.postLogoutRedirectURIs = postLogoutRedirectURIs
        self.scopes = scopes
        self.isPublic = isPublic
        self.idTokenAlgorithm = idTokenAlgorithm
        self.pairwiseSubject = pairwiseSubject
        self.createdAt = createdAt
        self.allowedGroups = allowedGroups
    }
}

/// An authorization code the provider issued: kept until it expires, redeemed once.
public struct AuthorizationCodeRecord: Sendable, Hashable {
    /// SHA-256 (hex) of the code; the code itself is never stored.
    public var codeHash: String
    /// The client it was issued to.
    public var clientID: String
    /// The `redirect_uri` of the authorization request, which the token request must repeat.
    public var redirectURI: String
    /// The person (Apple's `sub`).
    public var subject: String
    /// Granted scopes, space-separated.
    public var scope: String
    /// The client's `nonce`, echoed in the id_token.
    public var nonce: String?
    /// PKCE S256 challenge.
    public var codeChallenge: String?
    /// When the person last authenticated with Apple (`auth_time`).
    public var authTime: Date
    /// When it was issued.
    public var createdAt: Date
    /// When it stops being redeemable.
    public var expiresAt: Date
    /// The public id of the siwa session it was issued in (`SessionRecord.publicID`, the id_token's `sid`).
    public var sessionID: String?

    /// A code as the authorization endpoint issues it.
    public init(
        codeHash: String, clientID: String, redirectURI: String, subject: String, scope: String, nonce: String? = nil,
        codeChallenge: String? = nil, authTime: Date, createdAt: Date, expiresAt: Date, sessionID: String? = nil
    ) {
        self.sessionID = sessionID
        self.codeHash = codeHash
        self.clientID = clientID
        self.redirectURI = redirectURI
        self.subject = subject
        self.scope = scope
        self.nonce = nonce
        self.codeChallenge = codeChallenge
        self.authTime = authTime
        self.createdAt = createdAt
        self.expiresAt = expiresAt
    }
}

/// What presenting an authorization code did.
public enum CodeRedemption: Sendable, Hashable {
    /// First use of a live code: it is now used.
    case redeemed(AuthorizationCodeRecord)
    /// The code was used before: every token issued from it is now revoked.
    case replayed(AuthorizationCodeRecord)
    /// Never used, but too late.
    case expired
    /// Not a code of ours (or one revoked with its person's or client's tokens, or swept after expiry).
    case unknown
}

/// An access or refresh token the provider issued. The token itself is never stored, only its SHA-256.
public struct ProviderTokenRecord: Sendable, Hashable {
    /// Which kind of token.
    public enum Kind: String, Sendable {
        /// Opaque bearer token for userinfo.
        case access
        /// Rotated on every use.
        case refresh
    }

    /// SHA-256 (hex) of the token.
    public var tokenHash: String
    /// Access or refresh.
    public var kind: Kind
    /// The client it was issued to.
    public var clientID: String
    /// The person (Apple's `sub`).
    public var subject: String
    /// Granted scopes, space-separated.
    public var scope: String
    /// When the person last authenticated with Apple (`auth_time`).
    public var authTime: Date
    /// Every token of one grant (the code exchange and every refresh after it) shares the family id.
    public var familyID: String
    /// The code hash the family began with (a replayed code revokes the family).
    public var codeHash: String?
    /// When it was issued.
    public var createdAt: Date
    /// When it stops being accepted.
    public var expiresAt: Date
    /// The public id of the siwa session its grant began in (`sid`), nil for tokens from before it was kept.
    public var sessionID: String?

    /// A token as the token endpoint issues it.
    public init(
        tokenHash: String, kind: Kind, clientID: String, subject: String, scope: String, authTime: Date, familyID: String,
        codeHash: String? = nil, createdAt: Date, expiresAt: Date, sessionID: String? = nil
    ) {
        self.sessionID = sessionID
        self.tokenHash = tokenHash
        self.kind = kind
        self.clientID = clientID
        self.subject = subject
        self.scope = scope
        self.authTime = authTime
        self.familyID = familyID
        self.codeHash = codeHash
        self.createdAt = createdAt
        self.expiresAt = expiresAt
    }
}

/// What presenting a refresh token did.
public enum RefreshRedemption: Sendable, Hashable {
    /// A live, unused refresh token: it is now used (issue its successor in the same family).
    case redeemed(ProviderTokenRecord)
    /// Used before (or revoked because its family was): its whole family is now revoked.
    case reused(ProviderTokenRecord)
    /// Not a live refresh token of ours: unknown, expired, or revoked by its client or with its person's tokens.
    case unknown
}

/// How a service presents itself at the door.
public enum ServiceIdentity {
    /// `service:` and the client id: a group member `sub:service:<client_id>` names the service.
    public static let prefix = "service:"

    /// The identity a service's access token stands for: no email, no name.
    static func user(_ subject: String, since: Date) -> UserRecord {
        UserRecord(subject: subject, email: nil, isPrivateEmail: false, firstName: nil, lastName: nil, createdAt: since, lastSignInAt: since)
    }
}
