import AppleSignIn
import Foundation
import ServiceLifecycle

/// Pending sign-ins: what `/auth/apple` saves and Apple's return consumes.
public protocol PendingSignIns: Sendable {
    /// Saves a pending authorization.
    func savePending(_ pending: PendingAuthorization) async throws
    /// Removes and returns the pending authorization for `state` if it exists and has not expired;
    /// atomic, so of many concurrent callers with the same state at most one gets it.
    func consumePending(state: String, now: Date) async throws -> PendingAuthorization?
}

/// Users and their sessions.
public protocol UsersAndSessions: Sendable {
    /// Upserts the user (keeping the name of the first sign-in: Apple sends `user` only then, unsigned, so a later one
    /// is forged or stale; after the person revoked the link, the next sign-in is a first one again and its name
    /// is taken; linking by `transfer_sub` during a team transfer),
    /// stores the refresh token with its first check a day later, and creates the session.
    func completeSignIn(_ completed: CompletedSignIn) async throws -> UserRecord
    /// The live session with this id hash, with its user.
    func session(idHash: String, now: Date) async throws -> (SessionRecord, UserRecord)?
    /// The same, for a request from the address `client`: the look-ups a session cache sends to the database are
    /// shared out by it (`SessionCachedStore`).
    func session(idHash: String, now: Date, askedBy client: String) async throws -> (SessionRecord, UserRecord)?
    /// Deletes a session; true when it existed.
    func deleteSession(idHash: String) async throws -> Bool
    /// The user `subject`, if stored (the OpenID Provider's token and userinfo endpoints read the person's claims).
    func user(subject: String) async throws -> UserRecord?
    /// Sessions not yet expired.
    func countActiveSessions(now: Date) async throws -> Int
    /// The live session with this id hash, only if this instance has it in memory (`check_cache_seconds`); never
    /// asks the database, so it can answer on an event loop (the front's fast path).
    func cachedSession(idHash: String, now: Date) -> (SessionRecord, UserRecord)?
    /// The live access token of siwa's OpenID provider whose SHA-256 is `hash`, read as a session of the client it
    /// was issued to (`SessionRecord.via` `token:<client_id>`, `parentSID` its grant's session) with its person; nil
    /// when unknown, expired or revoked (its session ended). For a request from the address `client`.
    func accessToken(hash: String, now: Date, askedBy client: String) async throws -> (SessionRecord, UserRecord)?
    /// A native app's session authenticated again with Apple at `at` (`NativeSignIn.renew`): the same session, its
    /// authentication time renewed; false when it is not a live session of `subject`.
    func renewAuthentication(idHash: String, subject: String, at: Date) async throws -> Bool
}

extension UsersAndSessions {
    /// A store without a session cache has nothing in memory.
    public func cachedSession(idHash: String, now: Date) -> (SessionRecord, UserRecord)? { nil }

    /// A store without the provider's records holds no access tokens (`SessionCachedStore` reads them).
    public func accessToken(hash: String, now: Date, askedBy client: String) async throws -> (SessionRecord, UserRecord)? { nil }

    /// A store without a session cache asks the database for whoever asks.
    public func session(idHash: String, now: Date, askedBy client: String) async throws -> (SessionRecord, UserRecord)? {
        try await session(idHash: idHash, now: now)
    }

    /// The live record a bearer token siwa issued stands for, read as its form says (`access`: an access token's own
    /// record; else a native app's session), with the client that holds it; nil when there is none or no client holds
    /// it. The door's reading (`SessionMiddleware.doorVisitor`) and the byte path's look-up (`BytePathAnswers.warmUpstream`).
    func bearerRecord(hash: String, access: Bool, now: Date, askedBy client: String) async throws -> (SessionRecord, UserRecord, holder: String)? {
        let found = access ? try await accessToken(hash: hash, now: now, askedBy: client) : try await session(idHash: hash, now: now, askedBy: client)
        guard let (session, user) = found, let holder = session.bearerClient else { return nil }
        return (session, user, holder)
    }
}

/// The account lifecycle's work: deletion, revoked links, daily refresh checks, the revocation queue and
/// team-transfer preparation.
public protocol LifecycleQueue: Sendable {
    /// Deletes the user's data (sessions, tokens, profile); returns the refresh token to revoke at Apple, if any.
    func deleteUser(subject: String, tombstone: Bool, at: Date) async throws -> RefreshCheck?
    /// Ends the user's sessions, forgets the refresh token and marks the link revoked.
    func revokeLink(subject: String, at: Date) async throws
    /// Claims up to `limit` refresh tokens whose check is due, moving their next check to `nextCheck`
    /// (at least a day ahead), so no other instance checks them again today.
    func claimRefreshChecks(now: Date, limit: Int, nextCheck: @Sendable () -> Date) async throws -> [RefreshCheck]
    /// Queues a revocation Apple could not be told about.
    func enqueueRevocation(clientID: String, token: String, at: Date) async throws
    /// Claims up to `limit` queued revocations that are due, pushing their next attempt to `retryAt`.
    func claimRevocations(now: Date, limit: Int, retryAt: Date) async throws -> [PendingRevocation]
    /// Removes a revocation that Apple accepted.
    func finishRevocation(id: Int64) async throws
    /// Users whose `transfer_sub` is not known yet (team transfer preparation).
    func subjectsWithoutTransferSubject(limit: Int) async throws -> [String]
    /// Records the `transfer_sub` Apple gave for a user.
    func setTransferSubject(_ transferSubject: String, for subject: String) async throws
}

