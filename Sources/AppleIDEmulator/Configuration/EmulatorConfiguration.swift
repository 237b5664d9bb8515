import Foundation

/// What the emulator knows: registered clients and test users, and how it issues tokens.
/// Loaded from a JSON file (`siwa emulator --config FILE`); `siwa emulator --print-config` shows the defaults.
public struct EmulatorConfiguration: Codable, Sendable, Hashable {
    /// A registered Services ID or bundle ID.
    public struct Client: Codable, Sendable, Hashable {
        /// The `client_id`.
        public var clientID: String
        /// The Team ID that must sign its client secrets (`iss`).
        public var teamID: String
        /// The Key ID expected in the client secret header.
        public var keyID: String
        /// The P-256 public key (PEM) that verifies its client secrets.
        public var publicKeyPEM: String
        /// The private key (PEM), present only for the built-in test client so developers can sign secrets.
        public var privateKeyPEM: String?
        /// Return URLs, matched exactly.
        public var redirectURIs: [String]
        /// Where server-to-server notifications go, if anywhere.
        public var notificationURL: String?
        /// Whether Sign in with Apple is enabled for it (false → `unauthorized_client`).
        public var enabled: Bool

        /// Creates a client registration.
        public init(clientID: String, teamID: String, keyID: String, publicKeyPEM: String, privateKeyPEM: String? = nil, redirectURIs: [String], notificationURL: String? = nil, enabled: Bool = true) {
            self.clientID = clientID
            self.teamID = teamID
            self.keyID = keyID
            self.publicKeyPEM = publicKeyPEM
            self.privateKeyPEM = privateKeyPEM
            self.redirectURIs = redirectURIs
            self.notificationURL = notificationURL
            self.enabled = enabled
        }
    }

    /// A test user offered on the consent page.
    public struct User: Codable, Sendable, Hashable {
        /// Stable user id, Apple's format.
        public var sub: String
        /// Given name.
        public var firstName: String
        /// Family name.
        public var lastName: String
        /// The real address.
        public var email: String
        /// The private relay address used when the user hides their email.
        public var relayEmail: String

        /// Creates a test user.
        public init(sub: String, firstName: String, lastName: String, email: String, relayEmail: String) {
            self.sub = sub
            self.firstName = firstName
            self.lastName = lastName
            self.email = email
            self.relayEmail = relayEmail
        }
    }

    /// Apple's issuer, the `iss` of everything the emulator signs unless `issuer` says otherwise.
    public static let appleIssuer = "https://appleid.apple.com"
    /// The value of `issuer` that makes the emulator sign with its own base URL as `iss`.
    public static let ownURLIssuer = "self"

    /// The `iss` of what it signs: Apple's (nil, the default), any fixed string, or `"self"` for its own base URL.
    public var issuer: String?
    /// Lifetime of identity tokens in seconds (Apple's: a day since about 2021).
    public var idTokenLifetime: Int
    /// Lifetime of authorization codes in seconds (Apple: five minutes).
    public var codeLifetime: Int
    /// `max-age` sent with the key set.
    public var keySetMaxAge: Int
    /// How long after `POST /emulator/admin/keys/rotate` the new key starts signing; until then it is only published.
    public var keyActivationLead: Int
    /// How long a key stays published after a newer key took over its signing.
    public var retiredKeyGrace: Int
    /// Registered clients.
    public var clients: [Client]
    /// Test users.
    public var users: [User]

    /// Creates a configuration.
    public init(
        issuer: String? = nil, idTokenLifetime: Int = 86_400, codeLifetime: Int = 300, keySetMaxAge: Int = 300,
        keyActivationLead: Int = 300, retiredKeyGrace: Int = 2 * 86_400, clients: [Client], users: [User]
    ) {
        self.issuer = issuer
        self.idTokenLifetime = idTokenLifetime
        self.codeLifetime = codeLifetime
        self.keySetMaxAge = keySetMaxAge
        self.keyActivationLead = keyActivationLead
        self.retiredKeyGrace = retiredKeyGrace
        self.clients = clients
        self.users = users
    }

    enum CodingKeys: String, CodingKey {
        case issuer, idTokenLifetime, codeLifetime, keySetMaxAge, keyActivationLead, retiredKeyGrace, clients, users
    }

