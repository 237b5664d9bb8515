import AppleSignIn
import Foundation
import HTTPTypes
import Hummingbird
import JOSE
import Logging
import Synchronization

/// The pages and the flow: sign-in page, start, callback, session page, sign-out.
struct WebController: Sendable {
    let flow: SignInFlow
    let store: any UsersAndSessions
    let renderer: PageRenderer
    let cookies: CookiePolicy
    let settings: ServerSettings
    let metrics: ServerMetrics
    let proxy: ClientAddressResolver
    /// Apple's origin (for the popup's postMessage check) and the return URL's host, worked out once: reading
    /// a Foundation URL's parts on every request showed in profiles.
    let appleOrigin: String
    let returnAuthority: String

    init(
        flow: SignInFlow, store: any UsersAndSessions, renderer: PageRenderer, cookies: CookiePolicy, settings: ServerSettings,
        metrics: ServerMetrics, proxy: ClientAddressResolver
    ) {
        self.flow = flow
        self.store = store
        self.renderer = renderer
        self.cookies = cookies
        self.settings = settings
        self.metrics = metrics
        self.proxy = proxy
        appleOrigin = Self.origin(settings.apple.appleBaseURL)
        returnAuthority = Self.authority(settings.returnURL)
    }

    func addRoutes(to router: Router<ServerContext>) {
        router.get("/", use: signInPage)
        router.get("/button.css") { _, _ in
            Response(status: .ok, headers: [.contentType: "text/css; charset=utf-8", .cacheControl: "max-age=300"], body: .init(byteBuffer: ByteBuffer(string: settings.button.css)))
        }
        router.get("/auth/apple", use: start)
        router.post("/auth/apple/callback", use: callbackPost)
        router.post("/auth/apple/popup", use: popupResult)
        router.get("/auth/apple/callback", use: callbackGet)
        router.get("/session", use: sessionPage)
        router.post("/auth/signout", use: signOut)
    }

    // MARK: pages

    @Sendable func signInPage(_ request: Request, context: ServerContext) async throws -> Response {
        let language = Self.language(request)
        let signedIn = (try? await currentSession(request)) != nil
        let returnTo = SignInFlow.safeReturnPath(request.uri.queryParameters.get("return_to"))
        let csrf = request.cookieValue(cookies.csrfName) ?? RandomToken.generate()
        let encodedReturn = FormEncoding.encode(returnTo)
        var response = renderer.page(
            "signin", title: renderer.string("signInTitle", language), language: language,
            fixed: ["signedIn": signedIn],
            fixedText: [
                "buttonStyle": settings.button.style.rawValue,
                "buttonTitle": renderer.string(settings.button.title.stringKey, language),
                "appleOrigin": appleOrigin,
            ],
            slots: [
                "startURL": "/auth/apple?return_to=" + encodedReturn,
                "popupStartURL": "/auth/apple?mode=popup&return_to=" + encodedReturn,
                "csrfToken": csrf,
            ]
        )
        response.headers.append(HTTPField(name: .setCookie, value: cookies.csrfHeader(csrf)))
        return response
    }

    @Sendable func sessionPage(_ request: Request, context: ServerContext) async throws -> Response {
        let language = Self.language(request)
        let found: (SessionRecord, UserRecord)?
        do {
            found = try await currentSession(request)
        } catch {
            context.logger.error("store unavailable", metadata: ["error": "\(error)"])
            return renderer.errorPage("storeUnavailable", language: language, status: .serviceUnavailable, actionURL: "/session", actionKey: "tryAgain")
        }
        guard let (session, user) = found else {
            return renderer.errorPage("signedOut", language: language, status: .unauthorized)
        }
        let dates = DateFormatters.shared
        return renderer.page(
            "session", title: renderer.string("sessionTitle", language), language: language,
            fixed: ["privateEmail": user.isPrivateEmail, "forwardingDisabled": user.emailForwardingDisabled],
            slots: [
                "sub": user.subject,
                "name": user.displayName ?? "",
                "email": user.email ?? "",
                "signedInAt": dates.display(session.createdAt, language) + " UTC",
                "signedInAtISO": dates.isoString(session.createdAt),
                "expiresAt": dates.display(session.expiresAt, language) + " UTC",
                "expiresAtISO": dates.isoString(session.expiresAt),
                "csrfToken": session.csrfToken,
            ]
        )
    }

