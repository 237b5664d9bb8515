import AppleSignIn
import Foundation
import ServiceLifecycle

/// A store made of another (`backend`), which it hands every call of every role to, except those it implements
/// itself: what a layer over a backend starts from (`SessionCachedStore`), so that it writes only what it changes.
protocol StoreLayer: SignInStore {
    /// The store underneath.
    var backend: any SignInStore { get }
}

extension StoreLayer {
    // MARK: PendingSignIns

    func savePending(_ pending: PendingAuthorization) async throws {
        try await backend.savePending(pending)
    }

    func consumePending(state: String, now: Date) async throws -> PendingAuthorization? {
        try await backend.consumePending(state: state, now: now)
    }

    // MARK: SigningKeyStore

    func signingKeys() async throws -> [SigningKeyRecord] {
        try await backend.signingKeys()
    }

    func addSigningKey(_ key: SigningKeyRecord) async throws {
        try await backend.addSigningKey(key)
    }

    func retireSigningKeys(activeAt: Date, retiresAt: Date, except kid: String) async throws {
        try await backend.retireSigningKeys(activeAt: activeAt, retiresAt: retiresAt, except: kid)
    }

    // MARK: ProviderStore

    func providerClients() async throws -> [ProviderClientRecord] {
        try await backend.providerClients()
    }

    func addProviderClient(_ client: ProviderClientRecord) async throws -> Bool {
        try await backend.addProviderClient(client)
    }

    func removeProviderClient(clientID: String) async throws -> Bool {
        try await backend.removeProviderClient(clientID: clientID)
    }

    func rotateProviderSecret(clientID: String, secretHash: String, until: Date) async throws -> Bool {
        try await backend.rotateProviderSecret(clientID: clientID, secretHash: secretHash, until: until)
    }

    func saveAuthorizationCode(_ code: AuthorizationCodeRecord) async throws {
        try await backend.saveAuthorizationCode(code)
    }

    func redeemAuthorizationCode(hash: String, now: Date) async throws -> CodeRedemption {
        try await backend.redeemAuthorizationCode(hash: hash, now: now)
    }

    func saveProviderTokens(_ tokens: [ProviderTokenRecord]) async throws {
        try await backend.saveProviderTokens(tokens)
    }

    func providerToken(hash: String, kind: ProviderTokenRecord.Kind, now: Date) async throws -> ProviderTokenRecord? {
        try await backend.providerToken(hash: hash, kind: kind, now: now)
    }

    func redeemRefreshToken(hash: String, now: Date) async throws -> RefreshRedemption {
        try await backend.redeemRefreshToken(hash: hash, now: now)
    }

    func revokeProviderToken(hash: String, clientID: String) async throws -> Bool {
        try await backend.revokeProviderToken(hash: hash, clientID: clientID)
    }

    func revokeProviderTokens(subject: String) async throws {
        try await backend.revokeProviderTokens(subject: subject)
    }

    // MARK: EdgeStore

    func edgeRecord(name: String) async throws -> EdgeRecord? {
        try await backend.edgeRecord(name: name)
    }

    func saveEdgeRecord(_ record: EdgeRecord) async throws {
        try await backend.saveEdgeRecord(record)
    }

    func deleteEdgeRecord(name: String) async throws {
        try await backend.deleteEdgeRecord(name: name)
    }

    func edgeRecordExpiry(name: String) async throws -> Date? {
        try await backend.edgeRecordExpiry(name: name)
    }

    func whileOrdering<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T? {
        try await backend.whileOrdering(body)
    }

    // MARK: DeviceGrants

    func saveDeviceGrant(_ grant: DeviceGrantRecord, now: Date) async throws -> Bool {
        try await backend.saveDeviceGrant(grant, now: now)
    }

    func pendingDeviceGrant(userCode: String, now: Date) async throws -> DeviceGrantRecord? {
        try await backend.pendingDeviceGrant(userCode: userCode, now: now)
    }

    func decideDeviceGrant(userCode: String, approve: Bool, subject: String, sessionID: String, authTime: Date, now: Date) async throws -> Bool {
        try await backend.decideDeviceGrant(userCode: userCode, approve: approve, subject: subject, sessionID: sessionID, authTime: authTime, now: now)
    }

    func pollDeviceGrant(hash: String, clientID: String, now: Date) async throws -> DevicePoll {
        try await backend.pollDeviceGrant(hash: hash, clientID: clientID, now: now)
    }

    // MARK: GroupStore

    func groupMemberships() async throws -> [GroupMembershipRecord] {
        try await backend.groupMemberships()
    }

    func addGroupMembers(_ members: [String], to group: String, at: Date) async throws -> Int {
        try await backend.addGroupMembers(members, to: group, at: at)
    }

    func removeGroupMembers(_ members: [String], from group: String) async throws -> Int {
        try await backend.removeGroupMembers(members, from: group)
    }

    func deleteGroup(_ group: String) async throws -> Int {
        try await backend.deleteGroup(group)
    }

    func listenForGroupChanges(_ changed: @escaping @Sendable () async -> Void) async throws {
        try await backend.listenForGroupChanges(changed)
    }

    // MARK: InvitationStore

    func saveInvitation(_ invitation: InvitationRecord) async throws {
        try await backend.saveInvitation(invitation)
    }

    func invitations() async throws -> [InvitationRecord] {
        try await backend.invitations()
    }

    func invitation(tokenHash: String) async throws -> InvitationRecord? {
        try await backend.invitation(tokenHash: tokenHash)
    }

    func invitation(id: String) async throws -> InvitationRecord? {
        try await backend.invitation(id: id)
    }

    func invitationUsed(id: String, by subject: String) async throws -> Bool {
        try await backend.invitationUsed(id: id, by: subject)
    }

