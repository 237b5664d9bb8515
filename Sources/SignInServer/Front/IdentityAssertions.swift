import AppleSignIn
import Crypto
import Foundation
import JOSE
import Logging
import Synchronization

/// `X-Siwa-Assertion`: a short JWT siwa signs (ES256, header `kid`) saying who is asking, so an upstream that
/// others can reach trusts only what siwa signed. Keys live in the store, shared by every instance: created on
/// first start, published at `/.well-known/siwa/jwks.json` from creation, used from activation (`siwa keys
/// rotate` publishes the next one ahead of use), published until they retire.
public final class IdentityAssertions: Sendable {
    /// How long an assertion is valid (`exp` = `iat` + 60).
    public static let lifetime: TimeInterval = 60
    /// How long a signed assertion is handed out again for the same person and audience: signing every forward-auth
    /// check would cost more than the rest of the check.
    static let reuse: TimeInterval = 20

    let store: any SigningKeyStore
    let issuer: String
    let logger: Logger
    /// The ES256 keys of the store.
    private let keyring: SigningKeyring
    /// The assertions signed lately, by subject and audience.
    private let recent = Mutex(Recent())

    public init(store: any SigningKeyStore, issuer: String, logger: Logger) {
        self.store = store
        self.issuer = issuer
        self.logger = logger
        keyring = SigningKeyring(store: store, algorithms: ["ES256"])
    }

    /// Creates the first key when the store has none that can sign now (first start).
    public func prepare(now: Date = Date()) async throws {
        // Active from a second before it is made: stored as seconds since 1970 and read back, `now` may come back a
        // hair later than itself, and a key active "from now" would then not sign now ("no key can sign").
        if try await keyring.ensureSigningKey("ES256", now: now, make: { Self.newKey(now: now, activatesAt: now.addingTimeInterval(-1)) }) {
            logger.info("created the first identity assertion signing key")
        }
    }

    /// A new P-256 key with a random kid.
    public static func newKey(now: Date, activatesAt: Date) -> SigningKeyRecord {
        let key = P256.Signing.PrivateKey()
        return SigningKeyRecord(kid: RandomToken.generate(byteCount: 9), privateKeyPEM: key.pemRepresentation, createdAt: now, activatesAt: activatesAt)
    }

    /// The public keys to publish: every key not retired.
    public func publishedKeySet(now: Date = Date()) async throws -> [String: [[String: String]]] {
        let keys = try await keyring.keys(now: now).filter { $0.record.isPublished(at: now) }
        return ["keys": keys.compactMap { loaded in
            guard case .ec(let key) = loaded.key else { return nil }
            return key.publicKey.jwk(kid: loaded.record.kid)
        }]
    }

    private struct Claims: Encodable {
        var iss: String
        var aud: String
        var sub: String
        var email: String?
        var email_verified: Bool?
        var is_private_email: Bool
        var name: String?
        var groups: [String]
        /// The client that holds the bearer token the request came with (OpenID Connect's `azp`); absent for a
        /// browser's cookie.
        var azp: String?
        /// When the person last authenticated with Apple for the session or token that let them in (OpenID
        /// Connect's `auth_time`).
        var auth_time: Int?
        var iat: Int
        var exp: Int
    }

    /// The assertion for `user`, in `groups` now, addressed to `audience` (an origin), or nil when no key can sign
    /// (logged).
    /// `client`: the client holding the bearer token the request came with (`azp`), nil for a browser.
    func assertion(for person: Admission.Person, audience: String, now: Date = Date()) async -> String? {
        let (user, groups, client) = (person.user, person.groups, person.client)
        if let recent = recentAssertion(for: person, audience: audience, now: now) { return recent }
        let cacheKey = CacheKey(subject: user.subject, audience: audience, client: client)
        do {
            var signing = try await keyring.signingKey("ES256", now: now)
            if signing == nil {
                try await prepare(now: now)
                signing = try await keyring.signingKey("ES256", now: now)
            }
            guard let signing, case .ec(let key) = signing.key else {
                logger.error("no identity assertion key can sign now; run siwa keys rotate")
                return nil
            }
            let issuedAt = Int(now.timeIntervalSince1970)
            let claims = Claims(
                iss: issuer, aud: audience, sub: user.subject, email: user.email, email_verified: user.email == nil ? nil : true,
                is_private_email: user.isPrivateEmail, name: user.displayName, groups: groups, azp: client,
                auth_time: person.authenticatedAt.map { Int($0.timeIntervalSince1970) }, iat: issuedAt,
                exp: issuedAt + Int(Self.lifetime)
            )
            let token = try JWTSigning.es256(header: ["alg": "ES256", "kid": signing.record.kid, "typ": "JWT"], claims: claims, key: key)
            self.recent.withLock { $0.keep(Signed(token: token, groups: groups, authenticatedAt: person.authenticatedAt, issuedAt: now, user: user), for: cacheKey) }
            return token
        } catch {
            logger.error("identity assertion not signed", metadata: ["error": "\(String(describing: type(of: error)))"])
            return nil
        }
    }

