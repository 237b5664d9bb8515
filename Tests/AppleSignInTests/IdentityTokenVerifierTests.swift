import AppleSignIn
import Crypto
import Foundation
import JOSE
import Testing

@Suite("Identity token verifier")
struct IdentityTokenVerifierTests {
    let verifier = IdentityTokenVerifier(
        keySet: AppleKeySet(source: .fixed(TestKeys.appleSet)),
        audiences: [try! ClientID(TestTokens.audience), try! ClientID(TestTokens.nativeAudience)],
        issuers: [TestTokens.issuer]
    )
    let now = TestTokens.now

    private func verify(_ token: String, nonce: String? = nil, code: String? = nil, at date: Date? = nil) async throws -> AppleIdentity {
        try await verifier.verify(token, nonce: nonce, code: code, now: date ?? now)
    }

    /// Asserts verification fails with `check`, returning the error for further checks on its message.
    @discardableResult
    private func refused(
        _ token: String, nonce: String? = nil, code: String? = nil, at date: Date? = nil, check: IdentityTokenError.Check,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async -> IdentityTokenError? {
        do {
            let identity = try await verifier.verify(token, nonce: nonce, code: code, now: date ?? now)
            Issue.record("expected the \(check) check to fail, but the token verified for \(identity.subject)", sourceLocation: sourceLocation)
            return nil
        } catch {
            #expect(error.check == check, "\(error)", sourceLocation: sourceLocation)
            return error
        }
    }

    // MARK: Accepted tokens

    @Test("a valid token returns the typed identity")
    func validToken() async throws {
        let claims = TestTokens.claims([
            "email": "jane@privaterelay.appleid.com",
            "email_verified": "true",
            "is_private_email": "true",
            "real_user_status": 2,
            "transfer_sub": "000999.fedcba.0999",
            "org_id": "org-1",
            "nonce": "n0nce",
        ])
        let identity = try await verify(TestTokens.rs256(claims), nonce: "n0nce")
        #expect(identity.subject == "001234.0123456789abcdef0123456789abcdef.1234")
        #expect(identity.audience == TestTokens.audience)
        #expect(identity.issuer == TestTokens.issuer)
        #expect(identity.issuedAt == now)
        #expect(identity.expiresAt == now.addingTimeInterval(600))
        #expect(identity.authTime == now)
        #expect(identity.email == "jane@privaterelay.appleid.com")
        #expect(identity.emailVerified == true)
        #expect(identity.isPrivateEmail == true)
        #expect(identity.nonceSupported == true)
        #expect(identity.nonce == "n0nce")
        #expect(identity.realUserStatus == 2)
        #expect(identity.transferSubject == "000999.fedcba.0999")
        #expect(identity.organizationID == "org-1")
    }

    @Test(
        "boolean claims arrive as JSON booleans or strings",
        arguments: [
            (TestJSON.bool(true), TestJSON.bool(false), true, false),
            (.string("true"), .string("false"), true, false),
            (.string("false"), .string("true"), false, true),
            (.string("TRUE"), .bool(true), true, true),
        ]
    )
    func flexibleBooleans(emailVerified: TestJSON, isPrivate: TestJSON, expectedVerified: Bool, expectedPrivate: Bool) async throws {
        let identity = try await verify(TestTokens.rs256(TestTokens.claims(["email_verified": emailVerified, "is_private_email": isPrivate])))
        #expect(identity.emailVerified == expectedVerified)
        #expect(identity.isPrivateEmail == expectedPrivate)
    }

    @Test("optional claims that are absent come back nil")
    func minimalToken() async throws {
        let identity = try await verify(TestTokens.rs256(TestTokens.claims(["auth_time": nil, "nonce_supported": nil])))
        #expect(identity.email == nil)
        #expect(identity.emailVerified == nil)
        #expect(identity.isPrivateEmail == nil)
        #expect(identity.transferSubject == nil)
        #expect(identity.realUserStatus == nil)
        #expect(identity.authTime == nil)
        #expect(identity.nonceSupported == nil)
    }

    @Test("a boolean claim that is neither true nor false is refused as a claim error")
    func badBoolean() async {
        let error = await refused(TestTokens.rs256(TestTokens.claims(["email_verified": "yes"])), check: .claims)
        #expect(error?.message.contains("email_verified") == true)
    }

    @Test("a token for a native app's bundle ID (an extra audience) is accepted")
    func extraAudience() async throws {
        let identity = try await verify(TestTokens.rs256(TestTokens.claims(["aud": .string(TestTokens.nativeAudience)])))
        #expect(identity.audience == TestTokens.nativeAudience)
    }

    @Test("aud as an array of our own client ids is accepted")
    func audienceArray() async throws {
        let identity = try await verify(TestTokens.rs256(TestTokens.claims(["aud": [.string(TestTokens.audience)]])))
        #expect(identity.audience == TestTokens.audience)
    }

    // MARK: Header and signature

    @Test("alg none, HS256, RS512, ES256 and a missing alg are refused", arguments: ["none", "HS256", "RS512", "ES256", "rs256", nil] as [String?])
    func refusedAlgorithms(alg: String?) async {
        var header = ["kid": TestKeys.appleKID]
        header["alg"] = alg
        // Signed with the right RSA key, so only the algorithm can be the reason for refusal.
        let token = TestTokens.rs256(TestTokens.claims(), header: header)
        let error = await refused(token, check: .algorithm)
        #expect(error?.message.contains("RS256") == true)
    }

    @Test("an unsigned alg:none token with an empty signature is refused")
    func unsignedNone() async {
        await refused(TestTokens.unsigned(header: ["alg": "none"], claims: TestTokens.claims()), check: .algorithm)
    }

    @Test("an HS256 token keyed with the public key's bytes is refused (algorithm confusion)")
    func algorithmConfusion() async {
        let header = ["alg": "HS256", "kid": TestKeys.appleKID]
        let input = try! JWTSigning.signingInput(header: header, claims: TestTokens.claims())
        let mac = HMAC<SHA256>.authenticationCode(for: Data(input.utf8), using: SymmetricKey(data: Data(TestKeys.apple.publicKey.derRepresentation)))
        await refused(input + "." + Base64URL.encode(Data(mac)), check: .algorithm)
    }

    @Test("a token without kid is refused", arguments: [["alg": "RS256"], ["alg": "RS256", "kid": ""]])
    func missingKID(header: [String: String]) async {
        await refused(TestTokens.rs256(TestTokens.claims(), header: header), check: .keyIDMissing)
    }

    @Test("a token whose kid is not in the key set is refused")
    func unknownKID() async {
        let token = TestTokens.rs256(TestTokens.claims(), key: TestKeys.other, header: ["alg": "RS256", "kid": TestKeys.otherKID])
        let error = await refused(token, check: .unknownKey)
        #expect(error?.message.contains(TestKeys.otherKID) == true)
    }

    @Test("a tampered payload fails the signature check")
    func tamperedPayload() async {
        let token = TestTokens.rs256(TestTokens.claims())
        let parts = token.split(separator: ".").map(String.init)
        let forged = try! JWTSigning.signingInput(header: ["alg": "RS256", "kid": TestKeys.appleKID], claims: TestTokens.claims(["sub": "001234.attacker.0001"]))
        let tampered = forged.split(separator: ".")[1]
        await refused("\(parts[0]).\(tampered).\(parts[2])", check: .signature)
    }

    @Test("a token signed by another key under Apple's kid fails the signature check")
    func forgedSignature() async {
        await refused(TestTokens.rs256(TestTokens.claims(), key: TestKeys.other), check: .signature)
    }

    @Test("a truncated signature fails the signature check")
    func truncatedSignature() async {
        // Six bytes fewer, still well-formed base64url (strict decoding refuses a cut in the middle of a group as format).
        let parts = TestTokens.rs256(TestTokens.claims()).split(separator: ".").map(String.init)
        let signature = Base64URL.decode(parts[2]).map { Base64URL.encode($0.dropLast(6)) } ?? ""
        await refused(parts[0] + "." + parts[1] + "." + signature, check: .signature)
    }

    @Test("tokens that are not three base64url parts are refused as malformed", arguments: ["", "a.b", "a.b.c.d", "***.***.***", "e30.e30"])
    func malformed(token: String) async {
        await refused(token, check: .malformed)
    }

    @Test("a token larger than any Apple sends is refused")
    func tooLarge() async {
        let token = TestTokens.rs256(TestTokens.claims(["padding": .string(String(repeating: "x", count: 20_000))]))
        await refused(token, check: .tooLarge)
    }

    // MARK: Claims

    @Test("a wrong iss is refused", arguments: ["https://account.apple.com", "https://evil.example", "https://appleid.apple.com/"])
    func wrongIssuer(issuer: String) async {
        let error = await refused(TestTokens.rs256(TestTokens.claims(["iss": .string(issuer)])), check: .issuer)
        #expect(error?.message.contains(issuer) == true)
    }

    @Test("a wrong aud is refused")
    func wrongAudience() async {
        await refused(TestTokens.rs256(TestTokens.claims(["aud": "com.other.web"])), check: .audience)
    }

    @Test("an aud array with an audience that is not ours is refused")
    func audienceArrayWithExtra() async {
        await refused(TestTokens.rs256(TestTokens.claims(["aud": [.string(TestTokens.audience), "com.other.web"]])), check: .audience)
    }

    @Test("an empty aud array is refused")
    func emptyAudienceArray() async {
        await refused(TestTokens.rs256(TestTokens.claims(["aud": []])), check: .audience)
    }

    @Test("a token expired beyond the 60 s leeway is refused")
    func expired() async {
        let token = TestTokens.rs256(TestTokens.claims(["exp": .int(Int(now.timeIntervalSince1970) - 61)]))
        await refused(token, check: .expired)
    }

    @Test("a token expired within the leeway is accepted")
    func expiredWithinLeeway() async throws {
        let token = TestTokens.rs256(TestTokens.claims(["exp": .int(Int(now.timeIntervalSince1970) - 59)]))
        #expect(try await verify(token).subject.isEmpty == false)
    }

    @Test("a custom leeway is honoured")
    func customLeeway() async throws {
        let strict = IdentityTokenVerifier(
            keySet: AppleKeySet(source: .fixed(TestKeys.appleSet)), audiences: [try ClientID(TestTokens.audience)], issuers: [TestTokens.issuer], leeway: 0
        )
        let token = TestTokens.rs256(TestTokens.claims(["exp": .int(Int(now.timeIntervalSince1970) - 1)]))
        await #expect(throws: IdentityTokenError.self) { try await strict.verify(token, now: now) }
        #expect(try await verify(token).subject.isEmpty == false)
    }

    @Test("iat in the future beyond the leeway is refused, within it accepted")
    func issuedInFuture() async throws {
        await refused(TestTokens.rs256(TestTokens.claims(["iat": .int(Int(now.timeIntervalSince1970) + 61)])), check: .issuedInFuture)
        let skewed = TestTokens.rs256(TestTokens.claims(["iat": .int(Int(now.timeIntervalSince1970) + 59)]))
        #expect(try await verify(skewed).subject.isEmpty == false)
    }

    @Test("a missing or empty sub is refused as a claim error", arguments: [nil, .string("")] as [TestJSON?])
    func missingSubject(sub: TestJSON?) async {
        let error = await refused(TestTokens.rs256(TestTokens.claims(["sub": sub])), check: .claims)
        #expect(error?.message.contains("sub") == true)
    }

    @Test("a missing exp or a string exp is refused as a claim error", arguments: [nil, .string("soon")] as [TestJSON?])
    func badExpiry(exp: TestJSON?) async {
        let error = await refused(TestTokens.rs256(TestTokens.claims(["exp": exp])), check: .claims)
        #expect(error?.message.contains("exp") == true)
    }

    @Test("fractional NumericDates are accepted")
    func fractionalDates() async throws {
        let seconds = now.timeIntervalSince1970
        let identity = try await verify(TestTokens.rs256(TestTokens.claims(["iat": .double(seconds + 0.5), "exp": .double(seconds + 600.5)])))
        #expect(identity.expiresAt == now.addingTimeInterval(600.5))
    }

    // MARK: Nonce

    @Test("the raw nonce is accepted")
    func rawNonce() async throws {
        let identity = try await verify(TestTokens.rs256(TestTokens.claims(["nonce": "raw-nonce-value"])), nonce: "raw-nonce-value")
        #expect(identity.nonce == "raw-nonce-value")
    }

    @Test("the SHA-256 hex of the nonce, as native apps send, is accepted")
    func hashedNonce() async throws {
        let hex = SHA256.hash(data: Data("raw-nonce-value".utf8)).map { String(format: "%02x", $0) }.joined()
        #expect(IdentityTokenVerifier.sha256Hex("raw-nonce-value") == hex)
        let identity = try await verify(TestTokens.rs256(TestTokens.claims(["nonce": .string(hex)])), nonce: "raw-nonce-value")
        #expect(identity.nonce == hex)
    }

    @Test("a wrong nonce is refused", arguments: ["other-nonce", "RAW-NONCE-VALUE", ""])
    func wrongNonce(tokenNonce: String) async {
        await refused(TestTokens.rs256(TestTokens.claims(["nonce": .string(tokenNonce)])), nonce: "raw-nonce-value", check: .nonceMismatch)
    }

    @Test("an upper-case SHA-256 hex of the nonce is not the form native apps send and is refused")
    func upperCaseHashedNonce() async {
        let hex = IdentityTokenVerifier.sha256Hex("raw-nonce-value").uppercased()
        await refused(TestTokens.rs256(TestTokens.claims(["nonce": .string(hex)])), nonce: "raw-nonce-value", check: .nonceMismatch)
    }

    @Test("no nonce in the token when one was sent is refused unless nonce_supported is false", arguments: [nil, .bool(true), .string("true")] as [TestJSON?])
    func nonceMissing(nonceSupported: TestJSON?) async {
        let token = TestTokens.rs256(TestTokens.claims(["nonce_supported": nonceSupported]))
        await refused(token, nonce: "raw-nonce-value", check: .nonceMissing)
    }

    @Test("no nonce in the token is accepted when nonce_supported is false", arguments: [TestJSON.bool(false), .string("false")])
    func nonceUnsupported(nonceSupported: TestJSON) async throws {
        let identity = try await verify(TestTokens.rs256(TestTokens.claims(["nonce_supported": nonceSupported])), nonce: "raw-nonce-value")
        #expect(identity.nonceSupported == false)
        #expect(identity.nonce == nil)
    }

    @Test("a token with or without a nonce is accepted when none was sent")
    func noNonceExpected() async throws {
        #expect(try await verify(TestTokens.rs256(TestTokens.claims())).nonce == nil)
        #expect(try await verify(TestTokens.rs256(TestTokens.claims(["nonce": "whatever"]))).nonce == "whatever")
    }

    // MARK: c_hash

    @Test("c_hash matching the code is accepted")
    func codeHashMatches() async throws {
        let code = "c1a2b3.0.nrsq.ZXhhbXBsZQ"
        let digest = Array(SHA256.hash(data: Data(code.utf8)))
        let expected = Base64URL.encode(digest.prefix(16))
        #expect(IdentityTokenVerifier.codeHash(code) == expected)
        _ = try await verify(TestTokens.rs256(TestTokens.claims(["c_hash": .string(expected)])), code: code)
    }

    @Test("c_hash of another code is refused")
    func codeHashWrong() async {
        let token = TestTokens.rs256(TestTokens.claims(["c_hash": .string(IdentityTokenVerifier.codeHash("other-code"))]))
        await refused(token, code: "the-code", check: .codeHash)
    }

    @Test("a missing c_hash is refused when the code is given, ignored when it is not")
    func codeHashMissing() async throws {
        let token = TestTokens.rs256(TestTokens.claims())
        await refused(token, code: "the-code", check: .codeHash)
        _ = try await verify(token)
    }

    @Test("every error names its check and never echoes the token")
    func errorDescriptions() async {
        let token = TestTokens.rs256(TestTokens.claims(["aud": "com.other.web"]))
        let error = await refused(token, check: .audience)
        #expect(error?.description.hasPrefix("aud check failed") == true)
        #expect(error?.description.contains(token) == false)
    }
}
