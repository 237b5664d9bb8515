import Foundation
import Logging
import PostgresNIO

/// The OpenID Provider's clients, codes and tokens in PostgreSQL, shared by every instance. A code or a refresh
/// token is claimed by one conditional `UPDATE` (row locks make it single use across instances); every write that
/// revokes, or saves tokens that might have to be born revoked, first takes the person's transaction-scoped
/// advisory lock, so a revocation and a save racing it happen one after the other, each seeing the other's rows.
extension PostgresStore {
    public func providerClients() async throws -> [ProviderClientRecord] {
        try await single(ProviderSQL.clients).map(ProviderClientRecord.init)
    }

    public func addProviderClient(_ client: ProviderClientRecord) async throws -> Bool {
        try await !single(try ProviderSQL.add(client)).isEmpty
    }

    public func removeProviderClient(clientID: String) async throws -> Bool {
        try await transaction { connection, logger in try await connection.run(ProviderSQL.remove(clientID: clientID), logger: logger)[0] > 0 }
    }

    public func rotateProviderSecret(clientID: String, secretHash: String, until: Date) async throws -> Bool {
        try await !single(ProviderSQL.rotateSecret(clientID: clientID, secretHash: secretHash, until: until)).isEmpty
    }

    public func saveAuthorizationCode(_ code: AuthorizationCodeRecord) async throws {
        _ = try await single(ProviderSQL.save(code))
    }

    public func redeemAuthorizationCode(hash: String, now: Date) async throws -> CodeRedemption {
        if let row = try await single(ProviderSQL.claimCode(hash: hash, now: now)).first { return .redeemed(try AuthorizationCodeRecord(row)) }
        return try await transaction { connection, logger in
            guard let row = try await connection.rows(ProviderSQL.code(hash: hash), logger: logger).first else { return .unknown }
            let outcome = try CodeRedemption.unclaimed(row, now: now)
            if case .replayed(let code) = outcome {
                try await connection.lock(subject: code.subject, logger: logger)
                _ = try await connection.run(ProviderSQL.replay(hash: hash), logger: logger)
            }
            return outcome
        }
    }

    public func saveProviderTokens(_ tokens: [ProviderTokenRecord]) async throws {
        guard !tokens.isEmpty else { return }
        try await transaction { connection, logger in
            // In one order, so that two saves for the same people cannot deadlock.
            for subject in Set(tokens.map(\.subject)).sorted() { try await connection.lock(subject: subject, logger: logger) }
            _ = try await connection.run(tokens.map(ProviderSQL.save), logger: logger)
        }
    }

    public func providerToken(hash: String, kind: ProviderTokenRecord.Kind, now: Date) async throws -> ProviderTokenRecord? {
        try await single(ProviderSQL.liveToken(hash: hash, kind: kind, now: now)).first.map(ProviderTokenRecord.init)
    }

    public func redeemRefreshToken(hash: String, now: Date) async throws -> RefreshRedemption {
        if let row = try await single(ProviderSQL.claimRefresh(hash: hash, now: now)).first { return .redeemed(try ProviderTokenRecord(row)) }
        return try await transaction { connection, logger in
            guard let row = try await connection.rows(ProviderSQL.refresh(hash: hash, now: now), logger: logger).first else { return .unknown }
            let outcome = try RefreshRedemption.unclaimed(row)
            if case .reused(let token) = outcome {
                try await connection.lock(subject: token.subject, logger: logger)
                _ = try await connection.rows(ProviderSQL.revoke(family: token.familyID, .reuse), logger: logger)
            }
            return outcome
        }
    }

    public func revokeProviderToken(hash: String, clientID: String) async throws -> Bool {
        try await transaction { connection, logger in
            guard let row = try await connection.rows(ProviderSQL.token(hash: hash, clientID: clientID), logger: logger).first else { return false }
            try await connection.lock(subject: try row.text(1), logger: logger)
            _ = try await connection.rows(ProviderSQL.revoke(family: try row.text(0), .client), logger: logger)
            return true
        }
    }

    public func revokeProviderTokens(subject: String) async throws {
        try await transaction { connection, logger in try await Self.revokeProvider(connection, subject: subject, logger: logger) }
    }

    /// Revokes the person's provider tokens and codes, inside the caller's transaction.
    static func revokeProvider(_ connection: PostgresConnection, subject: String, logger: Logger) async throws {
        try await connection.lock(subject: subject, logger: logger)
        _ = try await connection.run(ProviderSQL.revoke(subject: subject), logger: logger)
    }

    /// Deletes the person's provider tokens and codes, inside the caller's transaction.
    static func deleteProvider(_ connection: PostgresConnection, subject: String, logger: Logger) async throws {
        try await connection.lock(subject: subject, logger: logger)
        _ = try await connection.run(ProviderSQL.delete(subject: subject), logger: logger)
    }

