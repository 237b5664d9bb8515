import AppleSignIn
import Foundation
import Logging

/// The sign-in flow of ARCHITECTURE.md steps 2–3, independent of HTTP: start an authorization, complete it.
public struct SignInFlow: Sendable {
    /// How long a started sign-in stays usable.
    public static let pendingLifetime: TimeInterval = 600

    let configuration: AppleSignInConfiguration
    let returnURL: URL
    let store: any PendingSignIns & UsersAndSessions
    let verifier: IdentityTokenVerifier
    let client: AppleIDClient
    let sessionLifetime: TimeInterval

    /// Creates the flow.
    public init(configuration: AppleSignInConfiguration, returnURL: URL, store: any PendingSignIns & UsersAndSessions, verifier: IdentityTokenVerifier, client: AppleIDClient, sessionLifetime: TimeInterval) {
        self.configuration = configuration
        self.returnURL = returnURL
        self.store = store
        self.verifier = verifier
        self.client = client
        self.sessionLifetime = sessionLifetime
    }

    /// A started sign-in: where to send the browser and the binding cookie value to set.
    public struct Started: Sendable {
        /// Apple's authorize URL with our parameters.
        public var authorizeURL: URL
        /// The binding cookie value (random; only its hash is stored).
        public var bindingToken: String
    }

    /// Creates a pending authorization and the authorize URL. `invitationHash`: the invitation the sign-in was started
    /// from (its token's hash), used for the person when it completes.
    public func start(returnTo: String, responseMode: ResponseMode = .formPost, invitationHash: String? = nil, now: Date = Date()) async throws -> Started {
        let request = try AuthorizationRequest(
            clientID: configuration.servicesID, redirectURI: returnURL,
            // Apple refuses an id_token returned in a query string: query mode asks for the code alone.
            responseType: responseMode == .query ? .code : .codeIDToken, responseMode: responseMode, scopes: responseMode == .formPost || responseMode == .webMessage ? [.name, .email] : []
        )
        let binding = RandomToken.generate()
        try await store.savePending(PendingAuthorization(
            state: request.state, nonce: request.nonce, returnTo: returnTo, bindingHash: Self.hash(binding),
            createdAt: now, expiresAt: now.addingTimeInterval(Self.pendingLifetime), invitationHash: invitationHash
        ))
        return Started(authorizeURL: request.url(base: configuration.authorizeBaseURL), bindingToken: binding)
    }

    /// A completed sign-in: the new session id (for the cookie) and where to go.
    public struct Completed: Sendable {
        /// The session id to put in the cookie (only its hash is stored).
        public var sessionID: String
        /// The relative path to return to.
        public var returnTo: String
        /// The user as stored.
        public var user: UserRecord
        /// The invitation the sign-in was started from (its token's hash), to use for `user`.
        public var invitationHash: String? = nil
    }

