import Foundation
import GRDB

/// The OpenID Provider's clients, codes and tokens in SQLite. Every write runs in one transaction of the single
/// writer, so a claim and what follows it cannot interleave with another instance's.
extension SQLiteStore {
    public func providerClients() async throws -> [ProviderClientRecord] {
        try await pool.read { db in try db.rows(ProviderSQL.clients).map(ProviderClientRecord.init) }
    }

    public func addProviderClient(_ client: ProviderClientRecord) async throws -> Bool {
        let statement = try ProviderSQL.add(client)
        return try await pool.write { db in try !db.rows(statement).isEmpty }
    }

    public func removeProviderClient(clientID: String) async throws -> Bool {
        try await pool.write { db in try db.run(ProviderSQL.remove(clientID: clientID))[0] > 0 }
    }

    public func rotateProviderSecret(clientID: String, secretHash: String, until: Date) async throws -> Bool {
        try await pool.write { db in try !db.rows(ProviderSQL.rotateSecret(clientID: clientID, secretHash: secretHash, until: until)).isEmpty }
    }

    public func saveAuthorizationCode(_ code: AuthorizationCodeRecord) async throws {
        try await pool.write { db in _ = try db.rows(ProviderSQL.save(code)) }
    }

    public func redeemAuthorizationCode(hash: String, now: Date) async throws -> CodeRedemption {
        try await pool.write { db in
            if let row = try db.rows(ProviderSQL.claimCode(hash: hash, now: now)).first { return .redeemed(try AuthorizationCodeRecord(row)) }
            guard let row = try db.rows(ProviderSQL.code(hash: hash)).first else { return .unknown }
            let outcome = try CodeRedemption.unclaimed(row, now: now)
            if case .replayed = outcome { _ = try db.run(ProviderSQL.replay(hash: hash)) }
            return outcome
        }
    }

    public func saveProviderTokens(_ tokens: [ProviderTokenRecord]) async throws {
        try await pool.write { db in _ = try db.run(tokens.map(ProviderSQL.save)) }
    }

    public func providerToken(hash: String, kind: ProviderTokenRecord.Kind, now: Date) async throws -> ProviderTokenRecord? {
        try await pool.read { db in try db.rows(ProviderSQL.liveToken(hash: hash, kind: kind, now: now)).first.map(ProviderTokenRecord.init) }
    }

    public func redeemRefreshToken(hash: String, now: Date) async throws -> RefreshRedemption {
        try await pool.write { db in
            if let row = try db.rows(ProviderSQL.claimRefresh(hash: hash, now: now)).first { return .redeemed(try ProviderTokenRecord(row)) }
            guard let row = try db.rows(ProviderSQL.refresh(hash: hash, now: now)).first else { return .unknown }
            let outcome = try RefreshRedemption.unclaimed(row)
            if case .reused(let token) = outcome { _ = try db.rows(ProviderSQL.revoke(family: token.familyID, .reuse)) }
            return outcome
        }
    }

    public func revokeProviderToken(hash: String, clientID: String) async throws -> Bool {
        try await pool.write { db in
            guard let row = try db.rows(ProviderSQL.token(hash: hash, clientID: clientID)).first else { return false }
            _ = try db.rows(ProviderSQL.revoke(family: try row.text(0), .client))
            return true
        }
    }

    public func revokeProviderTokens(subject: String) async throws {
        try await pool.write { db in _ = try db.run(ProviderSQL.revoke(subject: subject)) }
    }
}

extension Database {
    /// The rows a provider statement returns (none for most writes), its `$n` parameters bound by name.
    func rows(_ statement: ProviderStatement) throws -> [Row] {
        let values = statement.values.enumerated().map { index, value -> (String, (any DatabaseValueConvertible)?) in
            switch value {
            case .text(let text): ("\(index + 1)", text)
            case .real(let real): ("\(index + 1)", real)
            case .optionalReal(let real): ("\(index + 1)", real)
            case .flag(let flag): ("\(index + 1)", flag)
            case .integer(let integer): ("\(index + 1)", integer)
            }
        }
        return try cachedRows(sql: statement.sql, arguments: StatementArguments(Dictionary(uniqueKeysWithValues: values)))
    }

    /// Runs the statements in order; how many rows each returned.
    func run(_ statements: [ProviderStatement]) throws -> [Int] {
        try statements.map { try rows($0).count }
    }
}

extension Row: ProviderRow {
    func text(_ index: Int) throws -> String { try decode(String.self, atIndex: index) }
    func optionalText(_ index: Int) throws -> String? { try decode(String?.self, atIndex: index) }
    func real(_ index: Int) throws -> Double { try decode(Double.self, atIndex: index) }
    func optionalReal(_ index: Int) throws -> Double? { try decode(Double?.self, atIndex: index) }
    func flag(_ index: Int) throws -> Bool { try decode(Bool.self, atIndex: index) }
    func integer(_ index: Int) throws -> Int64 { try decode(Int64.self, atIndex: index) }
}

/// The device flow's grants in SQLite: each write in one transaction of the single writer.
extension SQLiteStore {
    public func saveDeviceGrant(_ grant: DeviceGrantRecord, now: Date) async throws -> Bool {
        try await pool.write { db in
            _ = try db.rows(DeviceSQL.freeUserCode(grant.userCode, now: now))
            return try !db.rows(DeviceSQL.save(grant)).isEmpty
        }
    }

    public func pendingDeviceGrant(userCode: String, now: Date) async throws -> DeviceGrantRecord? {
        try await pool.read { db in try db.rows(DeviceSQL.pending(userCode: userCode, now: now)).first.map(DeviceGrantRecord.init) }
    }

    public func decideDeviceGrant(userCode: String, approve: Bool, subject: String, sessionID: String, authTime: Date, now: Date) async throws -> Bool {
        let statement = DeviceSQL.decide(userCode: userCode, approve: approve, subject: subject, sessionID: sessionID, authTime: authTime, now: now)
        return try await pool.write { db in try !db.rows(statement).isEmpty }
    }

    public func pollDeviceGrant(hash: String, clientID: String, now: Date) async throws -> DevicePoll {
        try await pool.write { db in
            let grant = try db.rows(DeviceSQL.grant(hash: hash)).first.map(DeviceGrantRecord.init)
            switch DevicePollStep.decide(grant, clientID: clientID, now: now) {
            case .answer(let poll): return poll
            case .claim: return try db.rows(DeviceSQL.claim(hash: hash, now: now)).first.map { .approved(try DeviceGrantRecord($0)) } ?? .unknown
            case .poll:
                if let row = try db.rows(DeviceSQL.slowDown(hash: hash, now: now)).first { return .slowDown(interval: Int(try row.integer(0))) }
                _ = try db.rows(DeviceSQL.polled(hash: hash, now: now))
                return .pending
            }
        }
    }
}
