import Crypto
import CryptoExtras
import Foundation
import JOSE

/// Everything the emulator remembers: codes, refresh tokens, consents, signing keys, faults, deliveries.
actor EmulatorState {
    struct CodeGrant: Sendable {
        var clientID: String
        var redirectURI: String
        var subject: String
        var nonce: String?
        var email: String
        var isPrivateEmail: Bool
        var authTime: Date
        var expiresAt: Date
        var used = false
    }

    struct RefreshGrant: Sendable {
        var clientID: String
        var subject: String
        var nonce: String?
        var email: String
        var isPrivateEmail: Bool
        var revoked = false
    }

    struct SigningKeyEntry: Sendable {
        var kid: String
        var key: _RSA.Signing.PrivateKey
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
    private var accessTokens: [String: (clientID: String, subject: String)] = [:]
    private var migrationTokens: [String: String] = [:]
    private var consents: Set<String> = []
    private(set) var signingKeys: [SigningKeyEntry]
    private var faults: [EmulatorEndpoint: EmulatorFault] = [:]
    private(set) var deliveries: [Delivery] = []
    private(set) var counters = Counters()
    private var keyCounter = 0

    init(initialKeys: Int) throws {
        signingKeys = try (1...initialKeys).map { try Self.makeKey(number: $0) }
        keyCounter = initialKeys
    }

    // MARK: keys

    private static func makeKey(number: Int) throws -> SigningKeyEntry {
        SigningKeyEntry(kid: "emu-\(number)-\(RandomID.hex(bytes: 3))", key: try _RSA.Signing.PrivateKey(keySize: .bits2048))
    }

    /// Adds a key; the newest key signs.
    func addSigningKey() throws -> String {
        keyCounter += 1
        let entry = try Self.makeKey(number: keyCounter)
        signingKeys.append(entry)
        return entry.kid
    }

    /// Removes a key from the set; false when it is unknown or the last one.
    func retireSigningKey(_ kid: String) -> Bool {
        guard signingKeys.count > 1, let index = signingKeys.firstIndex(where: { $0.kid == kid }) else { return false }
        signingKeys.remove(at: index)
        return true
    }

    /// The key that signs new tokens.
    var activeKey: SigningKeyEntry? { signingKeys.last }

    // MARK: consent

    /// True the first time this user authorizes this client (then `user` is sent), recording consent.
    func recordConsent(clientID: String, subject: String) -> Bool {
        consents.insert(clientID + "\u{0}" + subject).inserted
    }

    // MARK: codes

    func issueCode(_ grant: CodeGrant) -> String {
        counters.authorizations += 1
        let code = "c" + RandomID.hex(bytes: 16) + ".0.emu." + RandomID.hex(bytes: 8)
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

    func issueTokens(for grant: RefreshGrant, withRefreshToken: Bool) -> (access: String, refresh: String?) {
        let access = "a" + RandomID.hex(bytes: 16) + ".0.emu"
        accessTokens[access] = (grant.clientID, grant.subject)
        guard withRefreshToken else { return (access, nil) }
        let refresh = "r" + RandomID.hex(bytes: 16) + ".0.emu." + RandomID.hex(bytes: 8)
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
    func revoke(_ token: String, clientID: String) {
        counters.revocations += 1
        var subject: String?
        if var grant = refreshTokens[token], grant.clientID == clientID {
            grant.revoked = true
            refreshTokens[token] = grant
            subject = grant.subject
        } else if let access = accessTokens[token], access.clientID == clientID {
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

    func issueMigrationToken(clientID: String) -> String {
        let token = "m" + RandomID.hex(bytes: 16)
        migrationTokens[token] = clientID
        return token
    }

    func migrationClient(for token: String) -> String? { migrationTokens[token] }

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

/// Random identifiers for codes and tokens.
enum RandomID {
    static func hex(bytes count: Int) -> String {
        Digests.hex(SecureRandom.bytes(count))
    }
}