    // MARK: flow

    @Sendable func start(_ request: Request, context: ServerContext) async throws -> Response {
        let language = Self.language(request)
        let returnTo = SignInFlow.safeReturnPath(request.uri.queryParameters.get("return_to"))
        // The binding cookie must be set on the host Apple returns to, or it will not come back.
        // In local mode, move the browser to the return URL's host (localhost vs 127.0.0.1) before setting it.
        if settings.mode == .local, let host = proxy.host(request, context: context), host != returnAuthority {
            return Response.redirect(to: settings.origin + "/auth/apple?return_to=" + FormEncoding.encode(returnTo), type: .found)
        }
        // Behind a proxy in Apple mode, a browser on plain HTTP would never send the Secure binding cookie back.
        if settings.secureCookies, proxy.trustedProxies.contains(context.remoteAddress?.ipAddress ?? ""), proxy.scheme(request, context: context) != "https" {
            return Response.redirect(to: settings.origin + "/auth/apple?return_to=" + FormEncoding.encode(returnTo), type: .found)
        }
        let started: SignInFlow.Started
        do {
            started = try await flow.start(returnTo: returnTo, responseMode: request.uri.queryParameters.get("mode") == "popup" ? .webMessage : .formPost)
        } catch {
            context.logger.error("could not start a sign-in", metadata: ["error": "\(error)"])
            return renderer.errorPage("storeUnavailable", language: language, status: .serviceUnavailable, actionURL: "/", actionKey: "tryAgain")
        }
        metrics.signInsStarted.increment()
        var response = Response.redirect(to: started.authorizeURL.absoluteString, type: .found)
        response.setCookie(cookies.binding(started.bindingToken))
        response.headers[.cacheControl] = "no-store"
        return response
    }

