import AppleSignIn
import Foundation
import Hummingbird
import JOSE
import Logging
import Synchronization

/// The device flow (RFC 8628) for command lines: `POST /oauth2/device_authorization` gives a client registered with
/// `--device` a device code to poll with and a user code to show; the person opens `/auth/device` (signing in with
/// Apple first when needed), sees which client asks for what, and approves or refuses by POST with the CSRF token;
/// the token endpoint's `device_code` grant (`TokenController+Device`) then answers the client's polls.
struct DeviceController: Sendable {
    let settings: ProviderSettings
    let clients: ProviderClients
    let store: any DeviceGrants
    let renderer: PageRenderer
    let front: FrontSettings
    let audit: AuditTrail
    let proxy: ClientAddressResolver
    let guesses: DeviceGuesses

    /// How long a device code lives, and the first interval between polls (RFC 8628's example values).
    static let lifetime: TimeInterval = 600
    static let interval = 5

    func addRoutes(to router: Router<ServerContext>, sessions: RouterGroup<ServerContext>) {
        router.post("/oauth2/device_authorization", use: authorization)
        sessions.get("/auth/device", use: page)
        sessions.post("/auth/device", use: decide)
    }

    // MARK: the client's side

    @Sendable func authorization(_ request: Request, context: ServerContext) async throws -> Response {
        do {
            let form = try await TokenController.form(of: request)
            let client = try await TokenController.authenticate(request, form: form, clients: clients, context: context)
            guard client.deviceFlow else {
                throw TokenController.TokenError(code: "unauthorized_client", description: "this client is not registered for the device flow (--device)")
            }
            // A scope as command lines send it, spaces literal or encoded; openid unless another was asked for.
            let requested = Set((form["scope"] ?? "openid").split(whereSeparator: { $0 == " " || $0 == "+" }).map(String.init))
            let granted = requested.intersection(client.allowedScopes)
            guard !granted.isEmpty else { throw TokenController.TokenError(code: "invalid_scope", description: "none of the scopes asked for is allowed to this client") }
            let now = Date()
            let deviceCode = RandomToken.generate()
            var saved: DeviceGrantRecord?
            for _ in 0..<5 where saved == nil {
                let grant = DeviceGrantRecord(
                    deviceCodeHash: ProviderSettings.hash(deviceCode), userCode: DeviceCodes.userCode(), clientID: client.clientID,
                    scope: granted.sorted().joined(separator: " "), createdAt: now, expiresAt: now.addingTimeInterval(Self.lifetime), interval: Self.interval
                )
                if try await store.saveDeviceGrant(grant, now: now) { saved = grant }
            }
            guard let saved else { throw TokenController.TokenError(status: .serviceUnavailable, code: "slow_down", description: "no free user code now; try again") }
            let shown = DeviceCodes.display(saved.userCode)
            let verification = front.publicOrigin + "/auth/device"
            context.logger.info("device authorization issued", metadata: ["client_id": "\(client.clientID)"])
            var response = Response.json(DeviceAuthorizationAnswer(
                device_code: deviceCode, user_code: shown, verification_uri: verification,
                verification_uri_complete: verification + "?" + FormEncoding.encode([("user_code", shown)]), expires_in: Int(Self.lifetime),
                interval: Self.interval
            ))
            response.headers[.cacheControl] = "no-store"
            return response
        } catch let error as TokenController.TokenError {
            context.logger.notice("device authorization refused", metadata: ["error": "\(error.code)", "reason": "\(error.description)"])
            return error.response
        } catch {
            context.logger.error("store unavailable", metadata: ["error": "\(String(describing: type(of: error)))"])
            return TokenController.TokenError(status: .serviceUnavailable, code: "temporarily_unavailable", description: "the store did not answer; try again").response
        }
    }

    // MARK: the person's side

    /// `GET /auth/device[?user_code=…]`: the code's form, or with a live code, who asks for what and the two buttons.
    @Sendable func page(_ request: Request, context: ServerContext) async throws -> Response {
        guard case .signedIn(let session, let user) = try person(request, context) else { return try request.signInFirst() }
        guard let typed = request.uri.queryParameters["user_code"].map(String.init), !typed.isEmpty else {
            return render(request, ["entry": true])
        }
        let address = proxy.clientAddress(request, context: context)
        guard guesses.allows(session: session.publicID, address: address) else { return tooManyTries(request, user: user, address: address) }
        let code = DeviceCodes.normalized(typed)
        var grant: DeviceGrantRecord?
        do {
            if let code { grant = try await store.pendingDeviceGrant(userCode: code, now: Date()) }
        } catch {
            throw ErrorPage.storeUnavailable(retryURL: request.uri.description)
        }
        guard let grant, let client = try? await clients.client(grant.clientID) else {
            guesses.missed(session: session.publicID, address: address)
            audit.record(AuditEvent("device-code-miss", sub: user.subject, email: user.email, ip: address))
            return render(request, ["entry": true, "wrong": true, "typed": typed])
        }
        return render(request, [
            "confirm": true, "client": client.clientID, "scopes": grant.scope, "who": user.displayName ?? user.email ?? user.subject,
            "code": DeviceCodes.display(grant.userCode), "csrfToken": session.csrfToken,
        ])
    }

