import Crypto
import CryptoExtras
import Foundation
import JOSE

/// The checks identity tokens and notifications share: RS256 only, `kid` present and known, signature,
/// `iss` among the accepted issuers, `aud` among our client ids (and nothing else).
struct SignedJWTVerifier: Sendable {
    let keySet: AppleKeySet
    /// Sorted, without duplicates; a handful at most, so a scan beats hashing.
    let audiences: [String]
    let issuers: [String]

    init(keySet: AppleKeySet, audiences: [String], issuers: [String]) {
        self.keySet = keySet
        self.audiences = Array(Set(audiences)).sorted()
        self.issuers = Array(Set(issuers)).sorted()
    }

    /// Verifies header and signature; returns the payload bytes.
    func verifiedPayload(_ token: String) async throws(IdentityTokenError) -> [UInt8] {
        let jws: CompactJWS
        do {
            jws = try CompactJWS(token)
        } catch {
            switch error {
            case .tooLarge(let size):
                throw IdentityTokenError(.tooLarge, "the token is \(size) bytes, more than the \(CompactJWS.maximumSize) accepted")
            case .wrongPartCount(let count):
                throw IdentityTokenError(.malformed, "a JWT has three dot-separated parts, this one has \(count)")
            case .notBase64URL:
                throw IdentityTokenError(.malformed, "a part of the token is not base64url")
            case .headerNotJSON:
                throw IdentityTokenError(.malformed, "the token header is not a JSON object")
            }
        }
        guard let alg = jws.header.alg else {
            throw IdentityTokenError(.algorithm, "the token header has no alg; only RS256 is accepted")
        }
        guard alg == "RS256" else {
            throw IdentityTokenError(.algorithm, "alg \(alg) is refused; only RS256 is accepted")
        }
        guard let kid = jws.header.kid, !kid.isEmpty else {
            throw IdentityTokenError(.keyIDMissing, "the token header has no kid, so no key can be chosen")
        }
        let key = try await keySet.key(for: kid)
        var hasher = SHA256()
        if jws.signingInput.withContiguousStorageIfAvailable({ hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }) == nil {
            hasher.update(data: Array(jws.signingInput))
        }
        let digest = hasher.finalize()
        guard key.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: jws.signature), for: digest, padding: .insecurePKCS1v1_5) else {
            throw IdentityTokenError(.signature, "the RS256 signature does not verify with key \(kid)")
        }
        return jws.payload
    }

    /// Checks `iss` and `aud` (a string or an array, every entry ours).
    func checkIssuerAndAudience(iss: String, aud: Audience) throws(IdentityTokenError) {
        guard issuers.contains(iss) else {
            throw IdentityTokenError(.issuer, "iss is \(iss); accepted: \(issuers.joined(separator: ", "))")
        }
        guard !aud.values.isEmpty, aud.values.allSatisfy({ audiences.contains($0) }) else {
            throw IdentityTokenError(.audience, "aud is \(aud.values.joined(separator: ", ")); accepted: \(audiences.joined(separator: ", "))")
        }
    }

    /// Checks `exp` (not passed) and `iat` (not in the future), each allowing `leeway` seconds of clock skew: the
    /// same rule for every JWT Apple signs, identity tokens and notifications alike.
    static func checkLifetime(exp: Double, iat: Double, now: Date, leeway: TimeInterval) throws(IdentityTokenError) {
        let current = now.timeIntervalSince1970
        guard current <= exp + leeway else {
            throw IdentityTokenError(.expired, "the token expired at \(Int(exp)), \(Int(current - exp)) s ago")
        }
        guard iat <= current + leeway else {
            throw IdentityTokenError(.issuedInFuture, "iat \(Int(iat)) is \(Int(iat - current)) s in the future (leeway \(Int(leeway)) s)")
        }
    }
}

/// The `aud` claim: one string or an array of strings.
struct Audience: Sendable {
    var values: [String]
}