    @Sendable func callbackPost(_ request: Request, context: ServerContext) async throws -> Response {
        var request = request
        let language = Self.language(request)
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: CallbackPayload.maximumBodySize)
        } catch {
            return failure(.tooLarge, language: language, context: context, clearBinding: false)
        }
        let payload: CallbackPayload
        do {
            payload = try CallbackPayload.parse(formBody: body.readableBytesView)
        } catch {
            return failure(.malformed(error.message), language: language, context: context, clearBinding: false)
        }
        return await complete(payload, request: request, language: language, context: context, offerRetry: true)
    }

    @Sendable func callbackGet(_ request: Request, context: ServerContext) async throws -> Response {
        let language = Self.language(request)
        let payload: CallbackPayload
        do {
            payload = try CallbackPayload.parse(query: request.uri.query ?? "")
        } catch {
            return failure(.malformed(error.message), language: language, context: context, clearBinding: false)
        }
        return await complete(payload, request: request, language: language, context: context, requireFrontChannelToken: false)
    }

    /// `POST /auth/apple/popup`: the result the popup received by postMessage, sent by `popup.js` with the
    /// double-submit CSRF token; validated exactly like a form_post return. Answers JSON.
    @Sendable func popupResult(_ request: Request, context: ServerContext) async throws -> Response {
        var request = request
        let language = Self.language(request)
        guard let name = HTTPField.Name.xCSRFToken, let header = request.headers[name], let cookie = request.cookieValue(cookies.csrfName),
            ConstantTime.equals(header, cookie), request.headers[.origin].map({ $0 == settings.origin }) ?? true
        else {
            context.logger.notice("popup result refused: CSRF token or origin wrong")
            return APIController.json(["error": "csrf", "message": renderer.string("error.csrf.message", language)], status: .forbidden)
        }
        struct PopupResult: Decodable {
            struct Authorization: Decodable {
                var code: String?
                var id_token: String?
                var state: String?
            }
            struct User: Decodable {
                struct Name: Decodable {
                    var firstName: String?
                    var lastName: String?
                }
                var name: Name?
                var email: String?
            }
            var authorization: Authorization?
            var user: User?
            var error: String?
            var state: String?
        }
        let result: PopupResult
        do {
            let body = try await request.collectBody(upTo: CallbackPayload.maximumBodySize)
            result = try JSONDecoder().decode(PopupResult.self, from: Data(body.readableBytesView))
        } catch {
            return popupFailure(.malformed("popup result is not JSON"), language: language, context: context)
        }
        let user = result.user.map { AppleUser(firstName: $0.name?.firstName, lastName: $0.name?.lastName, email: $0.email) }
        let payload = CallbackPayload(code: result.authorization?.code, idToken: result.authorization?.id_token, state: result.authorization?.state ?? result.state, user: user, error: result.error)
        let binding = request.cookieValue(cookies.bindingName)
        do {
            let completed = try await flow.complete(payload, bindingToken: binding, logger: context.logger)
            metrics.signInsCompleted.increment()
            var response = APIController.json(["redirect": completed.returnTo])
            response.setCookie(cookies.session(completed.sessionID, maxAge: Int(settings.sessionLifetime)))
            response.setCookie(cookies.expired(cookies.bindingName))
            return response
        } catch {
            return popupFailure(error, language: language, context: context)
        }
    }

    private func popupFailure(_ failure: SignInFailure, language: PageLanguage, context: ServerContext) -> Response {
        metrics.signInFailed(failure.reason)
        context.logger.notice("popup sign-in failed", metadata: ["reason": "\(failure.reason)", "detail": "\(failure.detail)"])
        let key = Self.pageKey(failure)
        return APIController.json(["error": failure.reason, "message": renderer.string("error.\(key).heading", language) + ". " + renderer.string("error.\(key).message", language)], status: failure.httpStatus)
    }

    /// The error-page key for a failure.
    static func pageKey(_ failure: SignInFailure) -> String {
        switch failure {
        case .cancelled: "cancelled"
        case .expired: "expired"
        case .malformed: "malformed"
        case .notVerified: "notVerified"
        case .unavailable: "unavailable"
        case .storeUnavailable: "storeUnavailable"
        case .misconfigured: "misconfigured"
        case .tooLarge: "tooLarge"
        }
    }

    private func complete(
        _ payload: CallbackPayload, request: Request, language: PageLanguage, context: ServerContext, requireFrontChannelToken: Bool = true,
        offerRetry: Bool = false
    ) async -> Response {
        let binding = request.cookieValue(cookies.bindingName)
        let started = ContinuousClock.now
        defer { metrics.callbackDuration.record(ContinuousClock.now - started) }
        do {
            let completed = try await flow.complete(payload, bindingToken: binding, requireFrontChannelToken: requireFrontChannelToken, logger: context.logger)
            metrics.signInsCompleted.increment()
            var response = Response.redirect(to: completed.returnTo, type: .normal)
            response.setCookie(cookies.session(completed.sessionID, maxAge: Int(settings.sessionLifetime)))
            response.setCookie(cookies.expired(cookies.bindingName))
            return response
        } catch {
            // Apple unreachable before the code was redeemed: the sign-in is pending again, so the page offers to
            // send the same return again, and the binding cookie stays for it.
            if offerRetry, case .unavailable = error {
                return failure(error, language: language, context: context, clearBinding: false, resend: payload)
            }
            return failure(error, language: language, context: context, clearBinding: true)
        }
    }

    private func failure(_ failure: SignInFailure, language: PageLanguage, context: ServerContext, clearBinding: Bool, resend: CallbackPayload? = nil) -> Response {
        let level: Logger.Level = switch failure {
        case .misconfigured: .critical
        case .unavailable, .storeUnavailable: .error
        case .cancelled: .info
        default: .notice
        }
        metrics.signInFailed(failure.reason)
        context.logger.log(level: level, "sign-in failed", metadata: ["reason": "\(failure.reason)", "detail": "\(failure.detail)"])
        let status = failure.httpStatus
        let retry = failure == .cancelled || failure.httpStatus == .serviceUnavailable
        var response = renderer.errorPage(
            Self.pageKey(failure), language: language, status: status, actionURL: "/",
            actionKey: resend == nil && retry ? "tryAgain" : "goToSignIn", retry: resend
        )
        if clearBinding { response.setCookie(cookies.expired(cookies.bindingName)) }
        return response
    }

    @Sendable func signOut(_ request: Request, context: ServerContext) async throws -> Response {
        var request = request
        let language = Self.language(request)
        let body = (try? await request.collectBody(upTo: 4096)) ?? ByteBuffer()
        let fields = (try? CallbackPayload.parseFields(body.readableBytesView)) ?? [:]
        guard let cookie = request.cookieValue(cookies.sessionName) else {
            return Response.redirect(to: "/", type: .normal)
        }
        let idHash = SignInFlow.hash(cookie)
        do {
            guard let (session, _) = try await store.session(idHash: idHash, now: Date()) else {
                var response = Response.redirect(to: "/", type: .normal)
                response.setCookie(cookies.expired(cookies.sessionName))
                return response
            }
            guard let token = fields["csrf_token"], ConstantTime.equals(token, session.csrfToken) else {
                context.logger.notice("sign-out refused: CSRF token missing or wrong")
                return renderer.errorPage("csrf", language: language, status: .forbidden, actionURL: "/session", actionKey: "tryAgain")
            }
            _ = try await store.deleteSession(idHash: idHash)
        } catch {
            context.logger.error("store unavailable", metadata: ["error": "\(error)"])
            return renderer.errorPage("storeUnavailable", language: language, status: .serviceUnavailable, actionURL: "/session", actionKey: "tryAgain")
        }
        context.logger.info("signed out")
        var response = Response.redirect(to: "/", type: .normal)
        response.setCookie(cookies.expired(cookies.sessionName))
        return response
    }

    // MARK: helpers

    private func currentSession(_ request: Request) async throws -> (SessionRecord, UserRecord)? {
        try await cookies.session(for: request, in: store)
    }

    static func language(_ request: Request) -> PageLanguage {
        PageLanguage.negotiate(request.headers[.acceptLanguage])
    }

    static func origin(_ url: URL) -> String {
        "\(url.scheme ?? "https")://" + authority(url)
    }

    static func authority(_ url: URL) -> String {
        (url.host ?? "") + (url.port.map { ":\($0)" } ?? "")
    }

}

