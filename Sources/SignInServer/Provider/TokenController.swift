import AppleSignIn
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import JOSE
import Logging

/// The clients' side of siwa's OpenID Provider: the token endpoint (authorization code with PKCE, refresh tokens
/// rotated on use), userinfo and revocation (RFC 7009). Codes and tokens are stored as hashes only; none of them,
/// nor a client secret, is ever logged. Every answer carrying a token is `Cache-Control: no-store`.
struct TokenController: Sendable {
    let settings: ProviderSettings
    let clients: ProviderClients
    let store: any SignInStore
    let keys: ProviderKeys
    /// The groups in force (`groups` scope).
    let access: AccessControl
    /// Where each service token issued is recorded.
    let audit: AuditTrail

    func addRoutes(to router: Router<ServerContext>) {
        router.post("/oauth2/token", use: token)
        router.get("/oauth2/userinfo", use: userinfo)
        router.post("/oauth2/userinfo", use: userinfo)
        router.post("/oauth2/revoke", use: revoke)
        router.post("/oauth2/introspect", use: introspect)
    }

    /// An RFC 6749 §5.2 error answer.
    struct TokenError: Error {
        var status: HTTPResponse.Status = .badRequest
        var code: String
        var description: String
        var basic = false

        static func invalidGrant(_ description: String) -> TokenError { TokenError(code: "invalid_grant", description: description) }

        var response: Response {
            var response = Response.json(["error": code, "error_description": description], status: status)
            if let pragma = HTTPField.Name.pragma { response.headers[pragma] = "no-cache" }
            if basic { response.headers[.wwwAuthenticate] = "Basic realm=\"siwa\", charset=\"UTF-8\"" }
            return response
        }
    }

    // MARK: token

    @Sendable func token(_ request: Request, context: ServerContext) async throws -> Response {
        do {
            let form = try await Self.form(of: request)
            let client = try await authenticate(request, form: form, context: context)
            switch form["grant_type"] {
            case "authorization_code": return try await exchangeCode(form, client: client, context: context)
            case "refresh_token": return try await refresh(form, client: client, context: context)
            case Self.deviceCodeGrant: return try await deviceToken(form, client: client, context: context)
            case Self.clientCredentialsGrant: return try await serviceToken(client: client, context: context)
            case nil: throw TokenError(code: "invalid_request", description: "grant_type is missing")
            default: throw TokenError(code: "unsupported_grant_type", description: "grant_type must be authorization_code, refresh_token, client_credentials or \(Self.deviceCodeGrant)")
            }
        } catch let error as TokenError {
            if error.code != "invalid_client" { context.logger.notice("token request refused", metadata: ["error": "\(error.code)", "reason": "\(error.description)"]) }
            return error.response
        } catch {
            context.logger.error("store unavailable", metadata: ["error": "\(String(describing: type(of: error)))"])
            return TokenError(status: .serviceUnavailable, code: "temporarily_unavailable", description: "the store did not answer; try again").response
        }
    }

    private func exchangeCode(_ form: [String: String], client: ProviderClientRecord, context: ServerContext) async throws -> Response {
        guard let code = form["code"], !code.isEmpty else { throw TokenError(code: "invalid_request", description: "code is missing") }
        let now = Date()
        let record: AuthorizationCodeRecord
        switch try await store.redeemAuthorizationCode(hash: ProviderSettings.hash(code), now: now) {
        case .redeemed(let found): record = found
        case .replayed(let found):
            context.logger.warning("authorization code used again: the tokens issued for it are revoked", metadata: ["client_id": "\(found.clientID)"])
            throw TokenError.invalidGrant("the code was already used")
        case .expired: throw TokenError.invalidGrant("the code has expired")
        case .unknown: throw TokenError.invalidGrant("the code is not valid")
        }
        guard record.clientID == client.clientID else { throw TokenError.invalidGrant("the code was issued to another client") }
        guard form["redirect_uri"] == record.redirectURI else { throw TokenError.invalidGrant("redirect_uri differs from the authorization request's") }
        switch (record.codeChallenge, form["code_verifier"]) {
        case (let challenge?, let verifier?):
            guard (43...128).contains(verifier.utf8.count), verifier.utf8.allSatisfy(AuthorizationController.isUnreserved),
                ConstantTime.equals(Base64URL.encode(SHA256.hash(data: Data(verifier.utf8))), challenge)
            else { throw TokenError.invalidGrant("code_verifier does not match the code_challenge") }
        case (.some, nil): throw TokenError.invalidGrant("code_verifier is missing")
        case (nil, .some): throw TokenError.invalidGrant("code_verifier given, but the authorization request had no code_challenge")
        case (nil, nil): break
        }
        guard let user = try await store.user(subject: record.subject) else { throw TokenError.invalidGrant("the account no longer exists") }
        return try await issue(
            for: user, client: client, scope: record.scope, authTime: record.authTime, nonce: record.nonce, familyID: RandomToken.generate(byteCount: 16),
            codeHash: record.codeHash, sessionID: record.sessionID, now: now, context: context
        )
    }

