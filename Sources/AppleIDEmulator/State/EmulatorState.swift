import Crypto
import CryptoExtras
import Foundation
import JOSE

/// Everything the emulator remembers: codes, refresh tokens, consents, signing keys, faults, deliveries.
actor EmulatorState {
    struct CodeGrant: Sendable {
        /// What the identity tokens issued for this code assert.
        var identity: AppleIDEmulator.TokenSubject
        var redirectURI: String
        var expiresAt: Date
        var used = false

        var clientID: String { identity.clientID }
    }

    struct RefreshGrant: Sendable {
        /// What the identity tokens issued from this grant assert (no nonce: none was sent for a refresh).
        var identity: AppleIDEmulator.TokenSubject
        var revoked = false

        var clientID: String { identity.clientID }
        var subject: String { identity.subject }
    }

    /// A key of the set. Apple publishes a key before it signs with it and keeps a key it stopped signing with
    /// published for a while, so clients that cache the set never meet a `kid` they cannot find.
    struct SigningKeyEntry: Sendable {
        var kid: String
        var key: _RSA.Signing.PrivateKey
        /// When it starts signing; nil while only published.
        var activatesAt: Date?
        /// When it leaves the published set (set once a newer key signs in its place).
        var unpublishesAt: Date?
    }

    /// One recorded notification delivery.
    struct Delivery: Codable, Sendable {
        var id: String
        var type: String
        var subject: String
        var url: String
        var status: Int?
        var error: String?
        var at: Date
    }

    /// Counters shown by the admin API (and used by tests to show what happened).
    struct Counters: Codable, Sendable {
        var authorizations = 0
        var tokenRequests = 0
        var codesExchanged = 0
        var refreshes = 0
        var revocations = 0
        var keySetRequests = 0
    }

    private var codes: [String: CodeGrant] = [:]
    private var refreshTokens: [String: RefreshGrant] = [:]
    private var accessTokens: [String: (clientID: String, subject: String, expiresAt: Date)] = [:]
    private var migrationTokens: [String: (clientID: String, expiresAt: Date)] = [:]
    /// `transfer_sub` of users whose team transfer was looked up, per client, until the window closes.
    private var transfers: [String: (transferSubject: String, until: Date)] = [:]
    private var consents: Set<String> = []
    private(set) var signingKeys: [SigningKeyEntry]
    private var faults: [EmulatorEndpoint: EmulatorFault] = [:]
    private(set) var deliveries: [Delivery] = []
    private(set) var counters = Counters()
    /// The lowercase letter group in codes and tokens (Apple's varies by cluster; one per emulator here).
    let cluster: String
    /// How long a key stays published after a newer key took over its signing.
    let retiredKeyGrace: TimeInterval

    init(initialKeys: Int, retiredKeyGrace: TimeInterval = 2 * 86_400) throws {
        let start = Date()
        signingKeys = try (1...initialKeys).map { _ in try Self.makeKey(activatesAt: start) }
        cluster = RandomID.letters(4)
        self.retiredKeyGrace = retiredKeyGrace
    }

    // MARK: keys

    private static func makeKey(activatesAt: Date?) throws -> SigningKeyEntry {
        SigningKeyEntry(kid: RandomID.keyID(), key: try _RSA.Signing.PrivateKey(keySize: .bits2048), activatesAt: activatesAt)
    }

    /// Publishes a new key that signs from `activatesAt` on (nil: only once activated).
    func publishSigningKey(activatesAt: Date?) throws -> String {
        let entry = try Self.makeKey(activatesAt: activatesAt)
        signingKeys.append(entry)
        return entry.kid
    }

    /// Makes a published key sign from now on; false when it is unknown.
    func activateSigningKey(_ kid: String, now: Date) -> Bool {
        guard let index = signingKeys.firstIndex(where: { $0.kid == kid }) else { return false }
        signingKeys[index].activatesAt = min(signingKeys[index].activatesAt ?? now, now)
        return true
    }

    /// Removes a key from the set at once; false when it is unknown or the last one. When no remaining key has
    /// started signing, the newest starts now, so the emulator always has a signer.
    func retireSigningKey(_ kid: String, now: Date) -> Bool {
        guard signingKeys.count > 1, let index = signingKeys.firstIndex(where: { $0.kid == kid }) else { return false }
        signingKeys.remove(at: index)
        if activeKey(now: now) == nil, let newest = signingKeys.indices.last {
            signingKeys[newest].activatesAt = now
        }
        return true
    }

    /// The keys clients can fetch now: every key not yet past its grace after being replaced.
    func publishedKeys(now: Date) -> [SigningKeyEntry] {
        settleKeys(now: now)
        return signingKeys
    }

    /// The key that signs new tokens: the last one activated (keys published but not yet active do not sign).
    func activeKey(now: Date) -> SigningKeyEntry? {
        settleKeys(now: now)
        return signingKeys.last { ($0.activatesAt ?? .distantFuture) <= now }
    }

    /// Starts the grace period of keys a newer active key replaced, and drops keys whose grace has ended.
    private func settleKeys(now: Date) {
        guard let activeIndex = signingKeys.lastIndex(where: { ($0.activatesAt ?? .distantFuture) <= now }) else { return }
        let activeSince = signingKeys[activeIndex].activatesAt ?? now
        for index in signingKeys.indices where index < activeIndex && signingKeys[index].unpublishesAt == nil {
            if let activated = signingKeys[index].activatesAt, activated <= now {
                signingKeys[index].unpublishesAt = max(activeSince, activated).addingTimeInterval(retiredKeyGrace)
            }
        }
        signingKeys.removeAll { entry in entry.unpublishesAt.map { $0 <= now } ?? false }
    }

    // MARK: consent

    /// True the first time this user authorizes this client (then `user` is sent), recording consent.
    func recordConsent(clientID: String, subject: String) -> Bool {
        consents.insert(clientID + "\u{0}" + subject).inserted
    }

    // MARK: codes

    func issueCode(_ grant: CodeGrant) -> String {
        counters.authorizations += 1
        let code = RandomID.appleShaped("c", cluster: cluster)
        codes[code] = grant
        return code
    }

    enum RedeemFailure: Error { case unknown, used, expired, wrongClient, wrongRedirect }

    /// Redeems a code once.
    func redeemCode(_ code: String, clientID: String, redirectURI: String?, now: Date) -> Result<CodeGrant, RedeemFailure> {
        counters.tokenRequests += 1
        guard var grant = codes[code] else { return .failure(.unknown) }
        guard !grant.used else { return .failure(.used) }
        guard now < grant.expiresAt else { return .failure(.expired) }
        guard grant.clientID == clientID else { return .failure(.wrongClient) }
        guard redirectURI == grant.redirectURI || (redirectURI == nil && grant.redirectURI.isEmpty) else { return .failure(.wrongRedirect) }
        grant.used = true
        codes[code] = grant
        counters.codesExchanged += 1
        sweepCodes(now: now)
        return .success(grant)
    }

    private var redemptionsSinceSweep = 0

    /// Drops used and expired codes every 1 000 redemptions, so a long load test does not scan on every call.
    private func sweepCodes(now: Date) {
        redemptionsSinceSweep += 1
        guard redemptionsSinceSweep >= 1_000 else { return }
        redemptionsSinceSweep = 0
        codes = codes.filter { !$0.value.used && $0.value.expiresAt > now }
    }

    // MARK: tokens

    /// Access tokens live an hour, as Apple's (`expires_in` 3600).
    static let accessTokenLifetime: TimeInterval = 3600

    func issueTokens(for grant: RefreshGrant, withRefreshToken: Bool, now: Date) -> (access: String, refresh: String?) {
        let access = RandomID.appleShaped("a", cluster: cluster)
        accessTokens[access] = (grant.clientID, grant.subject, now.addingTimeInterval(Self.accessTokenLifetime))
        guard withRefreshToken else { return (access, nil) }
        let refresh = RandomID.appleShaped("r", cluster: cluster)
        refreshTokens[refresh] = grant
        return (access, refresh)
    }

    func refreshGrant(_ token: String, clientID: String) -> RefreshGrant? {
        counters.tokenRequests += 1
        guard let grant = refreshTokens[token], !grant.revoked, grant.clientID == clientID else { return nil }
        counters.refreshes += 1
        return grant
    }

    /// Revokes a refresh or access token of this client; revocation also forgets consent, as Apple does.
    func revoke(_ token: String, clientID: String, now: Date) {
        counters.revocations += 1
        var subject: String?
        if var grant = refreshTokens[token], grant.clientID == clientID {
            grant.revoked = true
            refreshTokens[token] = grant
            subject = grant.subject
        } else if let access = accessTokens[token], access.clientID == clientID, access.expiresAt > now {
            accessTokens[token] = nil
            subject = access.subject
        }
        guard let subject else { return }
        for (key, grant) in refreshTokens where grant.clientID == clientID && grant.subject == subject {
            refreshTokens[key]?.revoked = true
        }
        consents.remove(clientID + "\u{0}" + subject)
    }

    /// Forgets consent and tokens of a user for a client (a `consent-revoked` or `account-delete` event).
    func forget(subject: String, clientID: String) {
        for (key, grant) in refreshTokens where grant.clientID == clientID && grant.subject == subject {
            refreshTokens[key]?.revoked = true
        }
        consents.remove(clientID + "\u{0}" + subject)
    }

    func issueMigrationToken(clientID: String, now: Date) -> String {
        let token = RandomID.appleShaped("a", cluster: cluster)
        migrationTokens[token] = (clientID, now.addingTimeInterval(Self.accessTokenLifetime))
        return token
    }

    /// The client a migration bearer token was issued to, while it is valid.
    func migrationClient(for token: String, now: Date) -> String? {
        guard let entry = migrationTokens[token], entry.expiresAt > now else { return nil }
        return entry.clientID
    }

    /// How long tokens carry `transfer_sub` after a transfer (APPLE.md §5: up to 60 days).
    static let transferWindow: TimeInterval = 60 * 86_400

    /// Records that `subject`'s team transfer was looked up for `clientID`: its tokens now carry `transferSubject`.
    func recordTransfer(subject: String, clientID: String, transferSubject: String, now: Date) {
        transfers[clientID + "\u{0}" + subject] = (transferSubject, now.addingTimeInterval(Self.transferWindow))
    }

    /// The `transfer_sub` to put in this user's tokens for this client, inside the window.
    func transferSubject(subject: String, clientID: String, now: Date) -> String? {
        guard let entry = transfers[clientID + "\u{0}" + subject], entry.until > now else { return nil }
        return entry.transferSubject
    }

    func countKeySetRequest() { counters.keySetRequests += 1 }

    // MARK: faults

    func setFault(_ fault: EmulatorFault?, for endpoint: EmulatorEndpoint) {
        faults[endpoint] = fault
    }

    func clearFaults() { faults = [:] }

    /// The fault to apply to this call, if any (consuming one of `remaining`).
    func takeFault(for endpoint: EmulatorEndpoint) -> EmulatorFault? {
        guard var fault = faults[endpoint] else { return nil }
        if let probability = fault.probability, Double.random(in: 0..<1) >= probability { return nil }
        if let remaining = fault.remaining {
            fault.remaining = remaining - 1
            faults[endpoint] = remaining - 1 > 0 ? fault : nil
        }
        return fault
    }

    // MARK: deliveries

    func record(_ delivery: Delivery) {
        deliveries.append(delivery)
        if deliveries.count > 1000 { deliveries.removeFirst(deliveries.count - 1000) }
    }
}

/// Random identifiers for codes, tokens and keys, in the shapes Apple's have (APPLE.md §10).
enum RandomID {
    static func hex(bytes count: Int) -> String {
        Digests.hex(SecureRandom.bytes(count))
    }

    /// `prefix` + 32 lowercase hex + `.0.` + the cluster's letters + `.` + 22 base64url characters:
    /// `c…` codes, `a…` access tokens, `r…` refresh tokens.
    static func appleShaped(_ prefix: String, cluster: String) -> String {
        prefix + hex(bytes: 16) + ".0." + cluster + "." + Base64URL.encode(SecureRandom.bytes(16))
    }

    /// `count` random lowercase letters.
    static func letters(_ count: Int) -> String {
        String(SecureRandom.bytes(count).map { Character(Unicode.Scalar(UInt8(ascii: "a") + $0 % 26)) })
    }

    private static let alphanumerics = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")

    /// A key id as Apple's look: seven letters and digits (e.g. `W6WcOKB`).
    static func keyID() -> String {
        String(SecureRandom.bytes(7).map { alphanumerics[Int($0) % alphanumerics.count] })
    }
}