extension SignInFailure {
    /// The status of the page or answer that reports this failure.
    var httpStatus: HTTPResponse.Status {
        switch self {
        case .cancelled: .ok
        case .expired, .malformed, .notVerified: .badRequest
        case .unavailable, .storeUnavailable: .serviceUnavailable
        case .misconfigured: .internalServerError
        case .tooLarge: .contentTooLarge
        }
    }
}

/// Date formatters are expensive to create: made once, reused (they are thread-safe for formatting).
final class DateFormatters: @unchecked Sendable {
    // @unchecked: the formatters are configured once in init and only used to format afterwards, which
    // Foundation documents as thread-safe; the memo is behind its own lock.
    static let shared = DateFormatters()
    private let iso = ISO8601DateFormatter()
    private let english: DateFormatter
    private let chinese: DateFormatter
    /// Formatted text by (kind, second): a session's two dates are formatted on every view of its page, and ICU
    /// formatting cost more than the rest of the page. Cleared when full.
    private let memo = Mutex<[MemoKey: String]>([:])
    private static let memoLimit = 8192

    private struct MemoKey: Hashable {
        var kind: UInt8
        var second: Int64
    }

    private init() {
        func make(_ locale: String) -> DateFormatter {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: locale)
            formatter.dateStyle = .medium
            formatter.timeStyle = .short
            formatter.timeZone = TimeZone(identifier: "UTC")
            return formatter
        }
        english = make("en_US")
        chinese = make("zh_Hans_CN")
    }

    /// Medium date and short time in `language`, UTC.
    func display(_ date: Date, _ language: PageLanguage) -> String {
        memoized(kind: language == .english ? 0 : 1, date) { language == .english ? english.string(from: $0) : chinese.string(from: $0) }
    }

    /// ISO 8601, UTC.
    func isoString(_ date: Date) -> String {
        memoized(kind: 2, date) { iso.string(from: $0) }
    }

    private func memoized(kind: UInt8, _ date: Date, _ format: (Date) -> String) -> String {
        let key = MemoKey(kind: kind, second: Int64(date.timeIntervalSince1970.rounded(.down)))
        if let text = memo.withLock({ $0[key] }) { return text }
        let text = format(Date(timeIntervalSince1970: Double(key.second)))
        memo.withLock { memo in
            if memo.count >= Self.memoLimit { memo.removeAll(keepingCapacity: true) }
            memo[key] = text
        }
        return text
    }
}