    private func refresh(_ form: [String: String], client: ProviderClientRecord, context: ServerContext) async throws -> Response {
        guard let presented = form["refresh_token"], !presented.isEmpty else { throw TokenError(code: "invalid_request", description: "refresh_token is missing") }
        let now = Date()
        let hash = ProviderSettings.hash(presented)
        // Another client's live token is refused without spending it.
        if let live = try await store.providerToken(hash: hash, kind: .refresh, now: now), live.clientID != client.clientID {
            throw TokenError.invalidGrant("the refresh token was issued to another client")
        }
        let record: ProviderTokenRecord
        switch try await store.redeemRefreshToken(hash: hash, now: now) {
        case .redeemed(let found): record = found
        case .reused(let found):
            context.logger.warning("refresh token used again: every token of its grant is revoked", metadata: ["client_id": "\(found.clientID)"])
            throw TokenError.invalidGrant("the refresh token was already used")
        case .unknown: throw TokenError.invalidGrant("the refresh token is not valid")
        }
        guard record.clientID == client.clientID else { throw TokenError.invalidGrant("the refresh token was issued to another client") }
        var scope = record.scope
        if let asked = form["scope"] {
            let narrower = Set(asked.split(separator: " ").map(String.init))
            guard narrower.isSubset(of: Set(record.scope.split(separator: " ").map(String.init))) else {
                throw TokenError(code: "invalid_scope", description: "a refresh may only narrow the granted scope")
            }
            scope = narrower.sorted().joined(separator: " ")
        }
        guard let user = try await store.user(subject: record.subject) else { throw TokenError.invalidGrant("the account no longer exists") }
        return try await issue(
            for: user, client: client, scope: scope, authTime: record.authTime, nonce: nil, familyID: record.familyID, codeHash: record.codeHash,
            sessionID: record.sessionID, now: now, context: context
        )
    }

    /// A new access token, refresh token and id_token for `user`, stored (hashed) before they are answered.
    /// `refresh`: with a refresh token (a grant of the device flow has one only when `offline_access` was granted).
    func issue(
        for user: UserRecord, client: ProviderClientRecord, scope: String, authTime: Date, nonce: String?, familyID: String, codeHash: String?,
        sessionID: String?, refresh: Bool = true, now: Date, context: ServerContext
    ) async throws -> Response {
        // Prefixed: the door reads it as an access token (`BearerCredential`), and a leaked one is recognisable.
        let accessToken = BearerCredential.accessTokenPrefix + RandomToken.generate()
        let refreshToken = RandomToken.generate()
        func record(_ token: String, _ kind: ProviderTokenRecord.Kind, lifetime: TimeInterval) -> ProviderTokenRecord {
            ProviderTokenRecord(
                tokenHash: ProviderSettings.hash(token), kind: kind, clientID: client.clientID, subject: user.subject, scope: scope, authTime: authTime,
                familyID: familyID, codeHash: codeHash, createdAt: now, expiresAt: now.addingTimeInterval(lifetime), sessionID: sessionID
            )
        }
        let scopes = Set(scope.split(separator: " ").map(String.init))
        let issuedAt = Int(now.timeIntervalSince1970)
        let subject = try await subject(of: user, for: client)
        let claims = IDTokenClaims(
            iss: settings.issuer, sub: subject, aud: client.clientID, exp: issuedAt + Int(settings.idTokenLifetime), iat: issuedAt,
            auth_time: Int(authTime.timeIntervalSince1970), nonce: nonce, at_hash: Digests.codeHash(accessToken),  // at_hash is formed as c_hash is
            sid: sessionID.map { ProviderKeys.sid($0, for: client.clientID) }, user: UserClaims(user, scopes: scopes, groups: access.groups(subject: user.subject, email: user.email))
        )
        let idToken: String
        do {
            idToken = try await keys.sign(claims, algorithm: client.idTokenAlgorithm, now: now)
        } catch {
            context.logger.error("id_token not signed", metadata: ["error": "\(error)"])
            throw TokenError(status: .internalServerError, code: "server_error", description: "no key can sign the id_token now")
        }
        try await store.saveProviderTokens(
            [record(accessToken, .access, lifetime: settings.accessTokenLifetime)] + (refresh ? [record(refreshToken, .refresh, lifetime: settings.refreshTokenLifetime)] : [])
        )
        context.logger.info("tokens issued", metadata: ["client_id": "\(client.clientID)"])
        var response = Response.json(TokenAnswer(
            access_token: accessToken, token_type: "Bearer", expires_in: Int(settings.accessTokenLifetime), refresh_token: refresh ? refreshToken : nil,
            id_token: idToken, scope: scope
        ))
        if let pragma = HTTPField.Name.pragma { response.headers[pragma] = "no-cache" }
        return response
    }