    /// One statement on its own (autocommit), bounded like every operation.
    func single(_ statement: ProviderStatement) async throws -> [PostgresCells] {
        try await bounded { [self] in
            let logger = self.logger
            return try await client.withConnection { connection in try await connection.rows(statement, logger: logger) }
        }
    }

    /// `body` in one transaction, bounded like every operation.
    func transaction<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection, Logger) async throws -> T) async throws -> T {
        try await bounded { [self] in
            let logger = self.logger
            return try await client.withTransaction(logger: logger) { connection in try await body(connection, logger) }
        }
    }
}

extension PostgresConnection {
    /// The rows a provider statement returns (none for most writes).
    func rows(_ statement: ProviderStatement, logger: Logger) async throws -> [PostgresCells] {
        var binds = PostgresBindings(capacity: statement.values.count)
        for value in statement.values {
            switch value {
            case .text(let text): binds.append(text)
            case .real(let real): binds.append(real)
            case .optionalReal(let real): binds.append(real)
            case .flag(let flag): binds.append(flag)
            case .integer(let integer): binds.append(integer)
            }
        }
        var rows: [PostgresCells] = []
        for try await row in try await query(PostgresQuery(unsafeSQL: statement.sql, binds: binds), logger: logger) {
            rows.append(PostgresCells(cells: Array(row)))
        }
        return rows
    }

    /// Runs the statements in order; how many rows each returned.
    func run(_ statements: [ProviderStatement], logger: Logger) async throws -> [Int] {
        var counts: [Int] = []
        for statement in statements { counts.append(try await rows(statement, logger: logger).count) }
        return counts
    }

    /// Waits for, and holds until the transaction ends, the lock on a person's provider tokens.
    func lock(subject: String, logger: Logger) async throws {
        _ = try await rows(ProviderStatement("SELECT pg_advisory_xact_lock(727473, hashtext($1))", .text(subject)), logger: logger)
    }
}

/// A PostgreSQL result row, read by position.
struct PostgresCells: ProviderRow, Sendable {
    let cells: [PostgresCell]

    func text(_ index: Int) throws -> String { try cells[index].decode(String.self) }
    func optionalText(_ index: Int) throws -> String? { try cells[index].decode(String?.self) }
    func real(_ index: Int) throws -> Double { try cells[index].decode(Double.self) }
    func optionalReal(_ index: Int) throws -> Double? { try cells[index].decode(Double?.self) }
    func flag(_ index: Int) throws -> Bool { try cells[index].decode(Bool.self) }
    func integer(_ index: Int) throws -> Int64 { try cells[index].decode(Int64.self) }
}

/// The device flow's grants in PostgreSQL: a poll's read and its write in one transaction, the row locked, so two
/// instances polled at once for an approved grant hand out its tokens once.
extension PostgresStore {
    public func saveDeviceGrant(_ grant: DeviceGrantRecord, now: Date) async throws -> Bool {
        try await transaction { connection, logger in
            _ = try await connection.rows(DeviceSQL.freeUserCode(grant.userCode, now: now), logger: logger)
            return try await !connection.rows(DeviceSQL.save(grant), logger: logger).isEmpty
        }
    }

    public func pendingDeviceGrant(userCode: String, now: Date) async throws -> DeviceGrantRecord? {
        try await single(DeviceSQL.pending(userCode: userCode, now: now)).first.map(DeviceGrantRecord.init)
    }

    public func decideDeviceGrant(userCode: String, approve: Bool, subject: String, sessionID: String, authTime: Date, now: Date) async throws -> Bool {
        try await !single(DeviceSQL.decide(userCode: userCode, approve: approve, subject: subject, sessionID: sessionID, authTime: authTime, now: now)).isEmpty
    }

    public func pollDeviceGrant(hash: String, clientID: String, now: Date) async throws -> DevicePoll {
        try await transaction { connection, logger in
            var read = DeviceSQL.grant(hash: hash)
            read.sql += " FOR UPDATE"
            let grant = try await connection.rows(read, logger: logger).first.map(DeviceGrantRecord.init)
            switch DevicePollStep.decide(grant, clientID: clientID, now: now) {
            case .answer(let poll): return poll
            case .claim:
                return try await connection.rows(DeviceSQL.claim(hash: hash, now: now), logger: logger).first.map { .approved(try DeviceGrantRecord($0)) } ?? .unknown
            case .poll:
                if let row = try await connection.rows(DeviceSQL.slowDown(hash: hash, now: now), logger: logger).first {
                    return .slowDown(interval: Int(try row.integer(0)))
                }
                _ = try await connection.rows(DeviceSQL.polled(hash: hash, now: now), logger: logger)
                return .pending
            }
        }
    }
}
