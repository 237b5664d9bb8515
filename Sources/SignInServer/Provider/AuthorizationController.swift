import AppleSignIn
import Foundation
import Hummingbird
import JOSE
import Logging

/// The browser's side of siwa's OpenID Provider: discovery, the key set, the authorization endpoint and
/// RP-initiated logout. A person with a siwa session gets a code at once (one sign-in across every registered
/// app; consent is implied for registered clients); without one, they go through Sign in with Apple and come back
/// here. An unknown client or unregistered redirect URI gets an error page, never a redirect; every other error
/// goes back to the client with `error`, `error_description`, `state` and `iss` (RFC 9207).
struct AuthorizationController: Sendable {
    let settings: ProviderSettings
    let clients: ProviderClients
    let store: any SignInStore
    let keys: ProviderKeys
    let renderer: PageRenderer
    let cookies: CookiePolicy
    let front: FrontSettings
    let audit: AuditTrail

    func addRoutes(to router: Router<ServerContext>, sessions: RouterGroup<ServerContext>) {
        router.get("/.well-known/openid-configuration", use: discovery)
        router.get("/oauth2/jwks", use: keySet)
        sessions.get("/oauth2/authorize", use: authorize)
        sessions.post("/oauth2/authorize", use: authorize)
        sessions.get("/oauth2/end-session", use: endSession)
        sessions.post("/oauth2/end-session", use: endSession)
    }

    // MARK: discovery

    @Sendable func discovery(_ request: Request, context: ServerContext) async throws -> Response {
        let issuer = settings.issuer
        let document = DiscoveryDocument(
            issuer: issuer,
            authorization_endpoint: issuer + "/oauth2/authorize",
            token_endpoint: issuer + "/oauth2/token",
            userinfo_endpoint: issuer + "/oauth2/userinfo",
            jwks_uri: issuer + "/oauth2/jwks",
            revocation_endpoint: issuer + "/oauth2/revoke",
            end_session_endpoint: issuer + "/oauth2/end-session",
            device_authorization_endpoint: issuer + "/oauth2/device_authorization",
            introspection_endpoint: issuer + "/oauth2/introspect",
            scopes_supported: ProviderSettings.supportedScopes,
            response_types_supported: ["code"],
            response_modes_supported: ["query"],
            grant_types_supported: ["authorization_code", "refresh_token", TokenController.deviceCodeGrant, TokenController.clientCredentialsGrant],
            subject_types_supported: ["public", "pairwise"],
            id_token_signing_alg_values_supported: ["RS256", "ES256"],
            token_endpoint_auth_methods_supported: ["client_secret_basic", "client_secret_post", "none"],
            revocation_endpoint_auth_methods_supported: ["client_secret_basic", "client_secret_post", "none"],
            code_challenge_methods_supported: ["S256"],
            claims_supported: ["sub", "iss", "aud", "exp", "iat", "auth_time", "nonce", "at_hash", "email", "email_verified", "is_private_email", "name", "given_name", "family_name", "groups", "sid"],
            prompt_values_supported: ["none", "login", "consent", "select_account"],
            authorization_response_iss_parameter_supported: true,
            claims_parameter_supported: false,
            request_parameter_supported: false,
            request_uri_parameter_supported: false,
            backchannel_logout_supported: true,
            backchannel_logout_session_supported: true
        )
        var response = Response.json(document)
        response.headers[.cacheControl] = "public, max-age=300"
        return response
    }

    @Sendable func keySet(_ request: Request, context: ServerContext) async throws -> Response {
        do {
            var response = Response.json(try await keys.keySet())
            response.headers[.cacheControl] = "public, max-age=300"
            return response
        } catch {
            context.logger.error("provider key set unavailable", metadata: ["error": "\(String(describing: type(of: error)))"])
            return Response.problem(.serviceUnavailable, "store-unavailable", "Key set unavailable", "The signing keys could not be read; try again shortly.")
        }
    }

    // MARK: authorize