    // MARK: userinfo

    @Sendable func userinfo(_ request: Request, context: ServerContext) async throws -> Response {
        func refused(_ error: String, _ description: String) -> Response {
            var response = Response.json(["error": error, "error_description": description], status: error == "invalid_request" ? .badRequest : .unauthorized)
            response.headers[.wwwAuthenticate] = "Bearer realm=\"siwa\", error=\"\(error)\", error_description=\"\(description)\""
            return response
        }
        var token: String?
        if let header = request.headers[.authorization] {
            guard header.count > 7, header.prefix(7).lowercased() == "bearer " else { return refused("invalid_request", "use the Bearer scheme") }
            token = String(header.dropFirst(7)).trimmingCharacters(in: .whitespaces)
        } else if request.method == .post, let form = try? await Self.form(of: request) {
            token = form["access_token"]
        }
        guard let token, !token.isEmpty else {
            var response = Response(status: .unauthorized, headers: [.cacheControl: "no-store"])
            response.headers[.wwwAuthenticate] = "Bearer realm=\"siwa\""
            return response
        }
        do {
            guard let record = try await store.providerToken(hash: ProviderSettings.hash(token), kind: .access, now: Date()),
                let user = try await store.user(subject: record.subject)
            else { return refused("invalid_token", "the access token is not valid, has expired or was revoked") }
            var claims = UserClaims(user, scopes: Set(record.scope.split(separator: " ").map(String.init)), groups: access.groups(subject: user.subject, email: user.email))
            claims.sub = user.subject
            if let client = try await clients.client(record.clientID) { claims.sub = try await subject(of: user, for: client) }
            return Response.json(claims)
        } catch {
            context.logger.error("store unavailable", metadata: ["error": "\(String(describing: type(of: error)))"])
            return Response.problem(.serviceUnavailable, "store-unavailable", "Try again", "The store did not answer.")
        }
    }

    // MARK: revoke

    /// RFC 7009: 200 for any token, known or not, once the client has authenticated; only the client's own tokens
    /// are revoked, and revoking either token of a grant revokes the grant.
    @Sendable func revoke(_ request: Request, context: ServerContext) async throws -> Response {
        do {
            let form = try await Self.form(of: request)
            let client = try await authenticate(request, form: form, context: context)
            guard let token = form["token"], !token.isEmpty else { throw TokenError(code: "invalid_request", description: "token is missing") }
            if try await store.revokeProviderToken(hash: ProviderSettings.hash(token), clientID: client.clientID) {
                context.logger.info("token revoked by its client", metadata: ["client_id": "\(client.clientID)"])
            }
            return Response(status: .ok, headers: [.cacheControl: "no-store"])
        } catch let error as TokenError {
            return error.response
        } catch {
            context.logger.error("store unavailable", metadata: ["error": "\(String(describing: type(of: error)))"])
            return TokenError(status: .serviceUnavailable, code: "temporarily_unavailable", description: "the store did not answer; try again").response
        }
    }

    // MARK: shared

    /// The `sub` `client` is given: Apple's, or the pairwise one for a client registered with pairwise subjects.
    private func subject(of user: UserRecord, for client: ProviderClientRecord) async throws -> String {
        try await keys.subject(user.subject, for: client)
    }

