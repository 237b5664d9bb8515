import AppleSignIn
import Foundation
import Logging

/// Sign-in for native iOS apps: they send the `identityToken` and `authorizationCode` that
/// `ASAuthorizationAppleIDCredential` gives them; the audience is the app's bundle ID.
public struct NativeSignIn: Sendable {
    let store: any UsersAndSessions
    let verifier: IdentityTokenVerifier
    let client: AppleIDClient
    let sessionLifetime: TimeInterval

    /// Creates the native flow; `verifier` accepts the bundle IDs only.
    public init(store: any UsersAndSessions, verifier: IdentityTokenVerifier, client: AppleIDClient, sessionLifetime: TimeInterval) {
        self.store = store
        self.verifier = verifier
        self.client = client
        self.sessionLifetime = sessionLifetime
    }

    /// What an app sends.
    public struct Request: Decodable, Sendable {
        /// The identity token (JWT) from the credential.
        public var identityToken: String
        /// The authorization code from the credential.
        public var authorizationCode: String
        /// The raw nonce the app generated, if it set one (its SHA-256 is in the request to Apple).
        public var nonce: String?
        /// First-time only: the name the credential carried.
        public var firstName: String?
        /// First-time only.
        public var lastName: String?
        /// First-time only: the email the credential carried.
        public var email: String?
    }

    /// A session for the app.
    public struct Session: Encodable, Sendable {
        /// Bearer token for `Authorization: Bearer …`.
        public var sessionToken: String
        /// When it expires.
        public var expiresAt: Date
        /// Apple's user id.
        public var sub: String
        /// When the person last authenticated with Apple for this session (what `max_auth_age` measures).
        public var authTime: Date

        enum CodingKeys: String, CodingKey {
            case sessionToken = "session_token", expiresAt = "expires_at", sub, authTime = "auth_time"
        }
    }

    /// The app's current session, sent as `Authorization: Bearer` with a fresh identity token and code: renewed in
    /// place when the token names the same person and app (`renew`).
    public struct Current: Sendable {
        public var token: String
        public var session: SessionRecord
    }

    /// Verifies the identity token, exchanges the code with the bundle ID as `client_id`, and opens a session.
    /// `details`: the app's `User-Agent` and address, for the person's sessions page (`via` is set here).
    /// With `current` (the app's session of the same person and app), that session is renewed instead: the same token,
    /// its authentication time now Apple's (`renewAuthentication`), so a rule's `max_auth_age` lets it in again.
    public func signIn(_ request: Request, details: SessionDetails? = nil, current: Current? = nil, logger: Logger, now: Date = Date()) async throws(SignInFailure) -> Session {
        let front: AppleIdentity
        do {
            front = try await verifier.verify(request.identityToken, nonce: request.nonce, now: now)
        } catch {
            throw SignInFlow.failure(error, "identityToken")
        }
        guard let bundleID = try? ClientID(front.audience, field: "aud") else { throw .notVerified("audience is not a bundle ID") }
        let tokens: TokenResponse
        do {
            tokens = try await client.exchange(code: request.authorizationCode, redirectURI: nil, clientID: bundleID, logger: logger)
        } catch {
            throw SignInFailure(exchange: error)
        }
        if let idToken = tokens.idToken {
            do {
                let back = try await verifier.verify(idToken, now: now)
                guard back.subject == front.subject else { throw SignInFailure.notVerified("sub differs between identityToken and the token endpoint") }
            } catch let failure as SignInFailure {
                throw failure
            } catch {
                throw .notVerified("token-endpoint id_token: \(error)")
            }
        }
        let authTime = front.authTime.map { min($0, now) } ?? now
        if let current, current.session.subject == front.subject, current.session.bearerClient == bundleID.rawValue {
            let renewed: Bool
            do {
                renewed = try await store.renewAuthentication(idHash: current.session.idHash, subject: front.subject, at: authTime)
            } catch {
                throw .storeUnavailable("store: \(error)")
            }
            if renewed {
                logger.info("native session renewed", metadata: ["sub": "\(front.subject)", "bundle_id": "\(bundleID)"])
                return Session(sessionToken: current.token, expiresAt: current.session.expiresAt, sub: front.subject, authTime: authTime)
            }
        }
        let sessionID = RandomToken.generate()
        let email = front.email ?? request.email
        let expiresAt = now.addingTimeInterval(sessionLifetime)
        do {
            _ = try await store.completeSignIn(CompletedSignIn(
                subject: front.subject, email: email,
                isPrivateEmail: CompletedSignIn.isPrivate(email: email, asserted: front.isPrivateEmail),
                firstName: Self.nonEmpty(request.firstName), lastName: Self.nonEmpty(request.lastName),
                refreshToken: tokens.refreshToken, clientID: bundleID.rawValue, transferSubject: front.transferSubject,
                session: SessionRecord(
                    idHash: SignInFlow.hash(sessionID), subject: front.subject, csrfToken: RandomToken.generate(), createdAt: now, expiresAt: expiresAt,
                    details: details.map { SessionDetails(device: $0.device, network: $0.network, via: "native:" + bundleID.rawValue) },
                    authTime: authTime
                ),
                at: now
            ))
        } catch {
            throw .storeUnavailable("store: \(error)")
        }
        logger.info("native sign-in", metadata: ["sub": "\(front.subject)", "bundle_id": "\(bundleID)"])
        return Session(sessionToken: sessionID, expiresAt: expiresAt, sub: front.subject, authTime: authTime)
    }

    private static func nonEmpty(_ text: String?) -> String? {
        guard let text = text?.trimmingCharacters(in: .whitespacesAndNewlines), !text.isEmpty else { return nil }
        return text
    }
}
