import Foundation
import GRDB
import PostgresNIO

/// The people an operator looks for in the console.
public protocol PeopleDirectory: Sendable {
    /// Up to `limit` people whose email, name or sub contains `query` (without case), the latest signed in first;
    /// everyone (the latest signed in) for an empty query.
    func searchPeople(_ query: String, limit: Int) async throws -> [UserRecord]
}

/// The console's people query, written once for both stores (`ProviderStatement`).
enum PeopleSQL {
    static func search(_ query: String, limit: Int) -> ProviderStatement {
        // `%` and `_` in what the operator typed are literal, as is `\`.
        let escaped = query.lowercased().replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "%", with: "\\%").replacingOccurrences(of: "_", with: "\\_")
        return ProviderStatement(
            """
            SELECT \(UserRecord.columns) FROM users
            WHERE $1 = '' OR LOWER(COALESCE(email, '')) LIKE $2 ESCAPE '\\' OR LOWER(COALESCE(first_name, '') || ' ' || COALESCE(last_name, '')) LIKE $2 ESCAPE '\\'
                OR LOWER(sub) LIKE $2 ESCAPE '\\'
            ORDER BY last_sign_in_at DESC LIMIT $3
            """,
            .text(query), .text("%" + escaped + "%"), .integer(limit)
        )
    }

    static func user(_ row: some ProviderRow) throws -> UserRecord {
        UserRecord(
            subject: try row.text(0), email: try row.optionalText(1), isPrivateEmail: try row.flag(2), firstName: try row.optionalText(3),
            lastName: try row.optionalText(4), createdAt: Date(timeIntervalSince1970: try row.real(5)), lastSignInAt: Date(timeIntervalSince1970: try row.real(6)),
            emailForwardingDisabled: try row.flag(7), linkRevokedAt: try row.optionalReal(8).map { Date(timeIntervalSince1970: $0) }
        )
    }
}

extension SQLiteStore {
    public func searchPeople(_ query: String, limit: Int) async throws -> [UserRecord] {
        try await pool.read { db in try db.rows(PeopleSQL.search(query, limit: limit)).map(PeopleSQL.user) }
    }
}

extension PostgresStore {
    public func searchPeople(_ query: String, limit: Int) async throws -> [UserRecord] {
        try await single(PeopleSQL.search(query, limit: limit)).map(PeopleSQL.user)
    }
}