    private func authenticate(_ request: Request, form: [String: String], context: ServerContext) async throws -> ProviderClientRecord {
        try await Self.authenticate(request, form: form, clients: clients, context: context)
    }

    /// The client a token-endpoint request (or a device authorization) comes from, proved as it was registered; an
    /// `invalid_client` error otherwise.
    static func authenticate(_ request: Request, form: [String: String], clients: ProviderClients, context: ServerContext) async throws -> ProviderClientRecord {
        let basic = request.headers[.authorization].map { $0.lowercased().hasPrefix("basic ") } ?? false
        guard let credentials = ClientCredentials.read(request, form: form) else {
            context.logger.notice("client authentication failed: no usable credentials")
            throw TokenError(status: .unauthorized, code: "invalid_client", description: "client authentication failed", basic: basic)
        }
        guard let client = try await clients.client(credentials.clientID), credentials.authenticate(client) else {
            context.logger.notice("client authentication failed", metadata: ["client_id": "\(credentials.clientID.prefix(64))"])
            throw TokenError(status: .unauthorized, code: "invalid_client", description: "client authentication failed", basic: basic)
        }
        return client
    }

    static func form(of request: Request) async throws -> [String: String] {
        guard request.headers[.contentType].map({ $0.lowercased().hasPrefix("application/x-www-form-urlencoded") }) ?? false else {
            throw TokenError(code: "invalid_request", description: "the body must be application/x-www-form-urlencoded")
        }
        var request = request
        do {
            let body = try await request.collectBody(upTo: 16_384)
            return try CallbackPayload.parseFields(body.readableBytesView)
        } catch {
            throw TokenError(code: "invalid_request", description: "the form is malformed, repeats a parameter, or is too large")
        }
    }
}

/// The token endpoint's answer.
struct TokenAnswer: Encodable {
    var access_token: String
    var token_type: String
    var expires_in: Int
    var refresh_token: String?
    var id_token: String
    var scope: String
}

/// The person's claims for the granted scopes: `email` → `email`, `email_verified`, `is_private_email`;
/// `profile` → `name`, `given_name`, `family_name` (kept from the first Apple sign-in, which alone carries them);
/// `groups` → `groups`, the person's groups now (an array, also when empty).
struct UserClaims: Encodable {
    var sub: String?
    var email: String?
    var email_verified: Bool?
    var is_private_email: Bool?
    var name: String?
    var given_name: String?
    var family_name: String?
    var groups: [String]?

    init(_ user: UserRecord, scopes: Set<String>, groups: [String]) {
        if scopes.contains("groups") { self.groups = groups }
        if scopes.contains("email"), let email = user.email {
            self.email = email
            email_verified = true
            is_private_email = user.isPrivateEmail
        }
        if scopes.contains("profile") {
            name = user.displayName
            given_name = user.firstName
            family_name = user.lastName
        }
    }
}

/// An id_token's claims (OpenID Connect Core §2), followed in the same JSON object by the person's claims of the
/// granted scopes (`user`, as userinfo gives them).
struct IDTokenClaims: Encodable {
    var iss: String
    var sub: String
    var aud: String
    var exp: Int
    var iat: Int
    var auth_time: Int
    var nonce: String?
    var at_hash: String
    /// The public id of the siwa session (Back-Channel Logout 1.0 §2.1), absent for grants from before it was kept.
    var sid: String?
    var user: UserClaims

    private enum CodingKeys: String, CodingKey {
        case iss, sub, aud, exp, iat, auth_time, nonce, at_hash, sid
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(iss, forKey: .iss)
        try container.encode(sub, forKey: .sub)
        try container.encode(aud, forKey: .aud)
        try container.encode(exp, forKey: .exp)
        try container.encode(iat, forKey: .iat)
        try container.encode(auth_time, forKey: .auth_time)
        try container.encodeIfPresent(nonce, forKey: .nonce)
        try container.encode(at_hash, forKey: .at_hash)
        try container.encodeIfPresent(sid, forKey: .sid)
        try user.encode(to: encoder)
    }
}

extension HTTPField.Name {
    /// `Pragma: no-cache` beside `Cache-Control: no-store` on token answers (RFC 6749 §5.1, for HTTP/1.0 caches).
    static let pragma = HTTPField.Name("Pragma")
}