    /// Validates Apple's return and signs the user in. `bindingToken` is the binding cookie sent back, if any.
    /// `requireFrontChannelToken` is true for form_post and popup returns (requested `code id_token`), false for query mode.
    /// `details`: the browser and network of the request (its `via` is set here, from where the sign-in returns).
    public func complete(
        _ payload: CallbackPayload, bindingToken: String?, requireFrontChannelToken: Bool = true, details: SessionDetails? = nil, logger: Logger, now: Date = Date()
    ) async throws(SignInFailure) -> Completed {
        if let error = payload.error {
            // An error return ends the sign-in only for the browser that started it: the same binding check as a
            // successful return, so a forged cancellation cannot use up someone else's pending sign-in.
            if let state = payload.state, let pending = try? await store.consumePending(state: state, now: now),
                !Self.binds(bindingToken, pending)
            {
                logger.notice("an error return without the binding of the browser that started the sign-in; it stays pending")
                try? await store.savePending(pending)
                throw .expired
            }
            if error == "user_cancelled_authorize" || error == "popup_closed_by_user" { throw .cancelled }
            throw .notVerified("Apple returned error \(error)")
        }
        guard let state = payload.state, !state.isEmpty else { throw .malformed("state is missing") }
        guard let code = payload.code, !code.isEmpty else { throw .malformed("code is missing") }

        let pending: PendingAuthorization
        do {
            guard let found = try await store.consumePending(state: state, now: now) else { throw SignInFailure.expired }
            pending = found
        } catch let failure as SignInFailure {
            throw failure
        } catch {
            throw .storeUnavailable("store: \(error)")
        }
        guard Self.binds(bindingToken, pending) else {
            // Not this browser's sign-in (or its cookie is gone): refused, but the sign-in stays pending for the
            // browser that started it, so a forged post cannot cancel someone else's sign-in.
            logger.notice("binding cookie missing or different from the one that started the sign-in")
            try? await store.savePending(pending)
            throw .expired
        }

        var frontSubject: String?
        if requireFrontChannelToken && payload.idToken == nil {
            throw .malformed("id_token is missing (the request asked for code id_token)")
        }
        let tokens: TokenResponse
        do throws(SignInFailure) {
            if let idToken = payload.idToken {
                do {
                    frontSubject = try await verifier.verify(idToken, nonce: pending.nonce, code: code, now: now).subject
                } catch {
                    throw Self.failure(error, "front-channel id_token")
                }
            }
            do {
                tokens = try await client.exchange(code: code, redirectURI: returnURL, logger: logger)
            } catch {
                throw SignInFailure(exchange: error)
            }
        } catch {
            // Apple could not be reached before the code was redeemed: the code may still be good, so the sign-in
            // goes back to pending and the same return can be sent again (the error page offers to).
            if case .unavailable = error { try? await store.savePending(pending) }
            throw error
        }
        guard let backIDToken = tokens.idToken else { throw .notVerified("the token endpoint returned no id_token") }
        let identity: AppleIdentity
        do {
            identity = try await verifier.verify(backIDToken, nonce: pending.nonce, now: now)
        } catch {
            throw Self.failure(error, "token-endpoint id_token")
        }
        if let frontSubject, frontSubject != identity.subject {
            throw .notVerified("sub differs between the front-channel and token-endpoint id_tokens")
        }

        let sessionID = RandomToken.generate()
        // The email comes only from a token Apple signed: the posted `user` JSON is unsigned, so its email is never
        // taken (it gives the first-time name, nothing else).
        let email = identity.email
        var session = SessionRecord(idHash: Self.hash(sessionID), subject: identity.subject, csrfToken: RandomToken.generate(), createdAt: now, expiresAt: now.addingTimeInterval(sessionLifetime))
        if var details {
            details.via = Self.via(returningTo: pending.returnTo)
            session.details = details
        }
        // Apple's own authentication time when its token says (never later than now: a clock ahead of ours).
        session.authTime = identity.authTime.map { min($0, now) }
        let completed = CompletedSignIn(
            subject: identity.subject, email: email,
            isPrivateEmail: CompletedSignIn.isPrivate(email: email, asserted: identity.isPrivateEmail),
            firstName: payload.user?.firstName, lastName: payload.user?.lastName,
            refreshToken: tokens.refreshToken, clientID: configuration.servicesID.rawValue, transferSubject: identity.transferSubject,
            session: session,
            at: now
        )
        let user: UserRecord
        do {
            user = try await store.completeSignIn(completed)
        } catch {
            throw .storeUnavailable("store: \(error)")
        }
        logger.info("signed in", metadata: ["sub": "\(identity.subject)", "first_time": "\(payload.user != nil)"])
        return Completed(sessionID: sessionID, returnTo: pending.returnTo, user: user, invitationHash: pending.invitationHash)
    }

    /// A token that did not verify is a refusal, unless Apple's key set could not be loaded: that is an outage.
    static func failure(_ error: IdentityTokenError, _ which: String) -> SignInFailure {
        error.check == .keySetUnavailable ? .unavailable("\(which): \(error)") : .notVerified("\(which): \(error)")
    }

    /// True when `bindingToken` is the binding cookie of the browser that started `pending`.
    static func binds(_ bindingToken: String?, _ pending: PendingAuthorization) -> Bool {
        guard let bindingToken else { return false }
        return ConstantTime.equals(Self.hash(bindingToken), pending.bindingHash)
    }

    /// SHA-256 hex: how binding tokens and session ids are stored.
    /// How a sign-in that returns to `returnTo` came: `client:<client_id>` for an OpenID client's authorization, else
    /// `page`.
    static func via(returningTo returnTo: String) -> String {
        guard let components = URLComponents(string: returnTo), components.path.hasSuffix("/oauth2/authorize"),
            let client = components.queryItems?.first(where: { $0.name == "client_id" })?.value, !client.isEmpty
        else { return "page" }
        return "client:" + String(client.prefix(100))
    }

    public static func hash(_ secret: String) -> String {
        SessionCookie.digest(secret)
    }

    /// Accepts only a relative path on this site (no scheme, no `//host`, no backslash tricks); `fallback` otherwise
    /// (siwa's session page; the site's home page in front of an upstream).
    public static func safeReturnPath(_ candidate: String?, otherwise fallback: String = "/session") -> String {
        guard let candidate, candidate.hasPrefix("/"), !candidate.hasPrefix("//"), !candidate.contains("\\"),
            candidate.utf8.count <= 512, !candidate.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
        else { return fallback }
        return candidate
    }
}
