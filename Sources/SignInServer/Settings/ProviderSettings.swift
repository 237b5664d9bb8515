import AppleSignIn
import Foundation

/// siwa as an OpenID Provider: its issuer, the clients configured (`oidc_clients`; more may be registered in the
/// store with `siwa oidc add-client`), and how long what it issues lives.
public struct ProviderSettings: Sendable {
    /// `issuer` of discovery and of every id_token: `public_url` without a trailing slash.
    public var issuer: String
    /// The clients of `oidc_clients` (secrets already hashed).
    public var clients: [ProviderClientRecord]
    /// An authorization code is redeemable this long (RFC 6749 recommends at most 10 minutes; we take 60 s).
    public var codeLifetime: TimeInterval = 60
    /// Access tokens (opaque) live this long.
    public var accessTokenLifetime: TimeInterval = 600
    /// id_tokens are valid this long.
    public var idTokenLifetime: TimeInterval = 600
    /// A refresh token is redeemable this long after it was issued (each use issues a new one).
    public var refreshTokenLifetime: TimeInterval = 30 * 86_400

    public init(issuer: String, clients: [ProviderClientRecord] = []) {
        self.issuer = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
        self.clients = clients
    }

    /// The scopes siwa grants: `openid`, `email`, `profile` (and `offline_access`, which changes nothing: every code
    /// exchange returns a refresh token).
    public static let supportedScopes = ["openid", "email", "profile", "offline_access", "groups"]

    /// Lowercase hex SHA-256 of `secret`: how client secrets, codes and tokens are kept, as session ids are. They
    /// are random and long (a password hash would add nothing but time), except a configured client secret, which
    /// the configuration holds in the clear anyway.
    public static func hash(_ secret: String) -> String {
        SignInFlow.hash(secret)
    }

    /// Parses `oidc_clients`: a JSON array of objects. Errors name the client and the field.
    public static func clients(fromJSON text: String, now: Date = Date()) throws(ProviderConfigurationError) -> [ProviderClientRecord] {
        guard let array = try? JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed]) as? [Any] else {
            throw ProviderConfigurationError("must be a JSON array of clients, e.g. [{\"client_id\": \"grafana\", \"client_secret\": \"…\", \"redirect_uris\": [\"https://grafana.example.com/login/generic_oauth\"]}]")
        }
        var clients: [ProviderClientRecord] = []
        for (index, element) in array.enumerated() {
            guard let object = element as? [String: Any] else { throw ProviderConfigurationError("entry \(index + 1) is not a JSON object") }
            let known: Set<String> = [
                "client_id", "client_secret", "redirect_uris", "post_logout_redirect_uris", "scopes", "public", "id_token_signed_response_alg", "pairwise_subject",
                "allowed_groups", "backchannel_logout_uri", "iss_in_errors", "device", "service",
            ]
            if let unknown = object.keys.sorted().first(where: { !known.contains($0) }) {
                throw ProviderConfigurationError("entry \(index + 1) has an unknown field \(unknown); known: \(known.sorted().joined(separator: ", "))")
            }
            guard let clientID = object["client_id"] as? String, !clientID.isEmpty else { throw ProviderConfigurationError("entry \(index + 1) needs a client_id") }
            func strings(_ field: String) throws(ProviderConfigurationError) -> [String] {
                guard let value = object[field] else { return [] }
                guard let list = value as? [String] else { throw ProviderConfigurationError("client \(clientID): \(field) must be an array of strings") }
                return list
            }
            let isPublic = object["public"] as? Bool ?? false
            let secret = object["client_secret"] as? String
            if !isPublic, (secret ?? "").isEmpty { throw ProviderConfigurationError("client \(clientID): needs a client_secret, or \"public\": true (then PKCE is required)") }
            if isPublic, secret != nil { throw ProviderConfigurationError("client \(clientID): a public client has no client_secret") }
            let client = try ProviderClientRecord.validated(
                clientID: clientID, secretHash: secret.map(hash), redirectURIs: try strings("redirect_uris"),
                postLogoutRedirectURIs: try strings("post_logout_redirect_uris"), scopes: try strings("scopes"), isPublic: isPublic,
                idTokenAlgorithm: object["id_token_signed_response_alg"] as? String ?? "RS256", pairwiseSubject: object["pairwise_subject"] as? Bool ?? false,
                createdAt: now, allowedGroups: try strings("allowed_groups"), backchannelLogoutURI: object["backchannel_logout_uri"] as? String,
                deviceFlow: object["device"] as? Bool ?? false, isService: object["service"] as? Bool ?? false
            )
            var checked = client
            if let value = object["iss_in_errors"] {
                guard let flag = value as? Bool else { throw ProviderConfigurationError("client \(clientID): iss_in_errors must be true or false") }
                checked.issInErrors = flag
            }
            guard !clients.contains(where: { $0.clientID == clientID }) else { throw ProviderConfigurationError("client \(clientID) is listed twice") }
            clients.append(checked)
        }
        return clients
    }
}

