import AppleSignIn
import Foundation
import Hummingbird
import Logging

/// Apple's server-to-server notifications and account deletion.
struct LifecycleController: Sendable {
    let store: any NotificationLedger
    let notifications: NotificationVerifier
    let lifecycle: AccountLifecycle
    let renderer: PageRenderer
    let cookies: CookiePolicy
    let metrics: ServerMetrics
    let audit: AuditTrail

    /// `sessions`: the routes `SessionMiddleware` guards; deleting an account needs its session.
    func addRoutes(to router: Router<ServerContext>, sessions: RouterGroup<ServerContext>) {
        router.post("/auth/apple/notifications", use: notification)
        let signedIn = sessions.group(context: SignedInContext.self)
        // Also under /auth/, which stays siwa's in front of an upstream (`SiwaPaths`); the pages link there.
        for path in ["/account/delete", "/auth/account/delete"] {
            signedIn.get(RouterPath(path), use: confirmDeletion)
            signedIn.post(RouterPath(path), use: deleteAccount)
        }
    }

    /// `POST /auth/apple/notifications`: verify, apply once by `jti`, answer 200; anything forged or malformed is 400.
    @Sendable func notification(_ request: Request, context: ServerContext) async throws -> Response {
        var request = request
        guard let body = try? await request.collectBody(upTo: 32 * 1024) else {
            return Response.plain(.contentTooLarge, "notification body too large")
        }
        let verified: AppleNotification
        do {
            verified = try await notifications.verify(body: body.readableBytesView)
        } catch {
            metrics.notification(type: "invalid", outcome: "refused")
            context.logger.notice("notification refused", metadata: ["check": "\(error.check)", "detail": "\(error.message)"])
            return Response.plain(.badRequest, "notification refused: \(error.check)")
        }
        do {
            let outcome = try await store.apply(verified, receivedAt: Date())
            metrics.notification(type: verified.event.type.rawValue, outcome: outcome.rawValue)
            switch verified.event.type {
            case .consentRevoked, .accountDelete:
                audit.record(AuditEvent("sessions-ended", sub: verified.event.subject, reason: verified.event.type.rawValue))
            default: break
            }
            context.logger.info("notification", metadata: ["type": "\(verified.event.type)", "sub": "\(verified.event.subject)", "jti": "\(verified.id)", "outcome": "\(outcome.rawValue)"])
            return Response.plain(.ok, outcome.rawValue)
        } catch {
            context.logger.error("notification not stored; Apple will retry", metadata: ["error": "\(error)"])
            return Response.plain(.serviceUnavailable, "try again")
        }
    }

    @Sendable func confirmDeletion(_ request: Request, context: SignedInContext) async throws -> Response {
        let language = request.pageLanguage
        return renderer.page("delete", title: renderer.string("deleteHeading", language), language: language, slots: ["csrfToken": context.csrfToken])
    }

    @Sendable func deleteAccount(_ request: Request, context: SignedInContext) async throws -> Response {
        var request = request
        let language = request.pageLanguage
        let body = (try? await request.collectBody(upTo: 4096)) ?? ByteBuffer()
        let fields = (try? CallbackPayload.parseFields(body.readableBytesView)) ?? [:]
        guard let token = fields["csrf_token"], ConstantTime.equals(token, context.csrfToken), fields["confirm"] == "yes" else {
            throw ErrorPage.csrf(retryURL: "/auth/account/delete")
        }
        let outcome: AccountLifecycle.DeletionOutcome
        do {
            outcome = try await lifecycle.deleteAccount(subject: context.user.subject, logger: context.logger)
        } catch {
            context.logger.error("account deletion failed", metadata: ["error": "\(error)"])
            throw ErrorPage.storeUnavailable(retryURL: "/auth/account/delete")
        }
        audit.record(AuditEvent("sessions-ended", sub: context.user.subject, email: context.user.email, reason: "account-deleted"))
        let key = switch outcome {
        case .revoked: "deleted.revoked"
        case .revocationQueued: "deleted.queued"
        case .nothingToRevoke: "deleted.none"
        }
        var response = renderer.page("deleted", title: renderer.string("deletedHeading", language), language: language, fixedText: ["message": renderer.string(key, language)])
        response.setCookie(cookies.expired(cookies.sessionName))
        return response
    }
}
