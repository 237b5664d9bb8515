import Crypto
import Foundation
import Hummingbird
import JOSE

/// `POST /auth/token`, `GET /auth/keys`, `POST /auth/revoke`, `POST /auth/usermigrationinfo`.
extension AppleIDEmulator {
    /// The claims of an identity token, typed as Apple's 2025 tokens are (booleans as JSON booleans).
    struct IDTokenClaims: Encodable {
        var iss: String
        var aud: String
        var exp: Int
        var iat: Int
        var sub: String
        var nonce: String?
        var nonce_supported: Bool
        var c_hash: String?
        var at_hash: String?
        var email: String?
        var email_verified: Bool?
        var is_private_email: Bool?
        var auth_time: Int
        var real_user_status: Int?
        var transfer_sub: String?
    }

    /// What an identity token asserts about the user, whichever endpoint issues it.
    struct TokenSubject: Sendable {
        var clientID: String
        var subject: String
        var nonce: String?
        /// Empty when the email scope was not granted: then the token has no email claims at all.
        var email: String
        var isPrivateEmail: Bool
        var authTime: Date
    }

    /// Signs an identity token with the active key.
    /// `code` adds `c_hash` (front-channel and native tokens), `accessToken` adds `at_hash` (token-endpoint tokens):
    /// the left half of the value's SHA-256 in base64url, as OpenID Connect defines both. `realUserStatus` is set
    /// on tokens of native sign-ins only, as Apple's.
    func signIDToken(_ subject: TokenSubject, code: String? = nil, accessToken: String? = nil, realUserStatus: Int? = nil, now: Date) async throws -> String {
        // The key is the one signing at this moment, whatever time the claims are given.
        guard let key = await state.activeKey(now: Date()) else { throw HTTPError(.internalServerError, message: "no signing key") }
        let issuedAt = Int(now.timeIntervalSince1970)
        let hasEmail = !subject.email.isEmpty
        let claims = IDTokenClaims(
            iss: issuer, aud: subject.clientID, exp: issuedAt + configuration.idTokenLifetime, iat: issuedAt, sub: subject.subject,
            nonce: subject.nonce, nonce_supported: true, c_hash: code.map(Digests.codeHash), at_hash: accessToken.map(Digests.codeHash),
            email: hasEmail ? subject.email : nil, email_verified: hasEmail ? true : nil,
            is_private_email: hasEmail ? subject.isPrivateEmail : nil,
            auth_time: Int(subject.authTime.timeIntervalSince1970), real_user_status: realUserStatus,
            transfer_sub: await state.transferSubject(subject: subject.subject, clientID: subject.clientID, now: now)
        )
        return try JWTSigning.rs256(header: ["alg": "RS256", "kid": key.kid], claims: claims, key: key.key)
    }

