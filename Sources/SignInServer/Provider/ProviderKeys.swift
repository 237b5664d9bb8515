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
    let store: any SigningKeyStore
    let logger: Logger
    /// The RS256 and ES256 keys of the store.
    private let keyring: SigningKeyring
    /// The secret of pairwise subjects, once read or made.
    private let pairwiseSecret = Mutex<String?>(nil)

    public init(store: any SigningKeyStore, logger: Logger) {
        self.store = store
        self.logger = logger
        keyring = SigningKeyring(store: store, algorithms: ["RS256", "ES256"])
    }

    /// Creates the first RS256 key when none can sign now (first start).
    public func prepare(now: Date = Date()) async throws {
        // Active from a second before it is made (see `IdentityAssertions.prepare`: a date read back from the store
        // may be a hair later than the one written, and the key would not sign at the moment it was made for).
        if try await keyring.ensureSigningKey("RS256", now: now, make: { try Self.newRSAKey(now: now, activatesAt: now.addingTimeInterval(-1)) }) {
            logger.info("created the first id_token signing key (RS256)")
        }
    }

    /// A new 2048-bit RSA key with a random kid.
    public static func newRSAKey(now: Date, activatesAt: Date) throws -> SigningKeyRecord {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        return SigningKeyRecord(kid: RandomToken.generate(byteCount: 9), privateKeyPEM: key.pemRepresentation, createdAt: now, activatesAt: activatesAt, algorithm: "RS256")
    }

    /// The public keys to publish (`jwks_uri`): every RS256 and ES256 key not retired, read from the store each
    /// time (clients cache the set; a key another instance has just created must be in it).
    public func keySet(now: Date = Date()) async throws -> [String: [[String: String]]] {
        let keys = try await keyring.keys(now: now, fresh: true).filter { $0.record.isPublished(at: now) }
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
    func sign(_ claims: some Encodable, algorithm: String, type: String = "JWT", now: Date = Date()) async throws -> String {
        var signing = try await keyring.signingKey(algorithm, now: now)
        if signing == nil, algorithm == "RS256" {
            try await prepare(now: now)
            signing = try await keyring.signingKey(algorithm, now: now)
        }
        guard let signing else {
            throw ProviderConfigurationError("no \(algorithm) key can sign now; run siwa keys rotate")
        }
        let header = ["alg": algorithm, "kid": signing.record.kid, "typ": type]
        switch signing.key {
        case .rsa(let key): return try JWTSigning.rs256(header: header, claims: claims, key: key)
        case .ec(let key): return try JWTSigning.es256(header: header, claims: claims, key: key)
        }
    }

    /// Whether `token` is a JWT this provider signed with one of its published keys (RS256 or ES256, by `kid`) and
    /// issued as `issuer`: an `id_token_hint` is believed only then (RP-Initiated Logout 1.0 §2). Its expiry is not
    /// checked: a hint is commonly an id_token that has expired.
    func verifiesHint(_ token: String, issuer: String, now: Date = Date()) async -> Bool {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerData = Base64URL.decode(String(parts[0])), let payload = Base64URL.decode(String(parts[1])),
            let signature = Base64URL.decode(String(parts[2])),
            let header = try? JSONSerialization.jsonObject(with: headerData) as? [String: Any], let kid = header["kid"] as? String,
            let claims = try? JSONSerialization.jsonObject(with: payload) as? [String: Any], claims["iss"] as? String == issuer,
            let keys = try? await keyring.keys(now: now), let loaded = keys.first(where: { $0.record.kid == kid && $0.record.isPublished(at: now) })
        else { return false }
        let input = Data((parts[0] + "." + parts[1]).utf8)
        switch (header["alg"] as? String, loaded.key) {
        case ("RS256", .rsa(let key)):
            return key.publicKey.isValidSignature(
                _RSA.Signing.RSASignature(rawRepresentation: signature), for: SHA256.hash(data: input), padding: .insecurePKCS1v1_5
            )
        case ("ES256", .ec(let key)):
            guard let parsed = try? P256.Signing.ECDSASignature(rawRepresentation: signature) else { return false }
            return key.publicKey.isValidSignature(parsed, for: input)
        default:
            return false
        }
    }

    /// The `sid` `clientID` is told for the siwa session `sessionSID` (id_tokens, Logout Tokens): its own, so two
    /// clients (pairwise ones above all) cannot link a person through a shared session id.
    static func sid(_ sessionSID: String, for clientID: String) -> String {
        String(SessionCookie.digest("siwa-client-sid:" + clientID + "\u{1}" + sessionSID).prefix(32))
    }

    // MARK: pairwise subjects

    /// `subject` as `client` knows it: pairwise for a pairwise client, Apple's otherwise (id_tokens, userinfo, and
    /// Logout Tokens name the person alike).
    func subject(_ subject: String, for client: ProviderClientRecord) async throws -> String {
        guard client.pairwiseSubject, let sector = client.sector else { return subject }
        return try await pairwiseSubject(subject, sector: sector)
    }

    /// The key store's record holding the secret of pairwise subjects (never published, never rotated: a new one
    /// would give every pairwise client new subjects).
    static let pairwiseAlgorithm = "pairwise-secret"

    /// `subject` as the client whose redirect URIs are on `sector` sees it (OpenID Connect Core §8.1): the SHA-256 of
    /// the sector, the subject and siwa's pairwise secret, base64url. Stable for that sector; unlinkable across
    /// sectors without the secret, which is made on first use and kept sealed in the store, shared by every instance.
    func pairwiseSubject(_ subject: String, sector: String) async throws -> String {
        var secret = pairwiseSecret.withLock { $0 }
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
            pairwiseSecret.withLock { $0 = secret }
        }
        guard let secret else { throw ProviderConfigurationError("the pairwise secret could not be stored") }
        return Base64URL.encode(SHA256.hash(data: Data((sector + "\u{0}" + subject + "\u{0}" + secret).utf8)))
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