    /// Reads a configuration file; keys left out take their defaults (files written before a key existed still load).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let defaults = EmulatorConfiguration(clients: [], users: [])
        issuer = try container.decodeIfPresent(String.self, forKey: .issuer)
        idTokenLifetime = try container.decodeIfPresent(Int.self, forKey: .idTokenLifetime) ?? defaults.idTokenLifetime
        codeLifetime = try container.decodeIfPresent(Int.self, forKey: .codeLifetime) ?? defaults.codeLifetime
        keySetMaxAge = try container.decodeIfPresent(Int.self, forKey: .keySetMaxAge) ?? defaults.keySetMaxAge
        keyActivationLead = try container.decodeIfPresent(Int.self, forKey: .keyActivationLead) ?? defaults.keyActivationLead
        retiredKeyGrace = try container.decodeIfPresent(Int.self, forKey: .retiredKeyGrace) ?? defaults.retiredKeyGrace
        clients = try container.decode([Client].self, forKey: .clients)
        users = try container.decode([User].self, forKey: .users)
    }

    /// Team ID of the built-in test clients.
    public static let testTeamID = "EMU0TEAM01"
    /// Key ID of the built-in test clients.
    public static let testKeyID = "EMU0KEY001"
    /// Services ID of the built-in web client.
    public static let testServicesID = "com.example.siwa.web"
    /// Bundle ID of the built-in native app client.
    public static let testBundleID = "com.example.siwa.app"
    /// The built-in test clients' private key. Public on purpose: it only ever signs secrets for the emulator.
    public static let testPrivateKeyPEM = """
        -----BEGIN PRIVATE KEY-----
        MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgN5B7ZEbAyO+SPpPA
        anDnFaOPoBK2lilDaWu8rjvDL62hRANCAARJpUAcu9TQkZldX4xZfyAd3coCzOWi
        GBmCRc/2RbwwwCGUEUCdyhFUvLC7+HHSMzkZPNGziCNMiMeL+QqXO+6i
        -----END PRIVATE KEY-----
        """
    /// Its public key.
    public static let testPublicKeyPEM = """
        -----BEGIN PUBLIC KEY-----
        MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAESaVAHLvU0JGZXV+MWX8gHd3KAszl
        ohgZgkXP9kW8MMAhlBFAncoRVLywu/hx0jM5GTzRs4gjTIjHi/kKlzvuog==
        -----END PUBLIC KEY-----
        """

    /// The defaults: a web client whose return URLs are the local server's callback on common ports,
    /// a native app client, and three test users.
    public static func defaults(redirectURIs: [String] = ["http://127.0.0.1:8080/auth/apple/callback", "http://localhost:8080/auth/apple/callback"], notificationURL: String? = "http://127.0.0.1:8080/auth/apple/notifications") -> EmulatorConfiguration {
        EmulatorConfiguration(
            clients: [
                Client(clientID: testServicesID, teamID: testTeamID, keyID: testKeyID, publicKeyPEM: testPublicKeyPEM, privateKeyPEM: testPrivateKeyPEM, redirectURIs: redirectURIs, notificationURL: notificationURL),
                Client(clientID: testBundleID, teamID: testTeamID, keyID: testKeyID, publicKeyPEM: testPublicKeyPEM, privateKeyPEM: testPrivateKeyPEM, redirectURIs: [], notificationURL: notificationURL),
            ],
            users: [
                User(sub: "000123.a1b2c3d4e5f60718293a4b5c6d7e8f90.1234", firstName: "Ada", lastName: "Lovelace", email: "ada@example.com", relayEmail: "x7kq2m9p4t@privaterelay.appleid.com"),
                User(sub: "000456.0f1e2d3c4b5a69788796a5b4c3d2e1f0.5678", firstName: "李", lastName: "雷", email: "lilei@example.cn", relayEmail: "r3v8n1c6w2@privaterelay.appleid.com"),
                User(sub: "000789.9a8b7c6d5e4f30211203f4e5d6c7b8a9.9012", firstName: "Grace", lastName: "Hopper", email: "grace@example.org", relayEmail: "h5d2j9g4s7@privaterelay.appleid.com"),
            ]
        )
    }
}