    func addAppleRoutes(to router: Router<EmulatorContext>) {
        addAuthorizeRoutes(to: router)
        router.post("auth/token") { request, context in
            if let faulted = try await self.applyFault(.token, context: context) { return faulted }
            var request = request
            let params = Self.parameters(String(buffer: try await request.collectBody(upTo: 64 * 1024)))
            return try await self.token(params)
        }
        router.get(".well-known/openid-configuration") { _, _ in
            self.discoveryDocument()
        }
        router.get("auth/keys") { _, context in
            if let faulted = try await self.applyFault(.keys, context: context) { return faulted }
            await self.state.countKeySetRequest()
            return try await self.keySet()
        }
        router.post("auth/revoke") { request, context in
            if let faulted = try await self.applyFault(.revoke, context: context) { return faulted }
            var request = request
            let params = Self.parameters(String(buffer: try await request.collectBody(upTo: 64 * 1024)))
            return try await self.revoke(params)
        }
        router.post("auth/usermigrationinfo") { request, _ in
            var request = request
            let bearer = request.headers[.authorization].flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil }
            let params = Self.parameters(String(buffer: try await request.collectBody(upTo: 64 * 1024)))
            return try await self.migrationInfo(params, bearer: bearer)
        }
    }

    /// The public keys, several at once, as Apple publishes them.
    func keySet() async throws -> Response {
        jsonResponse(data: try await publishedKeySetJSON(), headers: [.cacheControl: "max-age=\(configuration.keySetMaxAge)"])
    }

    /// The JSON of `/auth/keys` as it stands now (also for tests and tools that verify offline).
    public func publishedKeySetJSON() async throws -> Data {
        struct Key: Encodable {
            var kty = "RSA"
            var kid: String
            var use = "sig"
            var alg = "RS256"
            var n: String
            var e: String
        }
        var keys: [Key] = []
        for entry in await state.publishedKeys(now: Date()) {
            let primitives = try entry.key.publicKey.getKeyPrimitives()
            keys.append(Key(kid: entry.kid, n: Base64URL.encode(primitives.modulus), e: Base64URL.encode(primitives.publicExponent)))
        }
        return try emulatorJSON(["keys": keys])
    }

    /// Apple's discovery document (APPLE.md §10): the same members, the endpoints where this emulator serves them,
    /// and the issuer it signs with.
    func discoveryDocument() -> Response {
        struct Discovery: Encodable {
            var issuer: String
            var authorization_endpoint: String
            var token_endpoint: String
            var revocation_endpoint: String
            var jwks_uri: String
            var response_types_supported = ["code"]
            var response_modes_supported = ["query", "fragment", "form_post"]
            var subject_types_supported = ["pairwise"]
            var id_token_signing_alg_values_supported = ["RS256"]
            var scopes_supported = ["openid", "email", "name"]
            var token_endpoint_auth_methods_supported = ["client_secret_post"]
            var claims_supported = [
                "aud", "email", "email_verified", "exp", "iat", "is_private_email", "iss", "nonce", "nonce_supported",
                "real_user_status", "sub", "transfer_sub",
            ]
        }
        let base = baseURL ?? "http://127.0.0.1"
        return jsonResponse(Discovery(
            issuer: issuer, authorization_endpoint: base + "/auth/authorize", token_endpoint: base + "/auth/token",
            revocation_endpoint: base + "/auth/revoke", jwks_uri: base + "/auth/keys"
        ), headers: [.cacheControl: "max-age=3600"])
    }

    /// Checks `client_id` and `client_secret` before anything else of the request, as Apple does: whatever else
    /// is wrong, missing or bad client credentials answer `invalid_client`.
    private func authenticateClient(_ params: [String: String]) -> Result<EmulatorConfiguration.Client, ErrorResponse> {
        guard let clientID = params["client_id"], let secret = params["client_secret"], !clientID.isEmpty, !secret.isEmpty else {
            return .failure(ErrorResponse(code: "invalid_client", reason: "client_id and client_secret are required"))
        }
        guard let client = client(clientID) else {
            return .failure(ErrorResponse(code: "invalid_client", reason: "unknown client_id \(clientID)"))
        }
        do {
            try ClientSecretVerifier.verify(secret, for: client, now: Date())
        } catch {
            return .failure(ErrorResponse(code: "invalid_client", reason: error.description))
        }
        guard client.enabled else {
            return .failure(ErrorResponse(code: "unauthorized_client", reason: "Sign in with Apple is not enabled for \(clientID)"))
        }
        return .success(client)
    }

    struct ErrorResponse: Error {
        var code: String
        var reason: String
    }

    private func refuse(_ error: ErrorResponse, _ endpoint: String) -> Response {
        logger.info("\(endpoint) refused", metadata: ["error": "\(error.code)", "reason": "\(error.reason)"])
        return appleError(error.code)
    }

    private func token(_ params: [String: String]) async throws -> Response {
        let client: EmulatorConfiguration.Client
        switch authenticateClient(params) {
        case .failure(let error): return refuse(error, "token")
        case .success(let found): client = found
        }
        guard let grantType = params["grant_type"], !grantType.isEmpty else {
            return refuse(ErrorResponse(code: "invalid_request", reason: "grant_type is missing"), "token")
        }
        guard ["authorization_code", "refresh_token", "client_credentials"].contains(grantType) else {
            return refuse(ErrorResponse(code: "unsupported_grant_type", reason: "grant_type is not supported"), "token")
        }
        let now = Date()
        switch grantType {
        case "authorization_code":
            guard let code = params["code"], !code.isEmpty else {
                return refuse(ErrorResponse(code: "invalid_request", reason: "code is missing"), "token")
            }
            let grant: EmulatorState.CodeGrant
            switch await state.redeemCode(code, clientID: client.clientID, redirectURI: params["redirect_uri"], now: now) {
            case .failure(let failure):
                return refuse(ErrorResponse(code: "invalid_grant", reason: "code \(failure)"), "token")
            case .success(let found):
                grant = found
            }
            var forRefresh = grant.identity
            forRefresh.nonce = nil
            let tokens = await state.issueTokens(for: EmulatorState.RefreshGrant(identity: forRefresh), withRefreshToken: true, now: now)
            let idToken = try await signIDToken(grant.identity, accessToken: tokens.access, now: now)
            return jsonResponse(TokenAnswer(access_token: tokens.access, refresh_token: tokens.refresh, id_token: idToken))
        case "refresh_token":
            guard let refreshToken = params["refresh_token"], !refreshToken.isEmpty else {
                return refuse(ErrorResponse(code: "invalid_request", reason: "refresh_token is missing"), "token")
            }
            guard let grant = await state.refreshGrant(refreshToken, clientID: client.clientID) else {
                return refuse(ErrorResponse(code: "invalid_grant", reason: "refresh token unknown, revoked or for another client"), "token")
            }
            let tokens = await state.issueTokens(for: grant, withRefreshToken: false, now: now)
            let idToken = try await signIDToken(grant.identity, accessToken: tokens.access, now: now)
            return jsonResponse(TokenAnswer(access_token: tokens.access, refresh_token: nil, id_token: idToken))
        default:
            guard params["scope"] == "user.migration" else {
                return refuse(ErrorResponse(code: "invalid_scope", reason: "client_credentials supports scope user.migration only"), "token")
            }
            let token = await state.issueMigrationToken(clientID: client.clientID, now: now)
            return jsonResponse(TokenAnswer(access_token: token, refresh_token: nil, id_token: nil))
        }
    }

    /// The token endpoint's answer as Apple shapes it (APPLE.md §10).
    struct TokenAnswer: Encodable {
        var access_token: String
        var token_type = "Bearer"
        var expires_in = Int(EmulatorState.accessTokenLifetime)
        var refresh_token: String?
        var id_token: String?

        init(access_token: String, refresh_token: String?, id_token: String?) {
            self.access_token = access_token
            self.refresh_token = refresh_token
            self.id_token = id_token
        }
    }

    private func revoke(_ params: [String: String]) async throws -> Response {
        let client: EmulatorConfiguration.Client
        switch authenticateClient(params) {
        case .failure(let error): return refuse(error, "revoke")
        case .success(let found): client = found
        }
        guard let token = params["token"], !token.isEmpty else {
            return refuse(ErrorResponse(code: "invalid_request", reason: "token is missing"), "revoke")
        }
        // Unknown, expired and already revoked tokens answer 200 as well, as Apple's endpoint does.
        await state.revoke(token, clientID: client.clientID, now: Date())
        return Response(status: .ok, headers: [.contentLength: "0"])
    }

    /// Team-transfer lookup: the emulator's users keep their `sub` across teams, so `transfer_sub` is
    /// derived from it and maps back to the same `sub`.
    private func migrationInfo(_ params: [String: String], bearer: String?) async throws -> Response {
        let now = Date()
        guard let bearer, let clientID = await state.migrationClient(for: bearer, now: now) else {
            return Response(status: .unauthorized, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "{\"error\":\"invalid_token\"}")))
        }
        switch authenticateClient(params) {
        case .failure(let error): return refuse(error, "usermigrationinfo")
        case .success(let client) where client.clientID != clientID:
            return refuse(ErrorResponse(code: "invalid_client", reason: "bearer token issued to another client"), "usermigrationinfo")
        case .success: break
        }
        if let sub = params["sub"], user(sub) != nil {
            // The transfer is under way: this user's tokens carry transfer_sub for the window, as Apple's do.
            let transfer = Self.transferSubject(for: sub)
            await state.recordTransfer(subject: sub, clientID: clientID, transferSubject: transfer, now: now)
            return jsonResponse(["transfer_sub": transfer])
        }
        if let transfer = params["transfer_sub"], let user = configuration.users.first(where: { Self.transferSubject(for: $0.sub) == transfer }) {
            return jsonResponse(["sub": user.sub])
        }
        return appleError("invalid_request")
    }

    /// The emulator's deterministic transfer identifier for a `sub`.
    static func transferSubject(for sub: String) -> String {
        "t." + Digests.hex(SHA256.hash(data: Data(sub.utf8)).prefix(16))
    }
}
