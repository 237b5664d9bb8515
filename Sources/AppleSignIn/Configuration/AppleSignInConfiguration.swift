import Foundation

/// Everything the core needs to talk to Apple for one website: who we are, where Apple is, whom we trust.
public struct AppleSignInConfiguration: Sendable {
    /// Apple's production base URL.
    public static let appleBaseURL = "https://appleid.apple.com"
    /// The longest client secret lifetime Apple accepts (six months).
    public static let maximumClientSecretLifetime: TimeInterval = 15_777_000

    /// Issuer of client secrets.
    public var teamID: TeamID
    /// Names the `.p8` key in the client secret header.
    public var keyID: KeyID
    /// The web `client_id`.
    public var servicesID: ClientID
    /// Bundle IDs of native apps whose identity tokens this server also accepts.
    public var extraAudiences: [ClientID]
    /// The registered return URLs, exactly as in the developer portal.
    public var returnURLs: [URL]
    /// The key that signs client secrets.
    public var signingKey: SigningKey
    /// Where `/auth/authorize`, `/auth/token`, `/auth/keys` and `/auth/revoke` live.
    public var appleBaseURL: URL
    /// Where the browser is sent for `/auth/authorize`: `appleBaseURL`, unless an emulator on this machine is reached
    /// by browsers under another loopback name than the server uses (local mode behind `public_url`).
    public var authorizeBaseURL: URL
    /// Accepted `iss` values of identity tokens and notifications.
    public var acceptedIssuers: [String]
    /// How long a signed client secret is valid.
    public var clientSecretLifetime: TimeInterval
    /// `client_secret_lifetime`'s default in seconds (a day), the one place it is written.
    public static let defaultClientSecretLifetime = 86_400

    /// Every `client_id` whose tokens we accept: the Services ID first, then the extra audiences.
    public var audiences: [ClientID] { [servicesID] + extraAudiences }

    /// True when talking to the real appleid.apple.com rather than an emulator.
    public var isApple: Bool { appleBaseURL.host == "appleid.apple.com" }

    /// Validates every value, throwing an error that names the first field at fault.
    public init(
        teamID: String,
        keyID: String,
        servicesID: String,
        extraAudiences: [String] = [],
        returnURLs: [String],
        privateKeyPEM: String,
        appleBaseURL: String = AppleSignInConfiguration.appleBaseURL,
        acceptedIssuers: [String]? = nil,
        clientSecretLifetime: TimeInterval = TimeInterval(AppleSignInConfiguration.defaultClientSecretLifetime)
    ) throws(ConfigurationError) {
        self.teamID = try TeamID(teamID)
        self.keyID = try KeyID(keyID)
        self.servicesID = try ClientID(servicesID)
        var audiences: [ClientID] = []
        for audience in extraAudiences {
            audiences.append(try ClientID(audience, field: "extra_audiences"))
        }
        self.extraAudiences = audiences
        self.signingKey = try SigningKey(pem: privateKeyPEM)

        guard let base = URL(string: appleBaseURL), let scheme = base.scheme, ["http", "https"].contains(scheme), base.host != nil
        else {
            throw ConfigurationError(field: "apple_base_url", "must be an absolute http(s) URL such as https://appleid.apple.com, got \"\(appleBaseURL)\"")
        }
        if base.host == "appleid.apple.com" && scheme != "https" {
            throw ConfigurationError(field: "apple_base_url", "must use https for appleid.apple.com")
        }
        self.appleBaseURL = base
        authorizeBaseURL = base

        guard !returnURLs.isEmpty else {
            throw ConfigurationError(field: "return_urls", "needs at least one return URL, exactly as registered on the Services ID, e.g. https://example.com/auth/apple/callback")
        }
        let requireApplesRules = base.host == "appleid.apple.com"
        self.returnURLs = try returnURLs.map { text throws(ConfigurationError) in
            try ReturnURL.parse(text, requireApplesRules: requireApplesRules)
        }

        // Apple's issuer wherever Apple is: an emulator signs with it too, as Apple does (never taken from discovery).
        let issuers = acceptedIssuers ?? [Self.appleBaseURL]
        guard !issuers.isEmpty, issuers.allSatisfy({ !$0.isEmpty }) else {
            throw ConfigurationError(field: "accepted_issuers", "needs at least one issuer, normally https://appleid.apple.com")
        }
        self.acceptedIssuers = issuers

        guard clientSecretLifetime >= 60, clientSecretLifetime <= Self.maximumClientSecretLifetime else {
            throw ConfigurationError(
                field: "client_secret_lifetime",
                "must be between 60 and 15777000 seconds (six months, Apple's limit), got \(Int(clientSecretLifetime))"
            )
        }
        self.clientSecretLifetime = clientSecretLifetime
    }

    /// The base URL as an issuer string: no trailing slash.
    static func trimmedBase(_ text: String) -> String {
        var base = text
        while base.hasSuffix("/") { base.removeLast() }
        return base
    }

    /// The URL of an endpoint under Apple's base URL, e.g. `/auth/token`.
    public func endpoint(_ path: String) -> URL {
        URL(string: Self.trimmedBase(appleBaseURL.absoluteString) + path) ?? appleBaseURL
    }
}

/// Rules for return URLs (APPLE.md "Parties and identifiers").
public enum ReturnURL {
    /// Parses a return URL. With Apple's rules: HTTPS, a domain name (no IP address, no `localhost`), no fragment.
    /// Without them (an emulator on loopback): http or https, still no fragment.
    public static func parse(_ text: String, requireApplesRules: Bool, field: String = "return_urls") throws(ConfigurationError) -> URL {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty else {
            throw ConfigurationError(field: field, "\"\(text)\" is not an absolute URL; write it exactly as registered, e.g. https://example.com/auth/apple/callback")
        }
        if url.fragment != nil || text.contains("#") {
            throw ConfigurationError(field: field, "\"\(text)\" has a fragment (#…); Apple refuses return URLs with fragments")
        }
        if requireApplesRules {
            if scheme != "https" {
                throw ConfigurationError(field: field, "\"\(text)\" must use https; Apple accepts only HTTPS return URLs")
            }
            if isLocalOrIP(host) {
                throw ConfigurationError(field: field, "\"\(text)\" names \(host); Apple accepts only a domain name (no IP address, no localhost) — use a real domain or run in local mode with the emulator")
            }
        } else if scheme != "http" && scheme != "https" {
            throw ConfigurationError(field: field, "\"\(text)\" must use http or https")
        }
        return url
    }

    /// True for `localhost` and for IPv4/IPv6 literals.
    public static func isLocalOrIP(_ host: String) -> Bool {
        let lowered = host.lowercased()
        if lowered == "localhost" || lowered.hasSuffix(".localhost") { return true }
        if lowered.contains(":") || lowered.hasPrefix("[") { return true }
        let parts = lowered.split(separator: ".")
        return parts.count == 4 && parts.allSatisfy { UInt8($0) != nil }
    }
}
