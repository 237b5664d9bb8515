import AppleSignIn
import Foundation
import Hummingbird

/// The token endpoint's device grant (RFC 8628 §3.4, §3.5): a command line polls with its device code until the
/// person decided at `/auth/device`, and gets the tokens once.
extension TokenController {
    static let deviceCodeGrant = "urn:ietf:params:oauth:grant-type:device_code"

    func deviceToken(_ form: [String: String], client: ProviderClientRecord, context: ServerContext) async throws -> Response {
        guard client.deviceFlow else { throw TokenError(code: "unauthorized_client", description: "this client is not registered for the device flow (--device)") }
        guard let deviceCode = form["device_code"], !deviceCode.isEmpty else { throw TokenError(code: "invalid_request", description: "device_code is missing") }
        let now = Date()
        let grant: DeviceGrantRecord
        switch try await store.pollDeviceGrant(hash: ProviderSettings.hash(deviceCode), clientID: client.clientID, now: now) {
        case .pending: throw TokenError(code: "authorization_pending", description: "the person has not decided yet")
        case .slowDown(let interval): throw TokenError(code: "slow_down", description: "poll at most every \(interval) seconds")
        case .denied: throw TokenError(code: "access_denied", description: "the person refused")
        case .expired: throw TokenError(code: "expired_token", description: "the device code has expired; start again")
        case .unknown: throw TokenError.invalidGrant("the device code is not valid, was used, or its session has ended")
        case .approved(let approved): grant = approved
        }
        guard let subject = grant.subject, let user = try await store.user(subject: subject) else { throw TokenError.invalidGrant("the account no longer exists") }
        let scopes = Set(grant.scope.split(separator: " ").map(String.init))
        return try await issue(
            for: user, client: client, scope: grant.scope, authTime: grant.authTime ?? grant.createdAt, nonce: nil, familyID: RandomToken.generate(byteCount: 16),
            codeHash: nil, sessionID: grant.sessionID, refresh: scopes.contains("offline_access"), now: now, context: context
        )
    }
}