    @Sendable func authorize(_ request: Request, context: ServerContext) async throws -> Response {
        let parameters = try await Self.parameters(of: request, context: context)
        // Who is asking and where to answer must be known before anything is sent back there.
        guard let clientID = parameters["client_id"], let redirectURI = parameters["redirect_uri"] else {
            context.logger.notice("authorization refused: client_id or redirect_uri missing")
            throw ErrorPage(key: "oidcClient", status: .badRequest)
        }
        let client: ProviderClientRecord?
        do {
            client = try await clients.client(clientID)
        } catch {
            context.logger.error("store unavailable", metadata: ["error": "\(error)"])
            throw ErrorPage.storeUnavailable(retryURL: request.uri.description)
        }
        guard let client, client.redirectURIs.contains(redirectURI) else {
            context.logger.notice("authorization refused: unknown client or unregistered redirect URI", metadata: ["client_id": "\(clientID.prefix(64))", "known_client": "\(client != nil)"])
            throw ErrorPage(key: "oidcClient", status: .badRequest)
        }
        let state = parameters["state"]
        func fail(_ error: String, _ description: String) -> Response {
            context.logger.notice("authorization refused", metadata: ["client_id": "\(clientID)", "error": "\(error)"])
            return redirect(to: redirectURI, [("error", error), ("error_description", description), ("state", state)], withIssuer: client.issInErrors)
        }
        if parameters["request"] != nil { return fail("request_not_supported", "request objects are not supported") }
        if parameters["request_uri"] != nil { return fail("request_uri_not_supported", "request_uri is not supported") }
        guard parameters["response_type"] == "code" else { return fail("unsupported_response_type", "only response_type=code is supported") }
        if let mode = parameters["response_mode"], mode != "query" { return fail("invalid_request", "only response_mode=query is supported") }
        let requested = Set((parameters["scope"] ?? "").split(separator: " ").map(String.init))
        guard requested.contains("openid") else { return fail("invalid_scope", "scope must include openid") }
        let granted = requested.intersection(client.allowedScopes)
        let challenge = parameters["code_challenge"]
        if let method = parameters["code_challenge_method"], method != "S256" { return fail("invalid_request", "code_challenge_method must be S256") }
        if let challenge {
            guard (43...128).contains(challenge.utf8.count), challenge.utf8.allSatisfy(Self.isUnreserved) else {
                return fail("invalid_request", "code_challenge must be 43 to 128 characters of [A-Za-z0-9-._~]")
            }
            if parameters["code_challenge_method"] == nil { return fail("invalid_request", "code_challenge_method=S256 is required with a code_challenge") }
        } else if client.isPublic {
            return fail("invalid_request", "a public client must use PKCE (code_challenge with S256)")
        }
        let prompts = Set((parameters["prompt"] ?? "").split(separator: " ").map(String.init))
        if prompts.contains("none"), prompts.count > 1 { return fail("invalid_request", "prompt=none cannot be combined with other values") }
        var maxAge: TimeInterval?
        if let text = parameters["max_age"] {
            guard let seconds = Int(text), seconds >= 0 else { return fail("invalid_request", "max_age must be a whole number of seconds") }
            maxAge = TimeInterval(seconds)
        }
        if let nonce = parameters["nonce"], nonce.utf8.count > 512 { return fail("invalid_request", "nonce is longer than 512 bytes") }

        let now = Date()
        let signedIn: (SessionRecord, UserRecord)?
        switch context.visitor {
        case .signedIn(let session, let user): signedIn = (session, user)
        case .storeUnavailable(let retryURL): throw ErrorPage.storeUnavailable(retryURL: retryURL)
        case .anonymous, .notLooked, .bearer, .badToken: signedIn = nil
        }
        let fresh = signedIn.map { session, _ in maxAge.map { now.timeIntervalSince(session.createdAt) <= $0 } ?? true } ?? false
        guard let (session, user) = signedIn, fresh, !prompts.contains("login") else {
            if prompts.contains("none") { return fail("login_required", "the person is not signed in to siwa") }
            // Through Sign in with Apple, then back here (without prompt=login, so the new session is taken).
            var again = parameters
            again.removeValue(forKey: "prompt")
            if prompts.contains("login"), maxAge == nil { again["max_age"] = "600" }
            let back = front.publicOrigin + "/oauth2/authorize?" + FormEncoding.encode(again.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
            return front.signInRedirect(returningTo: back).response
        }
        // A client limited to some groups signs in only their members; the person's groups as they are now.
        if !client.allowedGroups.isEmpty {
            let groups = front.access.groups(subject: user.subject, email: user.email)
            guard groups.contains(where: client.allowedGroups.contains) else {
                return fail("access_denied", "this app signs in members of \(client.allowedGroups.joined(separator: ", ")) only")
            }
        }
        let code = RandomToken.generate()
        let record = AuthorizationCodeRecord(
            codeHash: ProviderSettings.hash(code), clientID: client.clientID, redirectURI: redirectURI, subject: user.subject,
            scope: granted.sorted().joined(separator: " "), nonce: parameters["nonce"], codeChallenge: challenge, authTime: session.createdAt,
            createdAt: now, expiresAt: now.addingTimeInterval(settings.codeLifetime), sessionID: session.publicID
        )
        do {
            try await store.saveAuthorizationCode(record)
        } catch {
            context.logger.error("store unavailable", metadata: ["error": "\(error)"])
            return fail("temporarily_unavailable", "the sign-in store did not answer; try again")
        }
        context.logger.info("authorization code issued", metadata: ["client_id": "\(client.clientID)"])
        return redirect(to: redirectURI, [("code", code), ("state", state)])
    }

    /// A redirect to the client's registered `uri` with `fields` (and `iss`, RFC 9207) added to its query. An error
    /// carries `iss` too, as RFC 9207 asks and strict clients check, except for a client registered without it
    /// (`issInErrors` false, `withIssuer`): mod_auth_openidc, to this day, takes any authorization response carrying
    /// `iss` for a sign-in the provider started before it looks at `error`, and shows a person a page about
    /// `target_link_uri`, or loops, instead of the refusal (its page in the docs registers it so).
    private func redirect(to uri: String, _ fields: [(String, String?)], withIssuer: Bool = true) -> Response {
        let pairs = fields.compactMap { name, value in value.map { (name, $0) } } + (withIssuer ? [("iss", settings.issuer)] : [])
        let separator = uri.contains("?") ? "&" : "?"
        var response = Response.redirect(to: uri + separator + FormEncoding.encode(pairs), type: .found)
        response.headers[.cacheControl] = "no-store"
        return response
    }

    /// The request's parameters: the query of a GET, the form of a POST. A parameter given twice is refused (RFC 6749 §3.1).
    static func parameters(of request: Request, context: ServerContext) async throws -> [String: String] {
        do {
            if request.method == .post {
                var request = request
                let body = try await request.collectBody(upTo: 16_384)
                return try CallbackPayload.parseFields(body.readableBytesView)
            }
            return try CallbackPayload.parseFields(Array((request.uri.query ?? "").utf8))
        } catch {
            context.logger.notice("OpenID request refused: malformed parameters")
            throw ErrorPage(key: "oidcRequest", status: .badRequest)
        }
    }

    /// RFC 7636's characters of a code verifier or challenge.
    static func isUnreserved(_ byte: UInt8) -> Bool {
        (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39)
            || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "~")
    }

