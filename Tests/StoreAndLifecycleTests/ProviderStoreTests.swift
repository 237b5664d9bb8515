import Foundation
@testable import SignInServer
import Testing

/// What siwa's OpenID Provider keeps, in both stores: clients, single-use codes, rotated refresh tokens, and every
/// way a grant ends (replay, reuse, revocation by its client, by Apple's events, by expiry).
@Suite("Provider store")
struct ProviderStoreTests {
    // MARK: clients

    @Test("clients are added once, listed with every field, and removed with their codes and tokens", arguments: StoreKind.allCases)
    func clients(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            let grafana = ProviderClientRecord(
                clientID: "grafana", secretHash: SignInFlow.hash("s3cret"), redirectURIs: ["https://grafana.example.com/login/generic_oauth", "http://127.0.0.1:3000/cb"],
                postLogoutRedirectURIs: ["https://grafana.example.com/"], scopes: ["openid", "email"], idTokenAlgorithm: "ES256", pairwiseSubject: true, createdAt: now
            )
            let cli = ProviderClientRecord(clientID: "cli", redirectURIs: ["http://127.0.0.1/callback"], isPublic: true, createdAt: now.addingTimeInterval(1))
            #expect(try await store.addProviderClient(grafana))
            #expect(try await store.addProviderClient(cli))
            var taken = cli
            taken.redirectURIs = ["https://elsewhere.example/"]
            #expect(try await store.addProviderClient(taken) == false)
            #expect(try await store.providerClients() == [cli, grafana])
            #expect(cli.idTokenAlgorithm == "RS256" && cli.secretHash == nil && cli.scopes.isEmpty && !cli.pairwiseSubject)

            let sub = Records.subject()
            try await store.saveAuthorizationCode(Grant.code("code-g", client: "grafana", sub: sub, at: now))
            try await store.saveProviderTokens(Grant.tokens("g", client: "grafana", sub: sub, at: now))
            try await store.saveProviderTokens(Grant.tokens("c", client: "cli", sub: sub, at: now))
            #expect(try await store.removeProviderClient(clientID: "grafana"))
            #expect(try await store.removeProviderClient(clientID: "grafana") == false)
            #expect(try await store.providerClients() == [cli])
            #expect(try await fixture.sql.count("provider_tokens", where: "client_id = 'grafana'") == 0)
            #expect(try await fixture.sql.count("authorization_codes", where: "client_id = 'grafana'") == 0)
            #expect(try await store.redeemAuthorizationCode(hash: SignInFlow.hash("code-g"), now: now) == .unknown)
            #expect(try await store.providerToken(hash: SignInFlow.hash("c-access"), kind: .access, now: now)?.clientID == "cli")
        }
    }

    // MARK: codes

    @Test("a code is redeemed once; presented again it is a replay that revokes every token of its grant, rotated ones too", arguments: StoreKind.allCases)
    func codeReplayRevokesItsTokens(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            let sub = Records.subject()
            let code = Grant.code("code-1", sub: sub, at: now, nonce: "n-1", challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
            try await store.saveAuthorizationCode(code)
            #expect(try await store.redeemAuthorizationCode(hash: code.codeHash, now: now.addingTimeInterval(5)) == .redeemed(code))
            try await store.saveProviderTokens(Grant.tokens("first", sub: sub, at: now, code: code.codeHash))
            // The grant rotates once; the new pair carries the family (and code) of the first.
            #expect(try await store.redeemRefreshToken(hash: SignInFlow.hash("first-refresh"), now: now.addingTimeInterval(10)) != .unknown)
            try await store.saveProviderTokens(Grant.tokens("second", sub: sub, at: now, code: code.codeHash, family: "family-first"))
            // Another grant of the same person is not this code's.
            try await store.saveProviderTokens(Grant.tokens("other", sub: sub, at: now))

            #expect(try await store.redeemAuthorizationCode(hash: code.codeHash, now: now.addingTimeInterval(20)) == .replayed(code))
            for token in ["first-access", "second-access"] {
                #expect(try await store.providerToken(hash: SignInFlow.hash(token), kind: .access, now: now) == nil, "\(token) outlived the replay")
            }
            #expect(try await store.providerToken(hash: SignInFlow.hash("second-refresh"), kind: .refresh, now: now) == nil)
            #expect(try await store.providerToken(hash: SignInFlow.hash("other-access"), kind: .access, now: now) != nil)
            #expect(try await store.redeemAuthorizationCode(hash: code.codeHash, now: now.addingTimeInterval(21)) == .replayed(code))

            // Tokens saved after the replay (an exchange that raced it) are saved revoked.
            try await store.saveProviderTokens(Grant.tokens("late", sub: sub, at: now, code: code.codeHash))
            #expect(try await store.providerToken(hash: SignInFlow.hash("late-access"), kind: .access, now: now) == nil)
            #expect(try await store.redeemAuthorizationCode(hash: SignInFlow.hash("never-issued"), now: now) == .unknown)
        }
    }

    @Test("an expired code is refused as expired, however often, and is not marked used", arguments: StoreKind.allCases)
    func expiredCode(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            let code = Grant.code("code-old", sub: Records.subject(), at: now)
            try await store.saveAuthorizationCode(code)
            #expect(try await store.redeemAuthorizationCode(hash: code.codeHash, now: code.expiresAt) == .expired)
            #expect(try await store.redeemAuthorizationCode(hash: code.codeHash, now: code.expiresAt.addingTimeInterval(30)) == .expired)
            #expect(try await fixture.sql.count("authorization_codes", where: "used_at IS NOT NULL") == 0)
        }
    }

    @Test("40 parallel redemptions of one code on two store instances: exactly one is redeemed, the rest are replays", arguments: StoreKind.allCases)
    func parallelCodeRedemption(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let stores = [fixture.store, try await fixture.open(keys: [fixture.key])]
            let now = Support.now()
            let code = Grant.code("code-race", sub: Records.subject(), at: now)
            try await stores[0].saveAuthorizationCode(code)
            let outcomes = try await withThrowingTaskGroup(of: CodeRedemption.self) { group in
                for index in 0..<40 {
                    let store = stores[index % 2]
                    group.addTask { try await store.redeemAuthorizationCode(hash: code.codeHash, now: now) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(outcomes.count == 40)
            #expect(outcomes.filter { $0 == .redeemed(code) }.count == 1)
            #expect(outcomes.filter { $0 == .replayed(code) }.count == 39)
        }
    }

    // MARK: refresh tokens

    @Test("a refresh token is used once; presented again it revokes its whole family, the successor included", arguments: StoreKind.allCases)
    func refreshRotationAndReuse(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            let sub = Records.subject()
            let first = Grant.tokens("one", sub: sub, at: now)
            try await store.saveProviderTokens(first)
            #expect(try await store.providerToken(hash: first[0].tokenHash, kind: .access, now: now) == first[0])
            #expect(try await store.providerToken(hash: first[1].tokenHash, kind: .refresh, now: now) == first[1])
            // A token is found only as its own kind.
            #expect(try await store.providerToken(hash: first[1].tokenHash, kind: .access, now: now) == nil)
            #expect(try await store.redeemRefreshToken(hash: first[0].tokenHash, now: now) == .unknown)

            #expect(try await store.redeemRefreshToken(hash: first[1].tokenHash, now: now.addingTimeInterval(60)) == .redeemed(first[1]))
            #expect(try await store.providerToken(hash: first[1].tokenHash, kind: .refresh, now: now) == nil)
            let second = Grant.tokens("two", sub: sub, at: now.addingTimeInterval(60), family: "family-one")
            try await store.saveProviderTokens(second)
            #expect(try await store.providerToken(hash: second[0].tokenHash, kind: .access, now: now.addingTimeInterval(61)) != nil)
            let bystander = Grant.tokens("bystander", sub: sub, at: now)
            try await store.saveProviderTokens(bystander)

            #expect(try await store.redeemRefreshToken(hash: first[1].tokenHash, now: now.addingTimeInterval(120)) == .reused(first[1]))
            for token in first + second {
                #expect(try await store.providerToken(hash: token.tokenHash, kind: token.kind, now: now.addingTimeInterval(121)) == nil)
            }
            // The successor the family was revoked with is a sign of the theft too, not a usable token.
            #expect(try await store.redeemRefreshToken(hash: second[1].tokenHash, now: now.addingTimeInterval(130)) == .reused(second[1]))
            #expect(try await store.providerToken(hash: bystander[0].tokenHash, kind: .access, now: now.addingTimeInterval(121)) == bystander[0])
            // An expired refresh token is no token at all.
            #expect(try await store.redeemRefreshToken(hash: bystander[1].tokenHash, now: bystander[1].expiresAt) == .unknown)
            #expect(try await store.redeemRefreshToken(hash: SignInFlow.hash("never-issued"), now: now) == .unknown)
        }
    }

    // MARK: revocation

    @Test("RFC 7009: only the client holding a token revokes it, and with it its family", arguments: StoreKind.allCases)
    func revocationByClient(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            let sub = Records.subject()
            let grant = Grant.tokens("mine", client: "gitea", sub: sub, at: now)
            try await store.saveProviderTokens(grant)
            #expect(try await store.revokeProviderToken(hash: grant[1].tokenHash, clientID: "grafana") == false)
            #expect(try await store.providerToken(hash: grant[0].tokenHash, kind: .access, now: now) == grant[0])
            #expect(try await store.providerToken(hash: grant[1].tokenHash, kind: .refresh, now: now) == grant[1])

            #expect(try await store.revokeProviderToken(hash: grant[1].tokenHash, clientID: "gitea"))
            #expect(try await store.providerToken(hash: grant[0].tokenHash, kind: .access, now: now) == nil)
            #expect(try await store.providerToken(hash: grant[1].tokenHash, kind: .refresh, now: now) == nil)
            // Revoked, not stolen: presenting it again is simply unknown.
            #expect(try await store.redeemRefreshToken(hash: grant[1].tokenHash, now: now) == .unknown)
            #expect(try await store.revokeProviderToken(hash: SignInFlow.hash("never-issued"), clientID: "gitea") == false)
            // A refresh that raced the revocation issues its successor into a revoked family: revoked too.
            try await store.saveProviderTokens(Grant.tokens("raced", client: "gitea", sub: sub, at: now, family: "family-mine"))
            #expect(try await store.providerToken(hash: SignInFlow.hash("raced-access"), kind: .access, now: now) == nil)
        }
    }

    @Test("revokeLink, consent-revoked, a person's revocation and deleteUser end that person's provider tokens and codes only", arguments: StoreKind.allCases)
    func lifecycleRevokesProviderTokens(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            let bystander = Records.subject()
            _ = try await store.completeSignIn(Records.signIn(bystander, at: now))
            try await store.saveProviderTokens(Grant.tokens("bystander", sub: bystander, at: now))

            typealias Ending = @Sendable (any SignInStore, String) async throws -> Void
            let endings: [(String, Ending)] = [
                ("revokeLink", { store, sub in try await store.revokeLink(subject: sub, at: now) }),
                ("consent-revoked", { store, sub in _ = try await store.apply(try Records.notification("consent-revoked", sub: sub), receivedAt: now) }),
                ("account-delete", { store, sub in _ = try await store.apply(try Records.notification("account-delete", sub: sub), receivedAt: now) }),
                ("revokeProviderTokens", { store, sub in try await store.revokeProviderTokens(subject: sub) }),
                ("deleteUser", { store, sub in _ = try await store.deleteUser(subject: sub, tombstone: false, at: now) }),
            ]
            for (name, end) in endings {
                let sub = Records.subject()
                _ = try await store.completeSignIn(Records.signIn(sub, at: now))
                let code = Grant.code("code-" + name, sub: sub, at: now)
                try await store.saveAuthorizationCode(code)
                let grant = Grant.tokens(name, sub: sub, at: now)
                try await store.saveProviderTokens(grant)
                try await end(store, sub)
                for token in grant {
                    #expect(try await store.providerToken(hash: token.tokenHash, kind: token.kind, now: now) == nil, "\(name) left a \(token.kind) token live")
                }
                #expect(try await store.redeemRefreshToken(hash: grant[1].tokenHash, now: now) == .unknown, "\(name)")
                #expect(try await store.redeemAuthorizationCode(hash: code.codeHash, now: now) == .unknown, "\(name) left the code redeemable")
            }
            #expect(try await store.providerToken(hash: SignInFlow.hash("bystander-access"), kind: .access, now: now) != nil)
            // Deleting the account deletes the rows themselves.
            #expect(try await fixture.sql.count("provider_tokens", where: "family_id IN ('family-account-delete', 'family-deleteUser')") == 0)
        }
    }

    // MARK: upkeep and storage

    @Test("sweepExpired removes expired codes and tokens, up to the limit of each, and nothing live", arguments: StoreKind.allCases)
    func sweepRemovesExpired(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            let sub = Records.subject()
            for index in 0..<3 {
                try await store.saveAuthorizationCode(Grant.code("old-\(index)", sub: sub, at: now.addingTimeInterval(-600)))
            }
            try await store.saveAuthorizationCode(Grant.code("fresh", sub: sub, at: now))
            try await store.saveProviderTokens(Grant.tokens("old", sub: sub, at: now.addingTimeInterval(-90 * 86_400)))
            try await store.saveProviderTokens(Grant.tokens("fresh", sub: sub, at: now))

            #expect(try await store.sweepExpired(now: now, limit: 2) == 4)
            #expect(try await store.sweepExpired(now: now, limit: 2) == 1)
            #expect(try await store.sweepExpired(now: now, limit: 2) == 0)
            #expect(try await fixture.sql.count("authorization_codes") == 1)
            #expect(try await fixture.sql.count("provider_tokens") == 2)
            #expect(try await store.redeemAuthorizationCode(hash: SignInFlow.hash("fresh"), now: now) != .unknown)
        }
    }

    @Test("codes and tokens are stored as their SHA-256 only; no column holds one in the clear", arguments: StoreKind.allCases)
    func onlyHashesAreStored(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            let sub = Records.subject()
            try await store.saveAuthorizationCode(Grant.code("plain-code-123", sub: sub, at: now))
            try await store.saveProviderTokens(Grant.tokens("plain-token", sub: sub, at: now, code: SignInFlow.hash("plain-code-123"), family: "grant-1"))
            #expect(try await store.redeemRefreshToken(hash: SignInFlow.hash("plain-token-refresh"), now: now) != .unknown)

            let tokenColumns = ["token_hash", "kind", "client_id", "sub", "scope", "family_id", "code_hash", "revoked"]
            let codeColumns = ["code_hash", "client_id", "redirect_uri", "sub", "scope", "nonce", "code_challenge", "revoked"]
            var stored: [String] = []
            for column in tokenColumns { stored += try await fixture.sql.texts("SELECT \(column) FROM provider_tokens").compactMap { $0 } }
            for column in codeColumns { stored += try await fixture.sql.texts("SELECT \(column) FROM authorization_codes").compactMap { $0 } }
            #expect(!stored.isEmpty)
            #expect(stored.allSatisfy { !$0.contains("plain-") }, "a token or code stored in the clear")
            #expect(try await fixture.sql.texts("SELECT token_hash FROM provider_tokens ORDER BY kind") == [SignInFlow.hash("plain-token-access"), SignInFlow.hash("plain-token-refresh")])
            #expect(try await fixture.sql.texts("SELECT code_hash FROM authorization_codes") == [SignInFlow.hash("plain-code-123")])
        }
    }

    @Test("a signing key's algorithm round-trips (ES256 by default), and rotating one algorithm's keys leaves the other's", arguments: StoreKind.allCases)
    func signingKeyAlgorithm(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Support.now()
            let es = IdentityAssertions.newKey(now: now, activatesAt: now)
            let rs = SigningKeyRecord(kid: "rs-1", privateKeyPEM: "-----BEGIN PRIVATE KEY-----\nnot a real key\n-----END PRIVATE KEY-----", createdAt: now.addingTimeInterval(1), activatesAt: now, algorithm: "RS256")
            try await store.addSigningKey(es)
            try await store.addSigningKey(rs)
            #expect(try await store.signingKeys() == [es, rs])
            #expect(try await store.signingKeys().map(\.algorithm) == ["ES256", "RS256"])

            let next = IdentityAssertions.newKey(now: now.addingTimeInterval(2), activatesAt: now.addingTimeInterval(600))
            try await store.addSigningKey(next)
            try await store.retireSigningKeys(activeAt: next.activatesAt, retiresAt: next.activatesAt.addingTimeInterval(3600), except: next.kid)
            let keys = try await store.signingKeys()
            #expect(keys.map(\.kid) == [es.kid, rs.kid, next.kid])
            #expect(keys.map(\.retiresAt) == [next.activatesAt.addingTimeInterval(3600), nil, nil])
        }
    }

    @Test("the identity assertion publishes and signs with ES256 keys only, though the store holds RS256 ones", arguments: StoreKind.allCases)
    func assertionsIgnoreOtherAlgorithms(_ kind: StoreKind) async throws {
        try await StoreFixture.with(kind) { fixture in
            let store = fixture.store
            let now = Date()
            let rs = SigningKeyRecord(kid: "rs-only", privateKeyPEM: "-----BEGIN PRIVATE KEY-----\nnot a P-256 key\n-----END PRIVATE KEY-----", createdAt: now, activatesAt: now, algorithm: "RS256")
            try await store.addSigningKey(rs)
            let assertions = IdentityAssertions(store: store, issuer: "https://siwa.example", logger: Support.logger("test.assertions"))
            try await assertions.prepare(now: now)
            let published = try #require(try await assertions.publishedKeySet(now: now)["keys"])
            #expect(published.count == 1)
            #expect(published.allSatisfy { $0["alg"] == "ES256" && $0["kid"] != rs.kid })
            #expect(try await store.signingKeys().map(\.algorithm).sorted() == ["ES256", "RS256"])
        }
    }
}

