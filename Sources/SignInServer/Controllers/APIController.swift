import AppleSignIn
import Foundation
import Hummingbird
import Logging

/// JSON endpoints: native apps' sign-in and their session. Errors are RFC 9457 problem details.
struct APIController: Sendable {
    let native: NativeSignIn
    let store: any UsersAndSessions

    func addRoutes(to router: Router<ServerContext>) {
        router.post("/api/apple/native", use: nativeSignIn)
        router.get("/api/session", use: session)
    }

    @Sendable func nativeSignIn(_ request: Request, context: ServerContext) async throws -> Response {
        var request = request
        guard let body = try? await request.collectBody(upTo: 64 * 1024) else {
            return Self.problem(.contentTooLarge, "too-large", "Request too large", "The body is larger than 64 KiB.")
        }
        let input: NativeSignIn.Request
        do {
            input = try JSONDecoder().decode(NativeSignIn.Request.self, from: Data(body.readableBytesView))
        } catch {
            return Self.problem(.badRequest, "malformed", "Malformed request", "Send JSON with identityToken and authorizationCode.")
        }
        do {
            return Self.json(try await native.signIn(input, logger: context.logger))
        } catch {
            context.logger.notice("native sign-in failed", metadata: ["reason": "\(error.reason)", "detail": "\(error.detail)"])
            return switch error {
            case .expired: Self.problem(.badRequest, "expired", "Authorization code expired or used", "Ask the user to sign in with Apple again.")
            case .notVerified: Self.problem(.unauthorized, "not-verified", "Identity token not verified", error.detail)
            case .unavailable: Self.problem(.serviceUnavailable, "apple-unavailable", "Apple could not be reached", "Try again shortly.")
            case .storeUnavailable: Self.problem(.serviceUnavailable, "store-unavailable", "Service temporarily unavailable", "Try again shortly.")
            case .misconfigured: Self.problem(.internalServerError, "misconfigured", "Server misconfigured", "The server's Apple credentials for this app were refused.")
            default: Self.problem(.badRequest, "malformed", "Malformed request", error.detail)
            }
        }
    }

    @Sendable func session(_ request: Request, context: ServerContext) async throws -> Response {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer "), header.count > 7 else {
            return Self.problem(.unauthorized, "no-session", "Not signed in", "Send Authorization: Bearer <session_token>.")
        }
        let token = String(header.dropFirst(7))
        let found: (SessionRecord, UserRecord)?
        do {
            found = try await store.session(idHash: SignInFlow.hash(token), now: Date())
        } catch {
            return Self.problem(.serviceUnavailable, "store-unavailable", "Try again", "The database did not answer.")
        }
        guard let (session, user) = found else {
            return Self.problem(.unauthorized, "no-session", "Not signed in", "The session token is unknown or expired.")
        }
        struct Answer: Encodable {
            var sub: String
            var email: String?
            var is_private_email: Bool
            var name: String?
            var signed_in_at: Date
            var expires_at: Date
        }
        return Self.json(Answer(sub: user.subject, email: user.email, is_private_email: user.isPrivateEmail, name: user.displayName, signed_in_at: session.createdAt, expires_at: session.expiresAt))
    }

    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> Response {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        return Response(status: status, headers: [.contentType: "application/json", .cacheControl: "no-store"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// An RFC 9457 problem details response.
    static func problem(_ status: HTTPResponse.Status, _ type: String, _ title: String, _ detail: String) -> Response {
        struct Problem: Encodable {
            var type: String
            var title: String
            var status: Int
            var detail: String
        }
        var response = json(Problem(type: "urn:siwa:problem:\(type)", title: title, status: Int(status.code), detail: detail), status: status)
        response.headers[.contentType] = "application/problem+json"
        return response
    }
}
