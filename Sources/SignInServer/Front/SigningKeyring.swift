import Crypto
import CryptoExtras
import Foundation
import Synchronization

/// The store's signing keys, parsed, and read from the store again at most every `refresh` seconds (a key another
/// instance created or rotated is seen within that): the cache of the front's assertion keys (`IdentityAssertions`,
/// ES256) and of the provider's id_token keys (`ProviderKeys`, RS256 and ES256), each holding one.
final class SigningKeyring: Sendable {
    /// How long the key list is kept before the store is read again.
    static let refresh: TimeInterval = 30

    enum Key: Sendable {
        case rsa(_RSA.Signing.PrivateKey)
        case ec(P256.Signing.PrivateKey)
    }

    struct Loaded: Sendable {
        var record: SigningKeyRecord
        var key: Key
    }

    let store: any SigningKeyStore
    /// The algorithms this ring loads; other keys of the store are left to their own users.
    let algorithms: Set<String>
    private let state = Mutex<(keys: [Loaded], loadedAt: Date)>(([], .distantPast))

    init(store: any SigningKeyStore, algorithms: Set<String>) {
        self.store = store
        self.algorithms = algorithms
    }

    /// The keys, oldest first: the copy in memory while it is younger than `refresh`, else (or when `fresh`) the
    /// store's.
    func keys(now: Date, fresh: Bool = false) async throws -> [Loaded] {
        if !fresh, let keys = state.withLock({ now.timeIntervalSince($0.loadedAt) < Self.refresh && now >= $0.loadedAt ? $0.keys : nil }) {
            return keys
        }
        return try await reload(now: now)
    }

    /// The newest key of `algorithm` that can sign at `now`.
    func signingKey(_ algorithm: String, now: Date) async throws -> Loaded? {
        try await keys(now: now).last { $0.record.algorithm == algorithm && $0.record.canSign(at: now) }
    }

    /// Adds the key `make` gives when the store has no key of `algorithm` that can sign at `now` (first start);
    /// true when it did. The keys are read from the store again either way.
    func ensureSigningKey(_ algorithm: String, now: Date, make: () throws -> SigningKeyRecord) async throws -> Bool {
        let records = try await store.signingKeys()
        var made = false
        if !records.contains(where: { $0.algorithm == algorithm && $0.canSign(at: now) }) {
            try await store.addSigningKey(try make())
            made = true
        }
        _ = try await reload(now: now)
        return made
    }

    private func reload(now: Date) async throws -> [Loaded] {
        var loaded: [Loaded] = []
        for record in try await store.signingKeys() where algorithms.contains(record.algorithm) {
            let key: Key = record.algorithm == "RS256"
                ? .rsa(try _RSA.Signing.PrivateKey(pemRepresentation: record.privateKeyPEM))
                : .ec(try P256.Signing.PrivateKey(pemRepresentation: record.privateKeyPEM))
            loaded.append(Loaded(record: record, key: key))
        }
        state.withLock { $0 = (loaded, now) }
        return loaded
    }
}