    /// The assertion signed for `user` and `audience` in the last `reuse` seconds, if any, when it says what the
    /// identity fields beside it say: the same `groups`, sign-in time, email and name (a change is in force at once,
    /// as Apple's account events change the email): no signing, no store, so it can be asked on an event loop (the
    /// front's fast path); nil sends the caller to `assertion`.
    func recentAssertion(for person: Admission.Person, audience: String, now: Date = Date()) -> String? {
        let cacheKey = CacheKey(subject: person.user.subject, audience: audience, client: person.client)
        guard let recent = self.recent.withLock({ $0.find(cacheKey) }), now.timeIntervalSince(recent.issuedAt) < Self.reuse, recent.issuedAt <= now,
            recent.groups == person.groups, recent.authenticatedAt == person.authenticatedAt, recent.says(person.user)
        else {
            return nil
        }
        return recent.token
    }

    /// What an assertion kept in `recent` is for: one per person, audience and client (a browser's and an app's say
    /// different `azp`); its parts as they are, not joined (joining them cost an allocation on each request of the
    /// byte path).
    struct CacheKey: Hashable, Sendable {
        let subject: String
        let audience: String
        let client: String?
    }

    /// An assertion signed: for whom in which groups, since when authenticated, and when.
    struct Signed: Sendable {
        let token: String
        let groups: [String]
        let authenticatedAt: Date?
        let issuedAt: Date
        /// The user record's parts the claims were made of (`email`, `is_private_email`, `name`).
        let email: String?
        let isPrivateEmail: Bool
        let firstName: String?
        let lastName: String?

        init(token: String, groups: [String], authenticatedAt: Date?, issuedAt: Date, user: UserRecord) {
            self.token = token
            self.groups = groups
            self.authenticatedAt = authenticatedAt
            self.issuedAt = issuedAt
            email = user.email
            isPrivateEmail = user.isPrivateEmail
            firstName = user.firstName
            lastName = user.lastName
        }

        /// Whether its claims say of the person what `user` says now.
        func says(_ user: UserRecord) -> Bool {
            email == user.email && isPrivateEmail == user.isPrivateEmail && firstName == user.firstName && lastName == user.lastName
        }
    }

    /// The assertions signed lately, by what each is for, and the one found or kept last: a connection's requests are
    /// mostly one person's, and comparing the key's strings (the same storage each time: the session cache's record,
    /// the settings' audience) costs a fraction of hashing them (callgrind: 980 instructions a request).
    private struct Recent: Sendable {
        private var byKey: [CacheKey: Signed] = [:]
        private var last: Kept?

        /// A key and its assertion (a struct: an optional tuple is copied through the run time's generic witnesses).
        private struct Kept {
            let key: CacheKey
            let signed: Signed
        }

        mutating func find(_ key: CacheKey) -> Signed? {
            if let last, last.key == key { return last.signed }
            guard let signed = byKey[key] else { return nil }
            last = Kept(key: key, signed: signed)
            return signed
        }

        mutating func keep(_ signed: Signed, for key: CacheKey) {
            if byKey.count >= 10_000 { byKey.removeAll(keepingCapacity: true) }
            byKey[key] = signed
            last = Kept(key: key, signed: signed)
        }
    }
}
