import Foundation
import Hummingbird
import JOSE

/// `GET /auth/authorize` and the consent form, validating like Apple.
extension AppleIDEmulator {
    /// A validated authorization request.
    struct AuthorizeRequest: Sendable {
        var client: EmulatorConfiguration.Client
        var redirectURI: String
        var responseType: String
        var responseMode: String
        var scopes: [String]
        var state: String?
        var nonce: String?

        var wantsIDToken: Bool { responseType.split(separator: " ").contains("id_token") }

        /// The parameters to carry through the consent form.
        var hiddenFields: [(String, String)] {
            var fields = [("client_id", client.clientID), ("redirect_uri", redirectURI), ("response_type", responseType), ("response_mode", responseMode)]
            if !scopes.isEmpty { fields.append(("scope", scopes.joined(separator: " "))) }
            if let state { fields.append(("state", state)) }
            if let nonce { fields.append(("nonce", nonce)) }
            return fields
        }
    }

    /// The user's choices on the consent page (or given headlessly).
    struct Consent: Sendable {
        var action: String
        var subject: String?
        var firstName: String?
        var lastName: String?
        var hideEmail: Bool
        var respondJSON: Bool
    }

    /// Validates parameters the way Apple's authorize endpoint does; the error is Apple's code and a message.
    func validateAuthorize(_ params: [String: String]) -> Result<AuthorizeRequest, AuthorizeRefusal> {
        guard let clientID = params["client_id"], !clientID.isEmpty else {
            return .failure(.init(code: "invalid_request", message: "client_id is missing."))
        }
        guard let client = client(clientID) else {
            return .failure(.init(code: "invalid_client", message: "Invalid client id or web redirect url."))
        }
        guard client.enabled else {
            return .failure(.init(code: "unauthorized_client", message: "Sign in with Apple is not enabled for \(clientID)."))
        }
        guard let redirectURI = params["redirect_uri"], client.redirectURIs.contains(redirectURI) else {
            return .failure(.init(code: "invalid_request", message: "Invalid web redirect url."))
        }
        guard Self.isAcceptableReturnURL(redirectURI) else {
            return .failure(.init(code: "invalid_request", message: "Invalid web redirect url: it must use https and a domain name."))
        }
        let responseType = (params["response_type"] ?? "").split(separator: " ").sorted().joined(separator: " ")
        guard responseType == "code" || responseType == "code id_token" else {
            return .failure(.init(code: "unsupported_response_type", message: "response_type must be code or code id_token."))
        }
        let scopes = (params["scope"] ?? "").split(separator: " ").map(String.init)
        guard scopes.allSatisfy({ $0 == "name" || $0 == "email" || $0 == "openid" }) else {
            return .failure(.init(code: "invalid_scope", message: "scope may contain only name and email."))
        }
        let userScopes = scopes.filter { $0 != "openid" }
        let responseMode = params["response_mode"] ?? (responseType == "code" ? "query" : "fragment")
        guard ["query", "fragment", "form_post", "web_message"].contains(responseMode) else {
            return .failure(.init(code: "invalid_request", message: "response_mode must be query, fragment, form_post or web_message."))
        }
        if !userScopes.isEmpty && responseMode != "form_post" && responseMode != "web_message" {
            return .failure(.init(code: "invalid_request", message: "response_mode must be form_post when name or email scope is requested."))
        }
        if responseType == "code id_token" && responseMode == "query" {
            return .failure(.init(code: "invalid_request", message: "response_mode query is not allowed for response_type code id_token."))
        }
        return .success(AuthorizeRequest(
            client: client, redirectURI: redirectURI, responseType: responseType, responseMode: responseMode,
            scopes: userScopes, state: params["state"], nonce: params["nonce"]
        ))
    }

