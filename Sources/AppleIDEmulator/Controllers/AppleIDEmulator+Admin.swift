import AsyncHTTPClient
import Foundation
import Hummingbird
import JOSE
import NIOCore

/// The admin API under `/emulator/admin`, answering on loopback only: key rotation, faults, notifications, counters.
extension AppleIDEmulator {
    /// A request to send a server-to-server notification.
    public struct NotifyRequest: Codable, Sendable {
        /// `email-disabled`, `email-enabled`, `consent-revoked`, `account-delete`, or any other string.
        public var type: String
        /// The user concerned.
        public var sub: String
        /// The client it is for; defaults to the first registered client.
        public var clientID: String?
        /// The URL to post to; defaults to the client's registered notification URL.
        public var url: String?
        /// The relay address, for email events.
        public var email: String?
        /// How many times to deliver the same notification (same `jti`), to test idempotence.
        public var copies: Int?

        enum CodingKeys: String, CodingKey {
            case type, sub, clientID = "client_id", url, email, copies
        }

        /// Creates a request.
        public init(type: String, sub: String, clientID: String? = nil, url: String? = nil, email: String? = nil, copies: Int? = nil) {
            self.type = type
            self.sub = sub
            self.clientID = clientID
            self.url = url
            self.email = email
            self.copies = copies
        }
    }