    func revokeInvitation(id: String, at: Date) async throws -> Bool {
        try await backend.revokeInvitation(id: id, at: at)
    }

    func redeemInvitation(tokenHash: String, subject: String, at: Date) async throws -> InvitationRedemption {
        try await backend.redeemInvitation(tokenHash: tokenHash, subject: subject, at: at)
    }

    // MARK: EventOutbox

    func claimEventDeliveries(now: Date, limit: Int, leaseUntil: Date) async throws -> [EventDelivery] {
        try await backend.claimEventDeliveries(now: now, limit: limit, leaseUntil: leaseUntil)
    }

    func finishEventDeliveries(ids: [Int64]) async throws {
        try await backend.finishEventDeliveries(ids: ids)
    }

    func retryEventDelivery(id: Int64, at: Date, error: String, failed: Bool) async throws {
        try await backend.retryEventDelivery(id: id, at: at, error: error, failed: failed)
    }

    func eventDeliveries(limit: Int) async throws -> [EventDelivery] {
        try await backend.eventDeliveries(limit: limit)
    }

    func resendEventDelivery(id: Int64, at: Date) async throws -> Bool {
        try await backend.resendEventDelivery(id: id, at: at)
    }

    // MARK: LogoutQueue

    func claimLogoutDeliveries(now: Date, limit: Int, leaseUntil: Date) async throws -> [LogoutDelivery] {
        try await backend.claimLogoutDeliveries(now: now, limit: limit, leaseUntil: leaseUntil)
    }

    func finishLogoutDelivery(id: Int64) async throws {
        try await backend.finishLogoutDelivery(id: id)
    }

    func retryLogoutDelivery(id: Int64, at: Date) async throws {
        try await backend.retryLogoutDelivery(id: id, at: at)
    }

    func pendingLogoutDeliveries() async throws -> Int {
        try await backend.pendingLogoutDeliveries()
    }

    // MARK: PeopleDirectory

    func searchPeople(_ query: String, limit: Int) async throws -> [UserRecord] {
        try await backend.searchPeople(query, limit: limit)
    }

    // MARK: UsersAndSessions

    func completeSignIn(_ completed: CompletedSignIn) async throws -> UserRecord {
        try await backend.completeSignIn(completed)
    }

    func session(idHash: String, now: Date) async throws -> (SessionRecord, UserRecord)? {
        try await backend.session(idHash: idHash, now: now)
    }

    func session(idHash: String, now: Date, askedBy client: String) async throws -> (SessionRecord, UserRecord)? {
        try await backend.session(idHash: idHash, now: now, askedBy: client)
    }

    func cachedSession(idHash: String, now: Date) -> (SessionRecord, UserRecord)? {
        backend.cachedSession(idHash: idHash, now: now)
    }

    func deleteSession(idHash: String) async throws -> Bool {
        try await backend.deleteSession(idHash: idHash)
    }

    func renewAuthentication(idHash: String, subject: String, at: Date) async throws -> Bool {
        try await backend.renewAuthentication(idHash: idHash, subject: subject, at: at)
    }

    func user(subject: String) async throws -> UserRecord? {
        try await backend.user(subject: subject)
    }

    func countActiveSessions(now: Date) async throws -> Int {
        try await backend.countActiveSessions(now: now)
    }

    // MARK: LifecycleQueue

    func deleteUser(subject: String, tombstone: Bool, at: Date) async throws -> RefreshCheck? {
        try await backend.deleteUser(subject: subject, tombstone: tombstone, at: at)
    }

    func revokeLink(subject: String, at: Date) async throws {
        try await backend.revokeLink(subject: subject, at: at)
    }

    func claimRefreshChecks(now: Date, limit: Int, nextCheck: @Sendable () -> Date) async throws -> [RefreshCheck] {
        try await backend.claimRefreshChecks(now: now, limit: limit, nextCheck: nextCheck)
    }

    func enqueueRevocation(clientID: String, token: String, at: Date) async throws {
        try await backend.enqueueRevocation(clientID: clientID, token: token, at: at)
    }

    func claimRevocations(now: Date, limit: Int, retryAt: Date) async throws -> [PendingRevocation] {
        try await backend.claimRevocations(now: now, limit: limit, retryAt: retryAt)
    }

    func finishRevocation(id: Int64) async throws {
        try await backend.finishRevocation(id: id)
    }

    func subjectsWithoutTransferSubject(limit: Int) async throws -> [String] {
        try await backend.subjectsWithoutTransferSubject(limit: limit)
    }

    func setTransferSubject(_ transferSubject: String, for subject: String) async throws {
        try await backend.setTransferSubject(transferSubject, for: subject)
    }

    // MARK: NotificationLedger

    func apply(_ notification: AppleNotification, receivedAt: Date) async throws -> NotificationOutcome {
        try await backend.apply(notification, receivedAt: receivedAt)
    }

    // MARK: SessionList

    func sessions(subject: String, now: Date) async throws -> [SessionRecord] {
        try await backend.sessions(subject: subject, now: now)
    }

    func touchSessions(_ touches: [(idHash: String, at: Date)]) async throws {
        try await backend.touchSessions(touches)
    }

    func drainSessionTouches() -> [(idHash: String, at: Date)] {
        backend.drainSessionTouches()
    }

    // MARK: StoreMaintenance

    func migrate() async throws {
        try await backend.migrate()
    }

    func ping() async throws {
        try await backend.ping()
    }

    func sweepExpired(now: Date, limit: Int) async throws -> Int {
        try await backend.sweepExpired(now: now, limit: limit)
    }

    var queriesAtOnce: Int { backend.queriesAtOnce }

    var services: [any Service] { backend.services }
}
