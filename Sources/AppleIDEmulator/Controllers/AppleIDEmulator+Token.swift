import Crypto
import Foundation
import Hummingbird
import JOSE

/// `POST /auth/token`, `GET /auth/keys`, `POST /auth/revoke`, `POST /auth/usermigrationinfo`.
extension AppleIDEmulator {
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
        var email_verified: String?
        var is_private_email: String?
        var auth_time: Int
        var transfer_sub: String?
    }

    /// Signs an identity token with the active key.
    /// `code` adds `c_hash` (front-channel tokens), `accessToken` adds `at_hash` (token-endpoint tokens): the left
    /// half of the value's SHA-256 in base64url, as OpenID Connect defines both.
    func signIDToken(
        clientID: String, subject: String, nonce: String?, email: String, isPrivateEmail: Bool, authTime: Date, code: String?,
        accessToken: String? = nil, now: Date
    ) async throws -> String {
        guard let key = await state.activeKey else { throw HTTPError(.internalServerError, message: "no signing key") }
        let issuedAt = Int(now.timeIntervalSince1970)
        let cHash = code.map(Digests.codeHash)
        let claims = IDTokenClaims(
            iss: issuer, aud: clientID, exp: issuedAt + configuration.idTokenLifetime, iat: issuedAt, sub: subject,
            nonce: nonce, nonce_supported: true, c_hash: cHash, at_hash: accessToken.map(Digests.codeHash),
            email: email.isEmpty ? nil : email, email_verified: email.isEmpty ? nil : "true",
            is_private_email: email.isEmpty ? nil : (isPrivateEmail ? "true" : "false"),
            auth_time: Int(authTime.timeIntervalSince1970)
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
        struct Key: Encodable {
            var kty = "RSA"
            var kid: String
            var use = "sig"
            var alg = "RS256"
            var n: String
            var e: String
        }
        var keys: [Key] = []
        for entry in await state.signingKeys {
            let primitives = try entry.key.publicKey.getKeyPrimitives()
            keys.append(Key(kid: entry.kid, n: Base64URL.encode(primitives.modulus), e: Base64URL.encode(primitives.publicExponent)))
        }
        return jsonResponse(["keys": keys], headers: [.cacheControl: "max-age=\(configuration.keySetMaxAge)"])
    }

    /// Checks `client_id` and `client_secret`; returns the client or Apple's error response.
    private func authenticateClient(_ params: [String: String]) -> Result<EmulatorConfiguration.Client, ErrorResponse> {
        guard let clientID = params["client_id"], let secret = params["client_secret"], !clientID.isEmpty, !secret.isEmpty else {
            return .failure(ErrorResponse(code: "invalid_request", reason: "client_id and client_secret are required"))
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
        guard let grantType = params["grant_type"], !grantType.isEmpty else {
            return refuse(ErrorResponse(code: "invalid_request", reason: "grant_type is missing"), "token")
        }
        guard ["authorization_code", "refresh_token", "client_credentials"].contains(grantType) else {
            return refuse(ErrorResponse(code: "unsupported_grant_type", reason: "grant_type \(grantType)"), "token")
        }
        let client: EmulatorConfiguration.Client
        switch authenticateClient(params) {
        case .failure(let error): return refuse(error, "token")
        case .success(let found): client = found
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
            let refreshGrant = EmulatorState.RefreshGrant(clientID: grant.clientID, subject: grant.subject, nonce: grant.nonce, email: grant.email, isPrivateEmail: grant.isPrivateEmail)
            let tokens = await state.issueTokens(for: refreshGrant, withRefreshToken: true)
            let idToken = try await signIDToken(clientID: grant.clientID, subject: grant.subject, nonce: grant.nonce, email: grant.email, isPrivateEmail: grant.isPrivateEmail, authTime: grant.authTime, code: nil, accessToken: tokens.access, now: now)
            return jsonResponse(TokenAnswer(access_token: tokens.access, expires_in: 3600, refresh_token: tokens.refresh, id_token: idToken))
        case "refresh_token":
            guard let refreshToken = params["refresh_token"], !refreshToken.isEmpty else {
                return refuse(ErrorResponse(code: "invalid_request", reason: "refresh_token is missing"), "token")
            }
            guard let grant = await state.refreshGrant(refreshToken, clientID: client.clientID) else {
                return refuse(ErrorResponse(code: "invalid_grant", reason: "refresh token unknown, revoked or for another client"), "token")
            }
            let tokens = await state.issueTokens(for: grant, withRefreshToken: false)
            let idToken = try await signIDToken(clientID: grant.clientID, subject: grant.subject, nonce: nil, email: grant.email, isPrivateEmail: grant.isPrivateEmail, authTime: now, code: nil, accessToken: tokens.access, now: now)
            return jsonResponse(TokenAnswer(access_token: tokens.access, expires_in: 3600, refresh_token: nil, id_token: idToken))
        default:
            guard params["scope"] == "user.migration" else {
                return refuse(ErrorResponse(code: "invalid_scope", reason: "client_credentials supports scope user.migration only"), "token")
            }
            let token = await state.issueMigrationToken(clientID: client.clientID)
            return jsonResponse(TokenAnswer(access_token: token, expires_in: 3600, refresh_token: nil, id_token: nil))
        }
    }

    struct TokenAnswer: Encodable {
        var access_token: String
        var token_type = "bearer"
        var expires_in: Int
        var refresh_token: String?
        var id_token: String?

        init(access_token: String, expires_in: Int, refresh_token: String?, id_token: String?) {
            self.access_token = access_token
            self.expires_in = expires_in
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
        await state.revoke(token, clientID: client.clientID)
        return Response(status: .ok, headers: [.contentLength: "0"])
    }

    /// Team-transfer lookup: the emulator's users keep their `sub` across teams, so `transfer_sub` is
    /// derived from it and maps back to the same `sub`.
    private func migrationInfo(_ params: [String: String], bearer: String?) async throws -> Response {
        guard let bearer, let clientID = await state.migrationClient(for: bearer) else {
            return Response(status: .unauthorized, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: "{\"error\":\"invalid_token\"}")))
        }
        switch authenticateClient(params) {
        case .failure(let error): return refuse(error, "usermigrationinfo")
        case .success(let client) where client.clientID != clientID:
            return refuse(ErrorResponse(code: "invalid_client", reason: "bearer token issued to another client"), "usermigrationinfo")
        case .success: break
        }
        if let sub = params["sub"], user(sub) != nil {
            return jsonResponse(["transfer_sub": Self.transferSubject(for: sub)])
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
