import AppleSignIn
import Foundation
import HTTPTypes
import Hummingbird

/// The token endpoint's `client_credentials` grant (RFC 6749 §4.4) for services: a token naming the service
/// (`service:<client_id>`, never a person), with the groups it is a member of, no refresh token and no id_token;
/// each one issued is an audit event.
extension TokenController {
    static let clientCredentialsGrant = "client_credentials"

    func serviceToken(client: ProviderClientRecord, context: ServerContext) async throws -> Response {
        guard client.isService else {
            throw TokenError(code: "unauthorized_client", description: "only a service (siwa oidc add-client NAME --service) gets client_credentials tokens")
        }
        let now = Date()
        let token = BearerCredential.accessTokenPrefix + RandomToken.generate()
        try await store.saveProviderTokens([
            ProviderTokenRecord(
                tokenHash: ProviderSettings.hash(token), kind: .access, clientID: client.clientID, subject: client.serviceSubject, scope: "", authTime: now,
                familyID: RandomToken.generate(byteCount: 16), createdAt: now, expiresAt: now.addingTimeInterval(settings.accessTokenLifetime)
            ),
        ])
        audit.record(AuditEvent("service-token", sub: client.serviceSubject, reason: client.clientID))
        context.logger.info("service token issued", metadata: ["client_id": "\(client.clientID)"])
        var response = Response.json(ServiceTokenAnswer(access_token: token, token_type: "Bearer", expires_in: Int(settings.accessTokenLifetime)))
        if let pragma = HTTPField.Name.pragma { response.headers[pragma] = "no-cache" }
        return response
    }
}

/// A service's token answer: no refresh token, no id_token (there is no person).
struct ServiceTokenAnswer: Encodable {
    var access_token: String
    var token_type: String
    var expires_in: Int
}
