import AppleIDEmulator
import Foundation
@testable import SignInServer

/// An emulator and one instance storing in a fresh SQLite file, with the store and its tables at hand.
struct SQLiteSite: Sendable {
    let world: World
    let instance: Instance
    let store: SessionCachedStore
    let sql: SQLiteSQL
    var settings: ServerSettings { instance.settings }
    var notificationURL: String { instance.baseURL + "/auth/apple/notifications" }

    /// Runs `body` with a fresh site; removes the database after.
    static func with(_ body: (SQLiteSite) async throws -> Void) async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-site-\(Support.randomHex()).sqlite").path
        defer {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        }
        try await withWorld { world in
            let settings = try world.settings(database: path, dataKeys: [TokenCipher.generateKey()])
            let store = SessionCachedStore(try SQLiteStore(path: path, cipher: try TokenCipher(base64Keys: settings.dataKeys)))
            try await withInstance(world, settings: settings, store: store) { instance in
                try await body(SQLiteSite(world: world, instance: instance, store: store, sql: SQLiteSQL(path: path)))
            }
        }
    }

    /// The lifecycle operations over `store` (this site's by default), as `buildComponents` wires them.
    func lifecycle(store: (any SignInStore)? = nil) async throws -> AccountLifecycle {
        try await buildComponents(settings: settings, httpClient: .shared, store: store ?? self.store, logger: Support.logger("test.lifecycle")).lifecycle
    }
}
