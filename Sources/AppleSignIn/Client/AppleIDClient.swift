import JOSE
import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// Calls Apple's token and revoke endpoints (APPLE.md §3, §6) with a cached client secret, an explicit
/// timeout on every call and a bounded answer.
public struct AppleIDClient: Sendable {
    /// What kind of token is revoked.
    public enum TokenTypeHint: String, Sendable {
        /// A refresh token.
        case refreshToken = "refresh_token"
        /// An access token.
        case accessToken = "access_token"
    }

    private let configuration: AppleSignInConfiguration
    private let httpClient: HTTPClient
    private let secrets: ClientSecretSigner
    private let timeout: TimeAmount
    private let logger: Logger
    private let observer: Observer?
    /// Called after every call to Apple with the path, the outcome (`ok` or the error kind) and the duration.
    public typealias Observer = @Sendable (_ path: String, _ outcome: String, _ duration: Duration) -> Void
    /// Largest answer accepted.
    public static let maximumResponseSize = 64 * 1024

    /// Creates a client; `httpClient` is owned by the caller, who shuts it down.
    public init(configuration: AppleSignInConfiguration, httpClient: HTTPClient, secrets: ClientSecretSigner, timeout: TimeAmount = .seconds(10), logger: Logger = Logger(label: "siwa.apple"), observer: Observer? = nil) {
        self.observer = observer
        self.configuration = configuration
        self.httpClient = httpClient
        self.secrets = secrets
        self.timeout = timeout
        self.logger = logger
    }

    /// Exchanges an authorization code. `clientID` defaults to the Services ID; native apps' codes use their bundle ID.
    public func exchange(code: String, redirectURI: URL?, clientID: ClientID? = nil, logger: Logger? = nil) async throws(AppleIDClientError) -> TokenResponse {
        let client = clientID ?? configuration.servicesID
        var form = [("client_id", client.rawValue), ("client_secret", try secret(for: client)), ("code", code), ("grant_type", "authorization_code")]
        if let redirectURI { form.append(("redirect_uri", redirectURI.absoluteString)) }
        return try await decode(TokenResponse.self, from: post("/auth/token", form: form, logger: logger))
    }

    /// Checks a refresh token (Apple asks for this at most once a day per user); no new refresh token is returned.
    public func refresh(refreshToken: String, clientID: ClientID? = nil, logger: Logger? = nil) async throws(AppleIDClientError) -> TokenResponse {
        let client = clientID ?? configuration.servicesID
        let form = [("client_id", client.rawValue), ("client_secret", try secret(for: client)), ("grant_type", "refresh_token"), ("refresh_token", refreshToken)]
        return try await decode(TokenResponse.self, from: post("/auth/token", form: form, logger: logger))
    }

    /// Revokes a token; Apple answers 200 even for a token already invalid.
    public func revoke(token: String, hint: TokenTypeHint = .refreshToken, clientID: ClientID? = nil, logger: Logger? = nil) async throws(AppleIDClientError) {
        let client = clientID ?? configuration.servicesID
        let form = [("client_id", client.rawValue), ("client_secret", try secret(for: client)), ("token", token), ("token_type_hint", hint.rawValue)]
        _ = try await post("/auth/revoke", form: form, logger: logger)
    }

    /// A bearer token for team-transfer lookups (`grant_type=client_credentials`, `scope=user.migration`).
    public func migrationAccessToken(logger: Logger? = nil) async throws(AppleIDClientError) -> String {
        let client = configuration.servicesID
        let form = [("client_id", client.rawValue), ("client_secret", try secret(for: client)), ("grant_type", "client_credentials"), ("scope", "user.migration")]
        return try await decode(TokenResponse.self, from: post("/auth/token", form: form, logger: logger)).accessToken
    }

    /// The `transfer_sub` of a user of this team, for a transfer to `targetTeam` (APPLE.md §8).
    public func transferSubject(for subject: String, targetTeam: TeamID, accessToken: String, logger: Logger? = nil) async throws(AppleIDClientError) -> String {
        struct Answer: Decodable {
            var transfer_sub: String
        }
        let client = configuration.servicesID
        let form = [("sub", subject), ("target", targetTeam.rawValue), ("client_id", client.rawValue), ("client_secret", try secret(for: client))]
        return try await decode(Answer.self, from: post("/auth/usermigrationinfo", form: form, bearer: accessToken, logger: logger)).transfer_sub
    }

