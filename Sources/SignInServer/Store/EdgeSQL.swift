import Foundation
import Logging
import PostgresNIO

/// What the edge keeps (issue 36): the ACME account's key and the certificates it obtained, one row each, shared by
/// every instance on the store. The value (a private key in PEM, with a certificate chain for a certificate) is
/// sealed with the data key; `not_after` is the certificate's, in the clear, so that an instance can tell whether a
/// renewal is due without opening it.
public struct EdgeRecord: Sendable, Hashable {
    /// `acme-account <directory URL>` or `certificate <domain,domain…>`.
    public var name: String
    /// The plaintext value (the store seals it).
    public var value: String
    public var notAfter: Date?
    public var updatedAt: Date

    public init(name: String, value: String, notAfter: Date?, updatedAt: Date) {
        self.name = name
        self.value = value
        self.notAfter = notAfter
        self.updatedAt = updatedAt
    }
}

/// The names of the edge's records.
public enum EdgeRecordNames {
    /// The certificate for `domains` from the ACME `directory` (nil: the operator's files, never stored): each
    /// directory's apart, so that moving from Let's Encrypt's staging directory to its production one orders a trusted
    /// certificate at once.
    public static func certificate(directory: String?, domains: [String]) -> String {
        "certificate " + (directory.map { $0 + " " } ?? "") + domains.joined(separator: ",")
    }
}

/// The edge's records, and one instance ordering certificates at a time.
public protocol EdgeStore: Sendable {
    /// The record `name`, opened; nil when there is none (or it was sealed with a data key no longer listed).
    func edgeRecord(name: String) async throws -> EdgeRecord?
    /// Saves (replaces) a record.
    func saveEdgeRecord(_ record: EdgeRecord) async throws
    /// Deletes a record, if there is one.
    func deleteEdgeRecord(name: String) async throws
    /// When the record `name` stops being good (a certificate's end), read without opening it: nil when there is no
    /// such record (`siwa doctor`, which may not hold the data key).
    func edgeRecordExpiry(name: String) async throws -> Date?
    /// Runs `body` while this instance holds the store's ordering lock (a PostgreSQL advisory lock held by one
    /// connection, freed when it ends, by a crash too); nil without running it when another instance holds it.
    /// SQLite serves one instance: it always runs.
    func whileOrdering<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T?
}

/// The statements of the edge's records, the same for SQLite and PostgreSQL (`ProviderStatement`).
enum EdgeSQL {
    /// Migration v10 (issue 36).
    static let v10 = [
        "CREATE TABLE edge_records (name TEXT PRIMARY KEY NOT NULL, sealed TEXT NOT NULL, not_after DOUBLE PRECISION, updated_at DOUBLE PRECISION NOT NULL)",
    ]

    /// The key of `pg_try_advisory_lock` for ordering certificates (any constant no other lock of siwa's uses).
    static let orderingLock: Int64 = 7_274_736_001

    static func record(name: String) -> ProviderStatement {
        ProviderStatement("SELECT name, sealed, not_after, updated_at FROM edge_records WHERE name = $1", .text(name))
    }

    static func save(name: String, sealed: String, notAfter: Date?, updatedAt: Date) -> ProviderStatement {
        ProviderStatement(
            """
            INSERT INTO edge_records (name, sealed, not_after, updated_at) VALUES ($1, $2, $3, $4)
            ON CONFLICT (name) DO UPDATE SET sealed = excluded.sealed, not_after = excluded.not_after, updated_at = excluded.updated_at
            """,
            .text(name), .text(sealed), .optionalReal(notAfter?.timeIntervalSince1970), .real(updatedAt.timeIntervalSince1970)
        )
    }

    static func expiry(name: String) -> ProviderStatement {
        ProviderStatement("SELECT not_after FROM edge_records WHERE name = $1", .text(name))
    }

    static func delete(name: String) -> ProviderStatement {
        ProviderStatement("DELETE FROM edge_records WHERE name = $1", .text(name))
    }

    /// A stored row, opened with `open` (nil when it cannot be).
    static func record(_ row: some ProviderRow, open: (String) -> String?) throws -> EdgeRecord? {
        guard let value = open(try row.text(1)) else { return nil }
        return EdgeRecord(
            name: try row.text(0), value: value, notAfter: try row.optionalReal(2).map(Date.init(timeIntervalSince1970:)),
            updatedAt: Date(timeIntervalSince1970: try row.real(3))
        )
    }
}

extension SQLiteStore {
    public func edgeRecord(name: String) async throws -> EdgeRecord? {
        let cipher = cipher
        return try await pool.read { db in try db.rows(EdgeSQL.record(name: name)).first.flatMap { try EdgeSQL.record($0, open: cipher.openIfReadable) } }
    }

    public func saveEdgeRecord(_ record: EdgeRecord) async throws {
        let sealed = try cipher.seal(record.value)
        try await pool.write { db in _ = try db.rows(EdgeSQL.save(name: record.name, sealed: sealed, notAfter: record.notAfter, updatedAt: record.updatedAt)) }
    }

    public func deleteEdgeRecord(name: String) async throws {
        try await pool.write { db in _ = try db.rows(EdgeSQL.delete(name: name)) }
    }

    public func edgeRecordExpiry(name: String) async throws -> Date? {
        try await pool.read { db in try db.rows(EdgeSQL.expiry(name: name)).first.flatMap { try $0.optionalReal(0) }.map(Date.init(timeIntervalSince1970:)) }
    }

    public func whileOrdering<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T? {
        try await body()
    }
}

extension PostgresStore {
    public func edgeRecord(name: String) async throws -> EdgeRecord? {
        try await single(EdgeSQL.record(name: name)).first.flatMap { try EdgeSQL.record($0, open: cipher.openIfReadable) }
    }

    public func saveEdgeRecord(_ record: EdgeRecord) async throws {
        _ = try await single(EdgeSQL.save(name: record.name, sealed: try cipher.seal(record.value), notAfter: record.notAfter, updatedAt: record.updatedAt))
    }

    public func deleteEdgeRecord(name: String) async throws {
        _ = try await single(EdgeSQL.delete(name: name))
    }

    public func edgeRecordExpiry(name: String) async throws -> Date? {
        try await single(EdgeSQL.expiry(name: name)).first.flatMap { try $0.optionalReal(0) }.map(Date.init(timeIntervalSince1970:))
    }

    public func whileOrdering<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T? {
        // A session lock on one connection, held for as long as the order takes (minutes at worst: not `bounded`);
        // PostgreSQL frees it when that connection ends.
        let logger = logger
        return try await client.withConnection { connection in
            let got = try await connection.rows(ProviderStatement("SELECT pg_try_advisory_lock($1)", .integer(Int(EdgeSQL.orderingLock))), logger: logger)
            guard let row = got.first, try row.flag(0) else { return nil }
            do {
                let result = try await body()
                _ = try? await connection.rows(ProviderStatement("SELECT pg_advisory_unlock($1)", .integer(Int(EdgeSQL.orderingLock))), logger: logger)
                return result
            } catch {
                _ = try? await connection.rows(ProviderStatement("SELECT pg_advisory_unlock($1)", .integer(Int(EdgeSQL.orderingLock))), logger: logger)
                throw error
            }
        }
    }
}
