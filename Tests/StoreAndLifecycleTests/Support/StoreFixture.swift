import Foundation
import GRDB
import Logging
import PostgresNIO
@testable import SignInServer
import Testing

/// The two store implementations, as test arguments.
enum StoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite
    case postgres

    var testDescription: String { rawValue }
}

/// Reads a store's tables directly, as an operator with a SQL prompt would.
protocol RawSQL: Sendable {
    /// The integer the query returns (a `COUNT(*)`).
    func integer(_ sql: String) async throws -> Int
    /// The first column of every row, as text.
    func texts(_ sql: String) async throws -> [String?]
}

extension RawSQL {
    /// Rows of `table` matching `condition`.
    func count(_ table: String, where condition: String = "1 = 1") async throws -> Int {
        try await integer("SELECT COUNT(*) FROM \(table) WHERE \(condition)")
    }

    /// Rows of `table` whose `sub` is `subject`.
    func count(_ table: String, sub subject: String) async throws -> Int {
        try await count(table, where: "sub = \(Support.literal(subject))")
    }
}

/// A fresh, migrated store of one kind with the session cache in front (as `makeStore` builds it), a way to open more
/// stores over the same data, and raw SQL access.
struct StoreFixture: Sendable {
    let kind: StoreKind
    /// The store, sealing with `key`.
    let store: SessionCachedStore
    /// The data key `store` seals with.
    let key: String
    let sql: any RawSQL
    private let opener: @Sendable ([String]) async throws -> SessionCachedStore

    /// Another store instance over the same data, with these data keys (newest first).
    func open(keys: [String]) async throws -> any SignInStore {
        try await opener(keys)
    }

    /// Runs `body` with a fresh store of `kind` (a new SQLite file, or a new PostgreSQL database), removed after.
    static func with(_ kind: StoreKind, _ body: (StoreFixture) async throws -> Void) async throws {
        let key = TokenCipher.generateKey()
        switch kind {
        case .sqlite:
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-store-\(Support.randomHex()).sqlite").path
            defer {
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
            }
            let opener: @Sendable ([String]) async throws -> SessionCachedStore = { keys in
                let store = try SQLiteStore(path: path, cipher: try TokenCipher(base64Keys: keys))
                try await store.migrate()
                return SessionCachedStore(store)
            }
            let store = try await opener([key])
            try await body(StoreFixture(kind: kind, store: store, key: key, sql: SQLiteSQL(path: path), opener: opener))
        case .postgres:
            try await TestPostgres.withFreshDatabase { url, client, runner in
                let opener: @Sendable ([String]) async throws -> SessionCachedStore = { keys in
                    // 60 s, not the 5 s bound of production: these tests are about what the store keeps, and the full suite's load
                    // once held 40 parallel redemptions past 5 s (CI's run of 4cf272d). The bound has its own tests.
                    let store = try PostgresStore(url: url, cipher: try TokenCipher(base64Keys: keys), logger: Support.logger("test.store"), operationTimeout: .seconds(60))
                    runner.run(store.client)
                    try await store.migrate()
                    return SessionCachedStore(store)
                }
                let store = try await opener([key])
                try await body(StoreFixture(kind: kind, store: store, key: key, sql: PostgresSQL(client: client), opener: opener))
            }
        }
    }
}

/// Raw reads of a SQLite store's file.
struct SQLiteSQL: RawSQL {
    let path: String

    private func read<T>(_ work: (Database) throws -> T) throws -> T {
        try DatabaseQueue(path: path).read(work)
    }

    func integer(_ sql: String) async throws -> Int {
        try read { try Int.fetchOne($0, sql: sql) ?? 0 }
    }

    func texts(_ sql: String) async throws -> [String?] {
        try read { try Row.fetchAll($0, sql: sql).map { $0[0] as String? } }
    }
}

/// Raw reads of a PostgreSQL store's database.
struct PostgresSQL: RawSQL {
    let client: PostgresClient

    func integer(_ sql: String) async throws -> Int {
        for try await value in try await client.query(PostgresQuery(unsafeSQL: sql), logger: Support.logger("test.sql")).decode(Int64.self) {
            return Int(value)
        }
        return 0
    }

    func texts(_ sql: String) async throws -> [String?] {
        var values: [String?] = []
        for try await value in try await client.query(PostgresQuery(unsafeSQL: sql), logger: Support.logger("test.sql")).decode(String?.self) {
            values.append(value)
        }
        return values
    }
}