    // MARK: end session

    /// RP-initiated logout: `post_logout_redirect_uri` only when registered for the client (named by `client_id`
    /// or by the `aud` of `id_token_hint`); a signed-in person confirms first (a link alone signs nobody out), then
    /// the session ends and the browser goes there with `state`.
    @Sendable func endSession(_ request: Request, context: ServerContext) async throws -> Response {
        let parameters = try await Self.parameters(of: request, context: context)
        // A hint this provider did not sign names no client: it is ignored (and said in the log).
        var hintAudience: String?
        if let hint = parameters["id_token_hint"] {
            if await keys.verifiesHint(hint, issuer: settings.issuer) {
                hintAudience = Self.audience(ofHint: hint)
            } else {
                context.logger.notice("end-session: an id_token_hint siwa did not sign is ignored")
            }
        }
        let clientID = parameters["client_id"] ?? hintAudience
        if let named = parameters["client_id"], let hintAudience, named != hintAudience {
            context.logger.notice("end-session refused: client_id and id_token_hint name different clients")
            throw ErrorPage(key: "oidcLogout", status: .badRequest)
        }
        var target: String?
        if let uri = parameters["post_logout_redirect_uri"] {
            let client: ProviderClientRecord?
            do {
                client = if let clientID { try await clients.client(clientID) } else { nil }
            } catch {
                context.logger.error("store unavailable", metadata: ["error": "\(error)"])
                throw ErrorPage.storeUnavailable(retryURL: request.uri.description)
            }
            guard let client, client.postLogoutRedirectURIs.contains(uri) else {
                context.logger.notice("end-session refused: post_logout_redirect_uri not registered", metadata: ["client_id": "\(clientID?.prefix(64) ?? "none")"])
                throw ErrorPage(key: "oidcLogout", status: .badRequest)
            }
            let separator = uri.contains("?") ? "&" : "?"
            target = parameters["state"].map { uri + separator + FormEncoding.encode([("state", $0)]) } ?? uri
        }
        let session: SessionRecord
        let user: UserRecord
        switch context.visitor {
        case .signedIn(let found, let foundUser): (session, user) = (found, foundUser)
        case .storeUnavailable(let retryURL): throw ErrorPage.storeUnavailable(retryURL: retryURL)
        case .anonymous(let hadCookie):
            var response = Response.redirect(to: target ?? "/", type: .found)
            if hadCookie { response.setCookie(cookies.expired(cookies.sessionName)) }
            return response
        case .notLooked, .bearer, .badToken: throw ErrorPage.internal()
        }
        guard request.method == .post, let token = parameters["csrf_token"] else {
            let language = request.pageLanguage
            var page = renderer.page(
                "endsession", title: renderer.string("endSessionHeading", language), language: language,
                slots: [
                    "csrfToken": session.csrfToken, "who": user.displayName ?? user.email ?? user.subject,
                    "clientID": target == nil ? "" : clientID ?? "", "postLogoutRedirectURI": parameters["post_logout_redirect_uri"] ?? "",
                    "state": target == nil ? "" : parameters["state"] ?? "",
                ]
            )
            page.allowFormRedirect(to: target)
            return page
        }
        return try await SessionController.end(
            session, csrfToken: token, store: store, cookies: cookies, goingTo: target ?? "/", logger: context.logger,
            metadata: ["by": "end-session", "client_id": "\(clientID ?? "none")"], audit: audit, user: user
        )
    }