    /// Apple's rule for return URLs: https on a domain name, never plain http nor an IP address. The emulator's one
    /// deliberate difference: a loopback return URL (`127.0.0.1`, `::1`, `localhost`) registered for the client may
    /// use http, so that local mode runs without certificates.
    static func isAcceptableReturnURL(_ text: String) -> Bool {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased(), !host.isEmpty,
            url.fragment == nil
        else { return false }
        let bareHost = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        let octets = bareHost.split(separator: ".", omittingEmptySubsequences: false).map { UInt8($0) }
        let isIPv4 = octets.count == 4 && octets.allSatisfy { $0 != nil }
        // Loopback (which Apple never sees) may be plain HTTP: local mode, including `*.localhost` names (RFC 6761).
        if bareHost == "localhost" || bareHost.hasSuffix(".localhost") || bareHost == "::1" || (isIPv4 && octets[0] == 127) {
            return scheme == "http" || scheme == "https"
        }
        return scheme == "https" && !isIPv4 && !bareHost.contains(":")
    }

    /// A refusal of an authorization request.
    struct AuthorizeRefusal: Error, Sendable {
        var code: String
        var message: String
    }

    func addAuthorizeRoutes(to router: Router<EmulatorContext>) {
        router.get("auth/authorize") { request, context in
            if let faulted = try await self.applyFault(.authorize, context: context) { return faulted }
            let params = Self.parameters(request.uri.query ?? "")
            return try await self.authorize(params: params)
        }
        router.post("auth/authorize/consent") { request, context in
            var request = request
            let body = try await request.collectBody(upTo: 64 * 1024)
            let params = Self.parameters(String(buffer: body))
            return try await self.authorize(params: params, fromConsentPage: true)
        }
    }

    private func authorize(params: [String: String], fromConsentPage: Bool = false) async throws -> Response {
        let validated: AuthorizeRequest
        switch validateAuthorize(params) {
        case .failure(let refusal):
            logger.info("authorize refused", metadata: ["error": "\(refusal.code)", "reason": "\(refusal.message)"])
            return EmulatorPages.authorizeError(code: refusal.code, message: refusal.message)
        case .success(let request):
            validated = request
        }
        guard fromConsentPage || params["emulator_user"] != nil || params["emulator_action"] != nil else {
            return consentPage(for: validated)
        }
        let consent = Consent(
            action: params["emulator_action"] ?? "continue",
            subject: params["emulator_user"] ?? configuration.users.first?.sub,
            firstName: params["emulator_first_name"].flatMap { $0.isEmpty ? nil : $0 },
            lastName: params["emulator_last_name"].flatMap { $0.isEmpty ? nil : $0 },
            hideEmail: params["emulator_email"] == "hide",
            respondJSON: params["emulator_respond"] == "json"
        )
        return try await complete(validated, consent: consent)
    }

    private func consentPage(for request: AuthorizeRequest) -> Response {
        let users: [[String: Any]] = configuration.users.enumerated().map { index, user in
            ["sub": user.sub, "firstName": user.firstName, "lastName": user.lastName, "email": user.email, "checked": index == 0]
        }
        return EmulatorPages.html(EmulatorPages.consent, [
            "title": "Sign in", "clientID": request.client.clientID, "users": users,
            "hidden": request.hiddenFields.map { ["name": $0.0, "value": $0.1] },
            "askName": request.scopes.contains("name"), "askEmail": request.scopes.contains("email"),
        ])
    }

