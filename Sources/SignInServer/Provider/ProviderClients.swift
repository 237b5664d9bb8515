import AppleSignIn
import Foundation
import Hummingbird
import JOSE
import Synchronization

/// The provider's clients: those of `oidc_clients` first, then those registered in the store (`siwa oidc
/// add-client`), read again at most every few seconds so a client added or removed on one instance is seen by all.
final class ProviderClients: Sendable {
    static let refresh: TimeInterval = 5

    let configured: [ProviderClientRecord]
    let store: any ProviderStore

    private struct State {
        var stored: [String: ProviderClientRecord] = [:]
        var loadedAt: Date = .distantPast
    }

    private let state = Mutex(State())

    init(configured: [ProviderClientRecord], store: any ProviderStore) {
        self.configured = configured
        self.store = store
    }

    /// The client `clientID`, or nil when neither the configuration nor the store knows it.
    func client(_ clientID: String, now: Date = Date()) async throws -> ProviderClientRecord? {
        if let client = configured.first(where: { $0.clientID == clientID }) { return client }
        if state.withLock({ now.timeIntervalSince($0.loadedAt) >= Self.refresh || now < $0.loadedAt }) {
            let stored = try await store.providerClients()
            state.withLock { state in
                state.stored = Dictionary(stored.map { ($0.clientID, $0) }, uniquingKeysWith: { first, _ in first })
                state.loadedAt = now
            }
        }
        return state.withLock { $0.stored[clientID] }
    }
}

/// How a client proved who it is at the token and revocation endpoints.
struct ClientCredentials: Sendable {
    enum Method: Sendable { case basic, post, none }

    var clientID: String
    var secret: String?
    var method: Method

    /// The credentials of a request: HTTP Basic (id and secret each form-urlencoded before Base64, RFC 6749
    /// §2.3.1), or `client_id` and `client_secret` in the form, or a public client's `client_id` alone. Nil when
    /// there are none, or they are malformed, or given both ways.
    static func read(_ request: Request, form: [String: String]) -> ClientCredentials? {
        if let header = request.headers[.authorization] {
            guard header.count > 6, header.prefix(6).lowercased() == "basic ", form["client_secret"] == nil,
                let decoded = Data(base64Encoded: String(header.dropFirst(6)).trimmingCharacters(in: .whitespaces)),
                let text = String(data: decoded, encoding: .utf8), let colon = text.firstIndex(of: ":"),
                let id = try? FormEncoding.decodeComponent(Array(text[..<colon].utf8)),
                let secret = try? FormEncoding.decodeComponent(Array(text[text.index(after: colon)...].utf8)), !id.isEmpty
            else { return nil }
            if let formID = form["client_id"], formID != id { return nil }
            return ClientCredentials(clientID: id, secret: secret, method: .basic)
        }
        guard let id = form["client_id"], !id.isEmpty else { return nil }
        if let secret = form["client_secret"] { return ClientCredentials(clientID: id, secret: secret, method: .post) }
        return ClientCredentials(clientID: id, secret: nil, method: .none)
    }

    /// Whether these credentials prove `client`: its secret for a confidential client, no secret for a public one.
    func authenticate(_ client: ProviderClientRecord, now: Date = Date()) -> Bool {
        // A public client names itself in the form, or (as command-line OAuth libraries do) by HTTP Basic with an
        // empty password.
        if client.isPublic { return method == .none || (method == .basic && (secret ?? "").isEmpty) }
        guard let secret, let expected = client.secretHash else { return false }
        let presented = ProviderSettings.hash(secret)
        if ConstantTime.equals(presented, expected) { return true }
        // The secret `siwa oidc rotate-secret` replaced, during the overlap it was given.
        guard let previous = client.previousSecretHash, let until = client.previousSecretUntil, now < until else { return false }
        return ConstantTime.equals(presented, previous)
    }
}