/// Apple's server-to-server notifications, applied once each.
public protocol NotificationLedger: Sendable {
    /// Applies a verified notification once (by `jti`), in one transaction with recording it.
    func apply(_ notification: AppleNotification, receivedAt: Date) async throws -> NotificationOutcome
}

/// Keeping the database itself: schema, health, expiry.
public protocol StoreMaintenance: Sendable {
    /// Creates the schema or brings it up to date.
    func migrate() async throws
    /// True when the database answers.
    func ping() async throws
    /// Deletes up to `limit` of each of: expired pending authorizations, sessions, authorization codes and provider
    /// tokens; returns how many.
    func sweepExpired(now: Date, limit: Int) async throws -> Int
    /// How many queries the store can run at once (PostgreSQL's pool of connections, SQLite's readers): the bound on
    /// session look-ups sent to it together.
    var queriesAtOnce: Int { get }
    /// Services that must run for the store to answer (a connection pool), started with the application; when
    /// there are any, the schema is migrated once they run rather than before.
    var services: [any Service] { get }
}

/// The keys siwa signs identity assertions with, shared by every instance through the store. Private keys are
/// sealed at rest with the data key.
public protocol SigningKeyStore: Sendable {
    /// Every key not removed, oldest first.
    func signingKeys() async throws -> [SigningKeyRecord]
    /// Adds a key.
    func addSigningKey(_ key: SigningKeyRecord) async throws
    /// Sets when the keys of `kid`'s algorithm that are active at `activeAt` and not yet retiring stop being
    /// published: `retiresAt`. Keys of the other algorithm keep their own rotation.
    func retireSigningKeys(activeAt: Date, retiresAt: Date, except kid: String) async throws
}

/// The device flow's grants (RFC 8628): issued to a command line, decided by a person, polled for tokens.
public protocol DeviceGrants: Sendable {
    /// Saves a new grant; false when its user code is held by a live grant (the caller draws another).
    func saveDeviceGrant(_ grant: DeviceGrantRecord, now: Date) async throws -> Bool
    /// The live pending grant of `userCode` (normalized), if any.
    func pendingDeviceGrant(userCode: String, now: Date) async throws -> DeviceGrantRecord?
    /// The person's decision on a live pending grant; false when it was no longer pending.
    func decideDeviceGrant(userCode: String, approve: Bool, subject: String, sessionID: String, authTime: Date, now: Date) async throws -> Bool
    /// A poll of the token endpoint by `clientID` with the device code whose SHA-256 is `hash`: atomic, so of two
    /// polls of an approved grant one gets it.
    func pollDeviceGrant(hash: String, clientID: String, now: Date) async throws -> DevicePoll
}

/// What siwa's OpenID Provider keeps: its clients, the codes it issued and the tokens it issued (hashed only). A
/// revoked code or token stays, marked, until it expires, so that a token issued into a revoked grant afterwards
/// (a refresh racing the revocation) is saved revoked too; removing a client or deleting a person deletes them.
public protocol ProviderStore: Sendable {
    /// Every registered client, by client id.
    func providerClients() async throws -> [ProviderClientRecord]
    /// Registers a client; false when a client with that id exists (nothing changed).
    func addProviderClient(_ client: ProviderClientRecord) async throws -> Bool
    /// Removes a client and deletes its codes and tokens; false when there was no such client.
    func removeProviderClient(clientID: String) async throws -> Bool
    /// Gives a confidential client a new secret (its SHA-256); the one it replaces stays valid until `until`. False
    /// when there is no such client with a secret.
    func rotateProviderSecret(clientID: String, secretHash: String, until: Date) async throws -> Bool
    /// Saves a code the authorization endpoint issued.
    func saveAuthorizationCode(_ code: AuthorizationCodeRecord) async throws
    /// Atomic, single use across instances: the first call for an unexpired code marks it used and returns .redeemed;
    /// every later call returns .replayed and revokes every token whose codeHash is this code (with every token of
    /// their families); an expired code .expired; an unknown one .unknown.
    func redeemAuthorizationCode(hash: String, now: Date) async throws -> CodeRedemption
    /// Saves issued tokens. A token of a family already revoked, or of a code replayed or revoked, is saved revoked.
    func saveProviderTokens(_ tokens: [ProviderTokenRecord]) async throws
    /// A live token of that kind: not revoked, not expired, (refresh) not used.
    func providerToken(hash: String, kind: ProviderTokenRecord.Kind, now: Date) async throws -> ProviderTokenRecord?
    /// Atomic: a live unused refresh token is marked used and returned .redeemed; an unexpired refresh token used
    /// before (or revoked by reuse or a code replay) returns .reused and revokes its whole family (access and
    /// refresh); anything else .unknown.
    func redeemRefreshToken(hash: String, now: Date) async throws -> RefreshRedemption
    /// RFC 7009: revokes the token and, being a grant, its family; false when unknown. Only the client that holds it
    /// may revoke it: `clientID` must match, else nothing happens and false.
    func revokeProviderToken(hash: String, clientID: String) async throws -> Bool
    /// Revokes every provider token and code of `subject` (Apple's consent-revoked / account-delete, a failed
    /// refresh check).
    func revokeProviderTokens(subject: String) async throws
}

/// Everything the server keeps between requests. One implementation per database; chosen once at start.
/// Each part of the server is given only the parts of it that it uses.
public protocol SignInStore: PendingSignIns, UsersAndSessions, LifecycleQueue, NotificationLedger, StoreMaintenance, SigningKeyStore, ProviderStore, DeviceGrants, GroupStore, LogoutQueue, SessionList, PeopleDirectory, EdgeStore, InvitationStore, EventOutbox {}