    /// Issues the result (or the cancellation) and returns it in the requested response mode.
    private func complete(_ request: AuthorizeRequest, consent: Consent) async throws -> Response {
        var fields: [(String, String)] = []
        if consent.action == "cancel" {
            fields.append(("error", "user_cancelled_authorize"))
            if let state = request.state { fields.append(("state", state)) }
            return deliver(fields, for: request, json: consent.respondJSON)
        }
        guard let subject = consent.subject, let user = user(subject) else {
            return EmulatorPages.authorizeError(code: "invalid_request", message: "Unknown test user \(consent.subject ?? "(none)").")
        }
        let email = request.scopes.contains("email") ? (consent.hideEmail ? user.relayEmail : user.email) : ""
        let now = Date()
        let identity = TokenSubject(
            clientID: request.client.clientID, subject: subject, nonce: request.nonce, email: email,
            isPrivateEmail: consent.hideEmail && !email.isEmpty, authTime: now
        )
        let code = await state.issueCode(.init(
            identity: identity, redirectURI: request.redirectURI, expiresAt: now.addingTimeInterval(TimeInterval(configuration.codeLifetime))
        ))
        fields.append(("code", code))
        if request.wantsIDToken {
            fields.append(("id_token", try await signIDToken(identity, code: code, now: now)))
        }
        if let state = request.state { fields.append(("state", state)) }
        let firstTime = await state.recordConsent(clientID: request.client.clientID, subject: subject)
        if firstTime && !request.scopes.isEmpty {
            fields.append(("user", userJSON(user, consent: consent, scopes: request.scopes, email: email)))
        }
        logger.info("authorized", metadata: ["client_id": "\(request.client.clientID)", "sub": "\(subject)", "first_time": "\(firstTime)"])
        return deliver(fields, for: request, json: consent.respondJSON)
    }

    private func userJSON(_ user: EmulatorConfiguration.User, consent: Consent, scopes: [String], email: String) -> String {
        var object: [String: Any] = [:]
        if scopes.contains("name") {
            object["name"] = ["firstName": consent.firstName ?? user.firstName, "lastName": consent.lastName ?? user.lastName]
        }
        if scopes.contains("email") { object["email"] = email }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    /// Sends the result back the way the request asked.
    private func deliver(_ fields: [(String, String)], for request: AuthorizeRequest, json: Bool) -> Response {
        if json {
            struct Headless: Encodable {
                var redirect_uri: String
                var response_mode: String
                var fields: [String: String]
            }
            return jsonResponse(Headless(redirect_uri: request.redirectURI, response_mode: request.responseMode, fields: Dictionary(fields, uniquingKeysWith: { $1 })))
        }
        switch request.responseMode {
        case "form_post":
            return EmulatorPages.html(EmulatorPages.formPost, [
                "title": "Returning", "action": request.redirectURI, "fields": fields.map { ["name": $0.0, "value": $0.1] },
            ])
        case "web_message":
            var origin = request.redirectURI
            if let url = URL(string: request.redirectURI), let scheme = url.scheme, let host = url.host {
                origin = "\(scheme)://\(host)" + (url.port.map { ":\($0)" } ?? "")
            }
            let result: [String: Any] = ["authorization": Dictionary(fields.filter { $0.0 != "user" && $0.0 != "error" }, uniquingKeysWith: { $1 })]
                .merging(fields.first { $0.0 == "error" }.map { ["error": $0.1] } ?? [:]) { $1 }
                .merging(fields.first { $0.0 == "user" }.map { ["user": (try? JSONSerialization.jsonObject(with: Data($0.1.utf8))) ?? [:]] } ?? [:]) { $1 }
            let data = (try? JSONSerialization.data(withJSONObject: result, options: [.sortedKeys])) ?? Data("{}".utf8)
            return EmulatorPages.html(EmulatorPages.webMessage, ["title": "Returning", "origin": origin, "json": String(decoding: data, as: UTF8.self)])
        case "fragment":
            return Response.redirect(to: request.redirectURI + "#" + FormEncoding.encode(fields), type: .found)
        default:
            let separator = request.redirectURI.contains("?") ? "&" : "?"
            return Response.redirect(to: request.redirectURI + separator + FormEncoding.encode(fields), type: .found)
        }
    }

    /// Decodes a query string or form body leniently (the emulator is not what is under test here).
    static func parameters(_ text: String) -> [String: String] {
        var result: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = try? FormEncoding.decodeComponent(Array(parts[0].utf8)) else { continue }
            let value = parts.count > 1 ? (try? FormEncoding.decodeComponent(Array(parts[1].utf8))) ?? "" : ""
            result[name] = value
        }
        return result
    }
}