/// A client of `oidc_clients` or `siwa oidc add-client` that cannot be used as given.
public struct ProviderConfigurationError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension ProviderClientRecord {
    /// A client checked as registration must check it: a client id of printable ASCII, at least one redirect URI,
    /// every URI absolute without a fragment (`https`, or `http` on a loopback host, or an app's own scheme),
    /// known scopes, RS256 or ES256, group names that read as group names.
    public static func validated(
        clientID: String, secretHash: String?, redirectURIs: [String], postLogoutRedirectURIs: [String], scopes: [String], isPublic: Bool,
        idTokenAlgorithm: String, pairwiseSubject: Bool, createdAt: Date, allowedGroups: [String] = [], backchannelLogoutURI: String? = nil,
        deviceFlow: Bool = false, isService: Bool = false
    ) throws(ProviderConfigurationError) -> ProviderClientRecord {
        if isService {
            guard !isPublic, secretHash != nil else { throw ProviderConfigurationError("client \(clientID): a service is confidential: it needs a secret") }
            guard !deviceFlow else { throw ProviderConfigurationError("client \(clientID): a service gets its tokens itself; --device is for command lines a person approves") }
        }
        // Back-Channel Logout 1.0 §2.2: an absolute http(s) URI without a fragment (https, or http on a loopback host).
        if let uri = backchannelLogoutURI {
            guard let components = URLComponents(string: uri), let scheme = components.scheme?.lowercased(), components.fragment == nil,
                let host = components.host, !host.isEmpty,
                scheme == "https" || (scheme == "http" && RedirectPolicy.isLoopback(host: host))
            else {
                throw ProviderConfigurationError("client \(clientID): backchannel_logout_uri \(uri) must be an absolute https URI without a fragment (http only on a loopback host)")
            }
        }
        for group in allowedGroups {
            do {
                try GroupName.check(group)
            } catch {
                throw ProviderConfigurationError("client \(clientID): allowed group \(error.description)")
            }
        }
        guard clientID.utf8.count <= 200, clientID.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F && $0 != ":" }) else {
            throw ProviderConfigurationError("client id \(clientID) must be printable ASCII without spaces or ':' (at most 200 characters)")
        }
        // A command line of the device flow has no redirect URI (its person signs in at /auth/device).
        guard !redirectURIs.isEmpty || deviceFlow || isService else { throw ProviderConfigurationError("client \(clientID): needs at least one redirect URI (or --device)") }
        for uri in redirectURIs + postLogoutRedirectURIs {
            guard let components = URLComponents(string: uri), let scheme = components.scheme?.lowercased(), components.fragment == nil else {
                throw ProviderConfigurationError("client \(clientID): \(uri) is not an absolute URI without a fragment")
            }
            let host = components.host ?? ""
            if scheme == "http", !RedirectPolicy.isLoopback(host: host) {
                throw ProviderConfigurationError("client \(clientID): \(uri) must be https (http only on a loopback host)")
            }
            if scheme == "https" || scheme == "http", host.isEmpty {
                throw ProviderConfigurationError("client \(clientID): \(uri) has no host")
            }
        }
        if let unknown = scopes.first(where: { !ProviderSettings.supportedScopes.contains($0) }) {
            throw ProviderConfigurationError("client \(clientID): unknown scope \(unknown); siwa grants \(ProviderSettings.supportedScopes.joined(separator: ", "))")
        }
        if pairwiseSubject, Set(redirectURIs.compactMap { URLComponents(string: $0)?.host?.lowercased() }).count != 1 {
            throw ProviderConfigurationError("client \(clientID): with pairwise subjects every redirect URI must be on one host (its sector)")
        }
        guard ["RS256", "ES256"].contains(idTokenAlgorithm) else {
            throw ProviderConfigurationError("client \(clientID): id_token_signed_response_alg must be RS256 or ES256")
        }
        var client = ProviderClientRecord(
            clientID: clientID, secretHash: secretHash, redirectURIs: redirectURIs, postLogoutRedirectURIs: postLogoutRedirectURIs, scopes: scopes,
            isPublic: isPublic, idTokenAlgorithm: idTokenAlgorithm, pairwiseSubject: pairwiseSubject, createdAt: createdAt,
            allowedGroups: allowedGroups.sorted(), backchannelLogoutURI: backchannelLogoutURI
        )
        client.deviceFlow = deviceFlow
        client.isService = isService
        return client
    }

    /// The host its pairwise subjects are computed for (OpenID Connect Core §8.1): its redirect URIs' one host.
    var sector: String? { redirectURIs.first.flatMap { URLComponents(string: $0)?.host?.lowercased() } }

    /// The scopes this client may be granted.
    var allowedScopes: Set<String> { scopes.isEmpty ? Set(ProviderSettings.supportedScopes) : Set(scopes + ["openid"]) }
}
