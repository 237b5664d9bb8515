import JOSE
import Foundation
import Synchronization

/// Signs the ES256 client secret Apple's token and revoke endpoints require (APPLE.md §4), and reuses it:
/// a secret is re-signed only after 80% of its lifetime. Safe to call from many tasks at once.
public final class ClientSecretSigner: Sendable {
    /// The claims of a client secret.
    public struct Claims: Codable, Sendable, Hashable {
        /// Team ID.
        public var iss: String
        /// Issued at (seconds since 1970).
        public var iat: Int
        /// Expiry (seconds since 1970).
        public var exp: Int
        /// Always `https://appleid.apple.com`, also for the emulator.
        public var aud: String
        /// The `client_id` the secret is for.
        public var sub: String
    }

    private struct Cached {
        var secret: String
        var issuedAt: Date
        var expiresAt: Date
    }

    /// Apple's `aud` value for client secrets.
    public static let audience = "https://appleid.apple.com"

    private let teamID: TeamID
    private let keyID: KeyID
    private let key: SigningKey
    private let lifetime: TimeInterval
    private let cache = Mutex<[ClientID: Cached]>([:])
    private let signatureCount = Atomic<Int>(0)

    /// Creates a signer for one team and key.
    public init(teamID: TeamID, keyID: KeyID, key: SigningKey, lifetime: TimeInterval) {
        self.teamID = teamID
        self.keyID = keyID
        self.key = key
        self.lifetime = min(lifetime, AppleSignInConfiguration.maximumClientSecretLifetime)
    }

    /// Creates a signer from a validated configuration.
    public convenience init(configuration: AppleSignInConfiguration) {
        self.init(teamID: configuration.teamID, keyID: configuration.keyID, key: configuration.signingKey, lifetime: configuration.clientSecretLifetime)
    }

    /// How many secrets have been signed (not served from cache); exposed for metrics and tests.
    public var signatures: Int { signatureCount.load(ordering: .relaxed) }

    /// A valid client secret for `clientID`, from cache while less than 80% of its lifetime has passed.
    public func secret(for clientID: ClientID, now: Date = Date()) throws -> String {
        // Signing under the lock makes concurrent callers on a cold or expiring cache share one signature.
        try cache.withLock { cache in
            if let cached = cache[clientID], now < cached.issuedAt.addingTimeInterval(lifetime * 0.8), now >= cached.issuedAt {
                return cached.secret
            }
            let signed = try sign(for: clientID, now: now)
            cache[clientID] = signed
            return signed.secret
        }
    }

    /// Signs a fresh secret without touching the cache (the CLI's `client-secret`).
    public func signFresh(for clientID: ClientID, now: Date = Date()) throws -> (secret: String, expiresAt: Date) {
        let signed = try sign(for: clientID, now: now)
        return (signed.secret, signed.expiresAt)
    }

    private func sign(for clientID: ClientID, now: Date) throws -> Cached {
        let issuedAt = Int(now.timeIntervalSince1970)
        let expiresAt = issuedAt + Int(lifetime)
        let claims = Claims(iss: teamID.rawValue, iat: issuedAt, exp: expiresAt, aud: Self.audience, sub: clientID.rawValue)
        let secret = try JWTSigning.es256(header: ["alg": "ES256", "kid": keyID.rawValue], claims: claims, key: key.privateKey)
        signatureCount.add(1, ordering: .relaxed)
        return Cached(secret: secret, issuedAt: Date(timeIntervalSince1970: TimeInterval(issuedAt)), expiresAt: Date(timeIntervalSince1970: TimeInterval(expiresAt)))
    }
}