    func addAdminRoutes(to group: RouterGroup<EmulatorContext>) {
        group.add(middleware: LoopbackOnlyMiddleware())
        // Rotation as Apple does it: a key is published before it signs. `POST keys` publishes one that signs
        // only once activated; `POST keys/rotate` publishes one that starts signing after the configured lead time
        // (or `{"activate_after_seconds": N}`). The key it replaces stays published for `retiredKeyGrace`.
        group.post("keys") { _, _ in
            let kid = try await self.state.publishSigningKey(activatesAt: nil)
            self.logger.info("signing key published", metadata: ["kid": "\(kid)"])
            return jsonResponse(["kid": kid])
        }
        group.post("keys/rotate") { request, context in
            struct Rotate: Decodable { var activate_after_seconds: Int? }
            let body = (try? await request.decode(as: Rotate.self, context: context)) ?? Rotate()
            let lead = max(0, body.activate_after_seconds ?? self.configuration.keyActivationLead)
            let activatesAt = Date().addingTimeInterval(TimeInterval(lead))
            let kid = try await self.state.publishSigningKey(activatesAt: activatesAt)
            self.logger.info("signing key published", metadata: ["kid": "\(kid)", "signs_in_seconds": "\(lead)"])
            return jsonResponse(RotateAnswer(kid: kid, activates_at: activatesAt.timeIntervalSince1970))
        }
        group.post("keys/:kid/activate") { _, context in
            let kid = try context.parameters.require("kid")
            guard await self.state.activateSigningKey(kid, now: Date()) else {
                throw HTTPError(.notFound, message: "no such key")
            }
            self.logger.info("signing key activated", metadata: ["kid": "\(kid)"])
            return jsonResponse(["active": kid])
        }
        group.post("keys/:kid/retire") { _, context in
            let kid = try context.parameters.require("kid")
            guard await self.state.retireSigningKey(kid, now: Date()) else {
                throw HTTPError(.notFound, message: "no such key, or it is the last one")
            }
            return jsonResponse(["retired": kid])
        }
        group.get("keys") { _, _ in
            let now = Date()
            return jsonResponse(KeyList(kids: await self.state.publishedKeys(now: now).map(\.kid), active: await self.state.activeKey(now: now)?.kid))
        }
        group.put("faults/:endpoint") { request, context in
            guard let endpoint = EmulatorEndpoint(rawValue: try context.parameters.require("endpoint")) else {
                throw HTTPError(.notFound, message: "endpoints: \(EmulatorEndpoint.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            let fault = try await request.decode(as: EmulatorFault.self, context: context)
            await self.state.setFault(fault, for: endpoint)
            return jsonResponse(fault)
        }
        group.delete("faults") { _, _ in
            await self.state.clearFaults()
            return Response(status: .noContent)
        }
        group.post("notify") { request, context in
            let notify = try await request.decode(as: NotifyRequest.self, context: context)
            return jsonResponse(try await self.sendNotification(notify))
        }
        group.get("deliveries") { _, _ in
            jsonResponse(await self.state.deliveries)
        }
        group.post("native-authorization") { request, context in
            let native = try await request.decode(as: NativeAuthorizationRequest.self, context: context)
            return jsonResponse(try await self.nativeAuthorization(native))
        }
        group.get("counters") { _, _ in
            jsonResponse(await self.state.counters)
        }
    }

    struct RotateAnswer: Encodable {
        var kid: String
        var activates_at: Double
    }

    struct KeyList: Encodable {
        var kids: [String]
        var active: String?
    }

    /// What a native app's `ASAuthorizationAppleIDProvider` request carries (admin API `POST native-authorization`).
    public struct NativeAuthorizationRequest: Codable, Sendable {
        /// The app's bundle ID.
        public var clientID: String
        /// The test user.
        public var sub: String
        /// The nonce the app put in the request (iOS apps send its SHA-256 hex).
        public var nonce: String?
        /// Whether the user hides their email.
        public var hideEmail: Bool?

        enum CodingKeys: String, CodingKey {
            case clientID = "client_id", sub, nonce, hideEmail = "hide_email"
        }

        /// Creates a request as a native app would make it.
        public init(clientID: String, sub: String, nonce: String? = nil, hideEmail: Bool? = nil) {
            self.clientID = clientID
            self.sub = sub
            self.nonce = nonce
            self.hideEmail = hideEmail
        }
    }

    /// What the device hands the app: an identity token and an authorization code (no redirect URI), plus the
    /// first-time name and email the credential carries.
    public struct NativeAuthorization: Codable, Sendable {
        /// The identity token.
        public var identityToken: String
        /// The authorization code, exchanged with the bundle ID as `client_id`.
        public var authorizationCode: String
        /// First-time only.
        public var firstName: String?
        /// First-time only.
        public var lastName: String?
        /// First-time only.
        public var email: String?
    }

    /// Issues what a device would give a native app after the user consents.
    public func nativeAuthorization(_ request: NativeAuthorizationRequest) async throws -> NativeAuthorization {
        guard let client = client(request.clientID), client.enabled else { throw HTTPError(.badRequest, message: "unknown client_id") }
        guard let user = user(request.sub) else { throw HTTPError(.badRequest, message: "unknown test user") }
        let hide = request.hideEmail ?? false
        let email = hide ? user.relayEmail : user.email
        let now = Date()
        let identity = TokenSubject(clientID: client.clientID, subject: user.sub, nonce: request.nonce, email: email, isPrivateEmail: hide, authTime: now)
        let code = await state.issueCode(.init(identity: identity, redirectURI: "", expiresAt: now.addingTimeInterval(TimeInterval(configuration.codeLifetime))))
        // Native sign-ins carry Apple's real-user indicator (2: likely real), as a device's tokens do.
        let token = try await signIDToken(identity, code: code, realUserStatus: 2, now: now)
        let firstTime = await state.recordConsent(clientID: client.clientID, subject: user.sub)
        return NativeAuthorization(
            identityToken: token, authorizationCode: code,
            firstName: firstTime ? user.firstName : nil, lastName: firstTime ? user.lastName : nil, email: firstTime ? email : nil
        )
    }

    /// Signs and posts a notification in Apple's format; returns the recorded deliveries.
    public func sendNotification(_ notify: NotifyRequest) async throws -> [NotificationDeliveryResult] {
        guard let client = notify.clientID.map({ client($0) }) ?? configuration.clients.first else {
            throw HTTPError(.badRequest, message: "unknown client_id")
        }
        guard let url = notify.url ?? client.notificationURL else {
            throw HTTPError(.badRequest, message: "no url given and \(client.clientID) has no notification URL")
        }
        let payload = try await signNotification(type: notify.type, subject: notify.sub, clientID: client.clientID, email: notify.email)
        if notify.type == "consent-revoked" || notify.type == "account-delete" {
            await state.forget(subject: notify.sub, clientID: client.clientID)
        }
        var results: [NotificationDeliveryResult] = []
        for _ in 0..<max(1, min(notify.copies ?? 1, 10)) {
            var request = HTTPClientRequest(url: url)
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            let body = try JSONEncoder().encode(["payload": payload.jws])
            request.body = .bytes(ByteBuffer(bytes: body))
            var result = NotificationDeliveryResult(id: payload.id, type: notify.type, subject: notify.sub, url: url)
            do {
                let response = try await httpClient.execute(request, timeout: .seconds(10))
                _ = try? await response.body.collect(upTo: 64 * 1024)
                result.status = Int(response.status.code)
            } catch {
                result.error = "\(error)"
            }
            await state.record(.init(id: result.id, type: result.type, subject: result.subject, url: url, status: result.status, error: result.error, at: Date()))
            results.append(result)
        }
        return results
    }

    /// Signs a notification JWS without sending it (tests, `siwa emulator notify --print`).
    public func signNotification(type: String, subject: String, clientID: String, email: String? = nil, now: Date = Date()) async throws -> (id: String, jws: String) {
        struct Event: Encodable {
            var type: String
            var sub: String
            var event_time: Int64
            var email: String?
            var is_private_email: String?
        }
        struct Claims: Encodable {
            var iss: String
            var aud: String
            var iat: Int
            var exp: Int
            var jti: String
            var events: String
        }
        // The key is the one signing at this moment, whatever time the claims are given.
        guard let key = await state.activeKey(now: Date()) else { throw HTTPError(.internalServerError, message: "no signing key") }
        let relay = email ?? user(subject)?.relayEmail
        let isEmailEvent = type == "email-disabled" || type == "email-enabled"
        let event = Event(type: type, sub: subject, event_time: Int64(now.timeIntervalSince1970 * 1000), email: isEmailEvent ? relay : nil, is_private_email: isEmailEvent ? "true" : nil)
        let eventsJSON = String(decoding: try JSONEncoder().encode(event), as: UTF8.self)
        let id = RandomID.hex(bytes: 12)
        let issuedAt = Int(now.timeIntervalSince1970)
        // Apple's notifications expire a day after they are issued.
        let claims = Claims(iss: issuer, aud: clientID, iat: issuedAt, exp: issuedAt + 86_400, jti: id, events: eventsJSON)
        return (id, try JWTSigning.rs256(header: ["alg": "RS256", "kid": key.kid], claims: claims, key: key.key))
    }
}

/// What happened to one notification delivery.
public struct NotificationDeliveryResult: Codable, Sendable {
    /// The notification's `jti`.
    public var id: String
    /// The event type.
    public var type: String
    /// The user concerned.
    public var subject: String
    /// Where it was posted.
    public var url: String
    /// The HTTP status the receiver answered, if it answered.
    public var status: Int?
    /// The transport error, if it did not.
    public var error: String?
}

/// Refuses admin requests that do not come from loopback.
struct LoopbackOnlyMiddleware: RouterMiddleware {
    typealias Context = EmulatorContext

    func handle(_ request: Request, context: EmulatorContext, next: (Request, EmulatorContext) async throws -> Response) async throws -> Response {
        guard context.isLoopback else {
            throw HTTPError(.forbidden, message: "the emulator's admin API answers on loopback only")
        }
        return try await next(request, context)
    }
}
