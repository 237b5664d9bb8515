import AppleSignIn
import Crypto
import CryptoExtras
import Foundation
import JOSE
import Logging
import Synchronization

/// The keys siwa signs its id_tokens with: the same store as the front's assertion keys (`SigningKeyStore`),
/// shared by every instance. RS256 keys (what every OpenID Connect client must accept) are created on first start;
/// ES256 ones are the assertion's, for clients registered with `id_token_signed_response_alg: ES256`. A key is
/// published from creation, signs from activation, and is published until it retires (`siwa keys rotate`).
public final class ProviderKeys: Sendable {
    /// How long the key list is kept before the store is read again (a rotation by another instance is seen within it).
    static let refresh: TimeInterval = 30

    let store: any SigningKeyStore
    let logger: Logger

    private enum Key: Sendable {
        case rsa(_RSA.Signing.PrivateKey)
        case ec(P256.Signing.PrivateKey)
    }

    private struct Loaded: Sendable {
        var record: SigningKeyRecord
        var key: Key
    }

    private struct State {
        var keys: [Loaded] = []
        var loadedAt: Date = .distantPast
        var pairwiseSecret: String?
    }

    private let state = Mutex(State())

    public init(store: any SigningKeyStore, logger: Logger) {
        self.store = store
        self.logger = logger
    }

    /// Creates the first RS256 key when none can sign now (first start).
    public func prepare(now: Date = Date()) async throws {
        let keys = try await store.signingKeys()
        if !keys.contains(where: { $0.algorithm == "RS256" && $0.canSign(at: now) }) {
            try await store.addSigningKey(try Self.newRSAKey(now: now, activatesAt: now))
            logger.info("created the first id_token signing key (RS256)")
        }
        try await reload(now: now)
    }

    /// A new 2048-bit RSA key with a random kid.
    public static func newRSAKey(now: Date, activatesAt: Date) throws -> SigningKeyRecord {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        return SigningKeyRecord(kid: RandomToken.generate(byteCount: 9), privateKeyPEM: key.pemRepresentation, createdAt: now, activatesAt: activatesAt, algorithm: "RS256")
    }

    /// The public keys to publish (`jwks_uri`): every RS256 and ES256 key not retired, read from the store each
    /// time (clients cache the set; a key another instance has just created must be in it).
    public func keySet(now: Date = Date()) async throws -> [String: [[String: String]]] {
        try await reload(now: now)
        let keys = state.withLock { $0.keys }.filter { $0.record.isPublished(at: now) }
        return ["keys": try keys.map { loaded in
            switch loaded.key {
            case .rsa(let key):
                let primitives = try key.publicKey.getKeyPrimitives()
                return [
                    "kty": "RSA", "use": "sig", "alg": "RS256", "kid": loaded.record.kid,
                    "n": Base64URL.encode(primitives.modulus), "e": Base64URL.encode(primitives.publicExponent),
                ]
            case .ec(let key):
                return key.publicKey.jwk(kid: loaded.record.kid)
            }
        }]
    }

    /// `claims` signed with the newest key of `algorithm` that can sign now.
    func sign(_ claims: some Encodable, algorithm: String, now: Date = Date()) async throws -> String {
        try await current(now: now)
        func newest() -> Loaded? {
            state.withLock { state in state.keys.last { $0.record.algorithm == algorithm && $0.record.canSign(at: now) } }
        }
        if newest() == nil, algorithm == "RS256" { try await prepare(now: now) }
        guard let signing = newest() else {
            throw ProviderConfigurationError("no \(algorithm) key can sign now; run siwa keys rotate")
        }
        let header = ["alg": algorithm, "kid": signing.record.kid, "typ": "JWT"]
        switch signing.key {
        case .rsa(let key): return try JWTSigning.rs256(header: header, claims: claims, key: key)
        case .ec(let key): return try JWTSigning.es256(header: header, claims: claims, key: key)
        }
    }

    // MARK: pairwise subjects

    /// The key store's record holding the secret of pairwise subjects (never published, never rotated: a new one
    /// would give every pairwise client new subjects).
    static let pairwiseAlgorithm = "pairwise-secret"

    /// `subject` as the client whose redirect URIs are on `sector` sees it (OpenID Connect Core §8.1): the SHA-256 of
    /// the sector, the subject and siwa's pairwise secret, base64url. Stable for that sector; unlinkable across
    /// sectors without the secret, which is made on first use and kept sealed in the store, shared by every instance.
    func pairwiseSubject(_ subject: String, sector: String) async throws -> String {
        var secret = state.withLock { $0.pairwiseSecret }
        if secret == nil {
            var stored = try await store.signingKeys().first { $0.algorithm == Self.pairwiseAlgorithm }
            if stored == nil {
                let now = Date()
                try await store.addSigningKey(SigningKeyRecord(
                    kid: "pairwise-" + RandomToken.generate(byteCount: 9), privateKeyPEM: RandomToken.generate(), createdAt: now, activatesAt: now,
                    algorithm: Self.pairwiseAlgorithm
                ))
                // Another instance may have made one at the same moment: every instance takes the oldest.
                stored = try await store.signingKeys().first { $0.algorithm == Self.pairwiseAlgorithm }
            }
            secret = stored?.privateKeyPEM
            state.withLock { $0.pairwiseSecret = secret }
        }
        guard let secret else { throw ProviderConfigurationError("the pairwise secret could not be stored") }
        return Base64URL.encode(SHA256.hash(data: Data((sector + "\u{0}" + subject + "\u{0}" + secret).utf8)))
    }

    private func current(now: Date) async throws {
        if state.withLock({ now.timeIntervalSince($0.loadedAt) < Self.refresh && now >= $0.loadedAt }) { return }
        try await reload(now: now)
    }

    private func reload(now: Date) async throws {
        let records = try await store.signingKeys()
        var loaded: [Loaded] = []
        for record in records {
            switch record.algorithm {
            case "RS256": loaded.append(Loaded(record: record, key: .rsa(try _RSA.Signing.PrivateKey(pemRepresentation: record.privateKeyPEM))))
            case "ES256": loaded.append(Loaded(record: record, key: .ec(try P256.Signing.PrivateKey(pemRepresentation: record.privateKeyPEM))))
            case Self.pairwiseAlgorithm: continue
            default: logger.warning("signing key with an unknown algorithm ignored", metadata: ["kid": "\(record.kid)", "alg": "\(record.algorithm)"])
            }
        }
        state.withLock { state in
            state.keys = loaded
            state.loadedAt = now
        }
    }
}

extension P256.Signing.PublicKey {
    /// This key as a JWK of a key set (`kty` EC, `crv` P-256, `alg` ES256): the assertion's key set and the provider's.
    func jwk(kid: String) -> [String: String] {
        let raw = rawRepresentation
        return [
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
            "x": Base64URL.encode(raw.prefix(32)), "y": Base64URL.encode(raw.suffix(32)),
        ]
    }
}