    /// `POST /auth/device` with `csrf_token`, `user_code` and `decision` (`approve`, `deny`).
    @Sendable func decide(_ request: Request, context: ServerContext) async throws -> Response {
        guard case .signedIn(let session, let user) = try person(request, context) else { return try request.signInFirst() }
        var request = request
        let body = (try? await request.collectBody(upTo: 4096)) ?? ByteBuffer()
        let fields = (try? CallbackPayload.parseFields(body.readableBytesView)) ?? [:]
        guard let token = fields["csrf_token"], ConstantTime.equals(token, session.csrfToken) else { throw ErrorPage.csrf(retryURL: "/auth/device") }
        let address = proxy.clientAddress(request, context: context)
        guard guesses.allows(session: session.publicID, address: address) else { return tooManyTries(request, user: user, address: address) }
        guard let code = fields["user_code"].flatMap(DeviceCodes.normalized), let decision = fields["decision"], ["approve", "deny"].contains(decision) else {
            return render(request, ["entry": true, "wrong": true])
        }
        let now = Date()
        var approve = decision == "approve"
        var refusedByGroups = false
        do {
            guard let grant = try await store.pendingDeviceGrant(userCode: code, now: now) else {
                guesses.missed(session: session.publicID, address: address)
                return render(request, ["entry": true, "wrong": true])
            }
            // A client limited to some groups is approved only for their members, as at the authorization endpoint.
            if approve, let client = try await clients.client(grant.clientID), !client.allowedGroups.isEmpty,
                !front.access.groups(subject: user.subject, email: user.email).contains(where: client.allowedGroups.contains)
            {
                approve = false
                refusedByGroups = true
            }
            guard try await store.decideDeviceGrant(
                userCode: code, approve: approve, subject: user.subject, sessionID: session.publicID, authTime: session.createdAt, now: now
            ) else { return render(request, ["entry": true, "wrong": true]) }
            audit.record(AuditEvent(approve ? "device-approved" : "device-denied", sub: user.subject, email: user.email, ip: address, reason: grant.clientID))
            context.logger.info("device authorization decided", metadata: ["client_id": "\(grant.clientID)", "approved": "\(approve)"])
        } catch {
            throw ErrorPage.storeUnavailable(retryURL: "/auth/device")
        }
        let message = refusedByGroups ? "deviceRefusedByGroups" : approve ? "deviceApproved" : "deviceDenied"
        return render(request, ["done": true, "message": renderer.string(message, request.pageLanguage)])
    }

    /// The person of this request (`.signedIn`), or anyone else (`.notLooked`: sent to sign in first, and back here).
    private func person(_ request: Request, _ context: ServerContext) throws -> Visitor {
        switch context.visitor {
        case .signedIn: return context.visitor
        case .storeUnavailable(let retryURL): throw ErrorPage.storeUnavailable(retryURL: retryURL)
        case .anonymous, .notLooked, .bearer, .badToken: return .notLooked
        }
    }

    private func tooManyTries(_ request: Request, user: UserRecord, address: String) -> Response {
        audit.record(AuditEvent("device-code-guessing", sub: user.subject, email: user.email, ip: address))
        var response = render(request, ["entry": true, "tooMany": true], status: .tooManyRequests)
        response.headers[.retryAfter] = String(Int(DeviceGuesses.window))
        return response
    }

    private func render(_ request: Request, _ values: [String: Any], status: HTTPResponse.Status = .ok) -> Response {
        let language = request.pageLanguage
        return renderer.listPage("device", title: renderer.string("deviceHeading", language), language: language, values: values, status: status)
    }
}

/// `/oauth2/device_authorization`'s answer (RFC 8628 §3.2).
struct DeviceAuthorizationAnswer: Encodable {
    var device_code: String
    var user_code: String
    var verification_uri: String
    var verification_uri_complete: String
    var expires_in: Int
    var interval: Int
}

/// User codes: 8 characters of 20 consonants (RFC 8628 §6.1: no vowels, so no words; no look-alikes such as 0/O,
/// 1/I/L, 5/S are in it as letters only), about 34.5 bits, shown as `XXXX-XXXX`, typed in any case, with or without
/// the dash or spaces.
enum DeviceCodes {
    static let alphabet = Array("BCDFGHJKLMNPQRSTVWXZ")

    static func userCode() -> String {
        var generator = SystemRandomNumberGenerator()
        return String((0..<8).map { _ in alphabet[Int(generator.next(upperBound: UInt32(alphabet.count)))] })
    }

    static func display(_ code: String) -> String {
        String(code.prefix(4)) + "-" + String(code.dropFirst(4))
    }

    /// What the person typed, as stored; nil when it cannot be a user code.
    static func normalized(_ typed: String) -> String? {
        let kept = typed.uppercased().filter { $0 != "-" && $0 != " " }
        guard kept.count == 8, kept.allSatisfy(alphabet.contains) else { return nil }
        return kept
    }
}

/// Wrong user codes tried, per session and per client address, in a sliding window: past the bound, `/auth/device`
/// answers 429 until the window has passed, so a person (or a script with a stolen session) cannot walk the space.
final class DeviceGuesses: Sendable {
    static let window: TimeInterval = 900
    static let perSession = 5
    static let perAddress = 20
    private let misses = Mutex<[String: [Date]]>([:])

    func allows(session: String, address: String, now: Date = Date()) -> Bool {
        misses.withLock { misses in
            count("s:" + session, now, &misses) < Self.perSession && count("a:" + address, now, &misses) < Self.perAddress
        }
    }

    func missed(session: String, address: String, now: Date = Date()) {
        misses.withLock { misses in
            if misses.count > 50_000 { misses = misses.filter { $0.value.contains { now.timeIntervalSince($0) < Self.window } } }
            misses["s:" + session, default: []].append(now)
            misses["a:" + address, default: []].append(now)
        }
    }

    private func count(_ key: String, _ now: Date, _ misses: inout [String: [Date]]) -> Int {
        let recent = (misses[key] ?? []).filter { now.timeIntervalSince($0) < Self.window }
        misses[key] = recent.isEmpty ? nil : recent
        return recent.count
    }
}
