import AppleSignIn
import Foundation
import Hummingbird
import Logging

/// Apple's server-to-server notifications and account deletion.
struct LifecycleController: Sendable {
    let store: any NotificationLedger & UsersAndSessions
    let notifications: NotificationVerifier
    let lifecycle: AccountLifecycle
    let renderer: PageRenderer
    let cookies: CookiePolicy
    let metrics: ServerMetrics

    func addRoutes(to router: Router<ServerContext>) {
        router.post("/auth/apple/notifications", use: notification)
        router.get("/account/delete", use: confirmDeletion)
        router.post("/account/delete", use: deleteAccount)
    }

    /// `POST /auth/apple/notifications`: verify, apply once by `jti`, answer 200; anything forged or malformed is 400.
    @Sendable func notification(_ request: Request, context: ServerContext) async throws -> Response {
        var request = request
        guard let body = try? await request.collectBody(upTo: 32 * 1024) else {
            return Self.plain(.contentTooLarge, "notification body too large")
        }
        let verified: AppleNotification
        do {
            verified = try await notifications.verify(body: body.readableBytesView)
        } catch {
            metrics.notification(type: "invalid", outcome: "refused")
            context.logger.notice("notification refused", metadata: ["check": "\(error.check)", "detail": "\(error.message)"])
            return Self.plain(.badRequest, "notification refused: \(error.check)")
        }
        do {
            let outcome = try await store.apply(verified, receivedAt: Date())
            metrics.notification(type: verified.event.type.rawValue, outcome: outcome.rawValue)
            context.logger.info("notification", metadata: ["type": "\(verified.event.type)", "sub": "\(verified.event.subject)", "jti": "\(verified.id)", "outcome": "\(outcome.rawValue)"])
            return Self.plain(.ok, outcome.rawValue)
        } catch {
            context.logger.error("notification not stored; Apple will retry", metadata: ["error": "\(error)"])
            return Self.plain(.serviceUnavailable, "try again")
        }
    }

    @Sendable func confirmDeletion(_ request: Request, context: ServerContext) async throws -> Response {
        let language = WebController.language(request)
        guard let (session, _) = try? await currentSession(request) else {
            return renderer.errorPage("signedOut", language: language, status: .unauthorized)
        }
        return renderer.page("delete", title: renderer.string("deleteHeading", language), language: language, slots: ["csrfToken": session.csrfToken])
    }

    @Sendable func deleteAccount(_ request: Request, context: ServerContext) async throws -> Response {
        var request = request
        let language = WebController.language(request)
        let body = (try? await request.collectBody(upTo: 4096)) ?? ByteBuffer()
        let fields = (try? CallbackPayload.parseFields(body.readableBytesView)) ?? [:]
        let found: (SessionRecord, UserRecord)?
        do {
            found = try await currentSession(request)
        } catch {
            return renderer.errorPage("storeUnavailable", language: language, status: .serviceUnavailable, actionURL: "/account/delete", actionKey: "tryAgain")
        }
        guard let (session, user) = found else {
            return renderer.errorPage("signedOut", language: language, status: .unauthorized)
        }
        guard let token = fields["csrf_token"], ConstantTime.equals(token, session.csrfToken), fields["confirm"] == "yes" else {
            return renderer.errorPage("csrf", language: language, status: .forbidden, actionURL: "/account/delete", actionKey: "tryAgain")
        }
        let outcome: AccountLifecycle.DeletionOutcome
        do {
            outcome = try await lifecycle.deleteAccount(subject: user.subject, logger: context.logger)
        } catch {
            context.logger.error("account deletion failed", metadata: ["error": "\(error)"])
            return renderer.errorPage("storeUnavailable", language: language, status: .serviceUnavailable, actionURL: "/account/delete", actionKey: "tryAgain")
        }
        let key = switch outcome {
        case .revoked: "deleted.revoked"
        case .revocationQueued: "deleted.queued"
        case .nothingToRevoke: "deleted.none"
        }
        var response = renderer.page("deleted", title: renderer.string("deletedHeading", language), language: language, fixedText: ["message": renderer.string(key, language)])
        response.setCookie(cookies.expired(cookies.sessionName))
        return response
    }

    private func currentSession(_ request: Request) async throws -> (SessionRecord, UserRecord)? {
        try await cookies.session(for: request, in: store)
    }

    static func plain(_ status: HTTPResponse.Status, _ text: String) -> Response {
        Response(status: status, headers: [.contentType: "text/plain; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: text + "\n")))
    }
}