    /// The `aud` of an id_token siwa issued, read without verifying it: it only names which client's registered
    /// URIs a redirect may go to, which the client id alone would do as well.
    static func audience(ofHint token: String) -> String? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let payload = Base64URL.decode(parts[1]),
            let object = try? JSONSerialization.jsonObject(with: payload) as? [String: Any]
        else { return nil }
        if let audience = object["aud"] as? String { return audience }
        return (object["aud"] as? [String])?.first
    }
}

/// What `/.well-known/openid-configuration` says (OpenID Connect Discovery 1.0 §3).
struct DiscoveryDocument: Encodable {
    var issuer: String
    var authorization_endpoint: String
    var token_endpoint: String
    var userinfo_endpoint: String
    var jwks_uri: String
    var revocation_endpoint: String
    var end_session_endpoint: String
    var device_authorization_endpoint: String
    var introspection_endpoint: String
    var scopes_supported: [String]
    var response_types_supported: [String]
    var response_modes_supported: [String]
    var grant_types_supported: [String]
    var subject_types_supported: [String]
    var id_token_signing_alg_values_supported: [String]
    var token_endpoint_auth_methods_supported: [String]
    var revocation_endpoint_auth_methods_supported: [String]
    var code_challenge_methods_supported: [String]
    var claims_supported: [String]
    var prompt_values_supported: [String]
    var authorization_response_iss_parameter_supported: Bool
    var claims_parameter_supported: Bool
    var request_parameter_supported: Bool
    var request_uri_parameter_supported: Bool
    var backchannel_logout_supported: Bool
    var backchannel_logout_session_supported: Bool
}
