import Foundation

/// Everything the server keeps between requests. One implementation per database; chosen once at start.
public protocol SignInStore: Sendable {
    /// Creates the schema or brings it up to date.
    func migrate() async throws
    /// Saves a pending authorization.
    func savePending(_ pending: PendingAuthorization) async throws
    /// Removes and returns the pending authorization for `state` if it exists and has not expired;
    /// atomic, so of many concurrent callers with the same state at most one gets it.
    func consumePending(state: String, now: Date) async throws -> PendingAuthorization?
    /// Upserts the user (never erasing a stored name), stores the refresh token, and creates the session.
    func completeSignIn(_ completed: CompletedSignIn) async throws -> UserRecord
    /// The live session with this id hash, with its user.
    func session(idHash: String, now: Date) async throws -> (SessionRecord, UserRecord)?
    /// Deletes a session; true when it existed.
    func deleteSession(idHash: String) async throws -> Bool
    /// True when the database answers.
    func ping() async throws
}