/// Codes and token pairs for these tests; the secret values are their names, and the stores get their hashes.
private enum Grant {
    static func code(_ code: String, client: String = "grafana", sub: String, at: Date, nonce: String? = nil, challenge: String? = nil) -> AuthorizationCodeRecord {
        AuthorizationCodeRecord(
            codeHash: SignInFlow.hash(code), clientID: client, redirectURI: "https://\(client).example.com/cb", subject: sub, scope: "openid email profile",
            nonce: nonce, codeChallenge: challenge, authTime: at, createdAt: at, expiresAt: at.addingTimeInterval(60)
        )
    }

    /// `NAME-access` (an hour) and `NAME-refresh` (30 days), in the family `family-NAME` unless another is given.
    static func tokens(_ name: String, client: String = "grafana", sub: String, at: Date, code: String? = nil, family: String? = nil) -> [ProviderTokenRecord] {
        [(ProviderTokenRecord.Kind.access, 3_600.0), (.refresh, 30 * 86_400.0)].map { kind, lifetime in
            ProviderTokenRecord(
                tokenHash: SignInFlow.hash("\(name)-\(kind.rawValue)"), kind: kind, clientID: client, subject: sub, scope: "openid email",
                authTime: at, familyID: family ?? "family-\(name)", codeHash: code, createdAt: at, expiresAt: at.addingTimeInterval(lifetime)
            )
        }
    }
}