    private func secret(for client: ClientID) throws(AppleIDClientError) -> String {
        do {
            return try secrets.secret(for: client)
        } catch {
            throw AppleIDClientError(kind: .invalidClient, appleCode: nil, message: "the client secret could not be signed with the configured key: \(error)")
        }
    }

    private struct ErrorBody: Decodable {
        var error: String
    }

    private func post(_ path: String, form: [(String, String)], bearer: String? = nil, logger: Logger?) async throws(AppleIDClientError) -> ByteBuffer {
        let started = ContinuousClock.now
        do {
            let body = try await send(path, form: form, bearer: bearer, logger: logger)
            observer?(path, "ok", ContinuousClock.now - started)
            return body
        } catch {
            observer?(path, error.kind.name, ContinuousClock.now - started)
            throw error
        }
    }

    private func send(_ path: String, form: [(String, String)], bearer: String?, logger callerLogger: Logger?) async throws(AppleIDClientError) -> ByteBuffer {
        let logger = callerLogger ?? self.logger
        let url = configuration.endpoint(path)
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        request.headers.add(name: "Accept", value: "application/json")
        request.headers.add(name: "User-Agent", value: "siwa")
        if let bearer { request.headers.add(name: "Authorization", value: "Bearer " + bearer) }
        request.body = .bytes(ByteBuffer(string: FormEncoding.encode(form)))
        let response: HTTPClientResponse
        let body: ByteBuffer
        do {
            let deadline = NIODeadline.now() + timeout
            response = try await httpClient.execute(request, deadline: deadline, logger: logger)
            body = try await response.body.collect(upTo: Self.maximumResponseSize, deadline: deadline)
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout {
            logger.debug("Apple call timed out", metadata: ["path": "\(path)", "timeout": "\(timeout)"])
            throw AppleIDClientError(kind: .timeout, appleCode: nil, message: "no answer from \(url.host ?? "Apple") within \(timeout.nanoseconds / 1_000_000) ms")
        } catch let error as NIOTooManyBytesError {
            _ = error
            throw AppleIDClientError(kind: .responseTooLarge, appleCode: nil, message: "the answer from \(path) is larger than \(Self.maximumResponseSize) bytes")
        } catch {
            logger.debug("Apple call failed", metadata: ["path": "\(path)", "error": "\(String(describing: type(of: error)))"])
            throw AppleIDClientError(kind: .connectionFailed, appleCode: nil, message: "could not reach \(url.host ?? "Apple"): \(error)")
        }
        logger.debug("Apple call", metadata: ["path": "\(path)", "status": "\(response.status.code)"])
        switch response.status.code {
        case 200:
            return body
        case 400, 401:
            guard let code = try? JSONDecoder().decode(ErrorBody.self, from: Data(body.readableBytesView)).error else {
                throw AppleIDClientError(kind: .malformedResponse, appleCode: nil, message: "\(path) answered HTTP \(response.status.code) without an error code")
            }
            let kind = AppleIDClientError.Kind.apple(code)
            throw AppleIDClientError(kind: kind, appleCode: code, message: AppleIDClientError.advice(for: kind, code: code))
        case 429, 500...599:
            throw AppleIDClientError(kind: .serverError, appleCode: nil, message: "\(path) answered HTTP \(response.status.code); try again later")
        default:
            throw AppleIDClientError(kind: .malformedResponse, appleCode: nil, message: "\(path) answered with unexpected HTTP \(response.status.code)")
        }
    }

    private func decode<T: Decodable>(_ type: T.Type, from body: ByteBuffer) throws(AppleIDClientError) -> T {
        do {
            return try JSONDecoder().decode(T.self, from: Data(body.readableBytesView))
        } catch {
            throw AppleIDClientError(kind: .malformedResponse, appleCode: nil, message: "the answer is not the JSON Apple sends")
        }
    }
}
