import AppleSignIn
import Foundation
import Hummingbird

/// Token introspection (RFC 7662) at `/oauth2/introspect`, for an app that would rather ask siwa than be told by the
/// door: any registered confidential client (or service) asks about an access token; the answer is `active` and,
/// when active, who and what it stands for. A public client cannot ask (it could probe tokens it does not hold).
extension TokenController {
    @Sendable func introspect(_ request: Request, context: ServerContext) async throws -> Response {
        do {
            let form = try await Self.form(of: request)
            let asker = try await Self.authenticate(request, form: form, clients: clients, context: context)
            guard !asker.isPublic else { throw TokenError(status: .unauthorized, code: "invalid_client", description: "a public client cannot introspect tokens") }
            guard let token = form["token"], !token.isEmpty else { throw TokenError(code: "invalid_request", description: "token is missing") }
            var answer = IntrospectionAnswer(active: false)
            // Only access tokens are introspected (a refresh token is its client's alone): any other is inactive.
            if form["token_type_hint"] != "refresh_token", let record = try await store.providerToken(hash: ProviderSettings.hash(token), kind: .access, now: Date()) {
                let service = record.subject.hasPrefix(ServiceIdentity.prefix)
                let person = service ? nil : try await store.user(subject: record.subject)
                if service || person != nil {
                    answer = IntrospectionAnswer(
                        active: true, scope: record.scope.isEmpty ? nil : record.scope, client_id: record.clientID, sub: record.subject, token_type: "Bearer",
                        exp: Int(record.expiresAt.timeIntervalSince1970), iat: Int(record.createdAt.timeIntervalSince1970), iss: settings.issuer,
                        groups: access.groups(subject: record.subject, email: person?.email)
                    )
                }
            }
            var response = Response.json(answer)
            response.headers[.cacheControl] = "no-store"
            return response
        } catch let error as TokenError {
            context.logger.notice("introspection refused", metadata: ["error": "\(error.code)"])
            return error.response
        } catch {
            context.logger.error("store unavailable", metadata: ["error": "\(String(describing: type(of: error)))"])
            return TokenError(status: .serviceUnavailable, code: "temporarily_unavailable", description: "the store did not answer; try again").response
        }
    }
}

/// RFC 7662 §2.2: `active`, and for an active token what it stands for (`sub` is Apple's, or `service:NAME`).
struct IntrospectionAnswer: Encodable {
    var active: Bool
    var scope: String?
    var client_id: String?
    var sub: String?
    var token_type: String?
    var exp: Int?
    var iat: Int?
    var iss: String?
    var groups: [String]?
}
