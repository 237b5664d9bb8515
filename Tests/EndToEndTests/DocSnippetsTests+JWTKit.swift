// docs/front.md's jwt-kit block, compiled: its lines up to the blank one before `let keys` are the part between the
// first two markers, its last three lines the body of `SiwaAssertion.person(in:jwksText:)` between the other two.
// `DocSnippetsTests.jwtKitBlockIsThisFile` checks the page shows exactly these lines, and `jwtKitBlock` runs them
// against assertions siwa signed.
// docs/front.md's jwt-kit block, from here…
import JWTKit

struct SiwaAssertion: JWTPayload {
    var iss: IssuerClaim
    var aud: AudienceClaim
    var sub: SubjectClaim
    var exp: ExpirationClaim
    var email: String?
    var name: String?

    func verify(using algorithm: some JWTAlgorithm) async throws {
        try exp.verifyNotExpired()
        try aud.verifyIntendedAudience(includes: "https://app.example.com")
        guard iss.value == "https://auth.example.com" else {
            throw JWTError.claimVerificationFailure(failedClaim: iss, reason: "not siwa")
        }
    }
}
// …to here.

/// What the block's last lines read of the request an upstream received: its headers by name.
struct UpstreamRequest: Sendable {
    var headers: [String: String]
}

extension SiwaAssertion {
    /// The person `request`'s `X-Siwa-Assertion` names, verified as the block's last three lines verify it with the
    /// key set `jwksText` (the body of siwa's `/.well-known/siwa/jwks.json`); jwt-kit's error when it is refused.
    static func person(in request: UpstreamRequest, jwksText: String) async throws -> SiwaAssertion {
        // docs/front.md's jwt-kit block, from here…
        let keys = JWTKeyCollection()
        try await keys.add(jwksJSON: jwksText)   // the body of /.well-known/siwa/jwks.json, kept for its max-age
        let person = try await keys.verify(request.headers["X-Siwa-Assertion"] ?? "", as: SiwaAssertion.self)
        // …to here.
        return person
    }
}
