// Core benchmark: id_token verification through IdentityTokenVerifier against the raw RS256 verification of
// swift-crypto on the same token, in the same run, on one core; and the client secret, cached vs freshly signed.
// Run it with Benchmarks/run-core.sh (release build). Options: --seconds N (per measurement, default 2),
// --rounds N (alternating rounds, best kept, default 3).

import AppleSignIn
import Crypto
import CryptoExtras
import Foundation
import JOSE

struct Options {
    var seconds = 2.0
    var rounds = 3
    /// `--profile verify|raw`: only that loop, for `perf record`.
    var profileOnly: String?

    init(arguments: [String]) {
        var iterator = arguments.dropFirst().makeIterator()
        while let argument = iterator.next() {
            switch argument {
            case "--seconds": seconds = iterator.next().flatMap(Double.init) ?? seconds
            case "--rounds": rounds = iterator.next().flatMap(Int.init) ?? rounds
            case "--profile": profileOnly = iterator.next()
            default:
                FileHandle.standardError.write(Data("usage: VerifyBenchmark [--seconds N] [--rounds N] [--profile verify|raw]\n".utf8))
                exit(2)
            }
        }
    }
}

/// Calls `body` in batches until `seconds` have passed; returns calls per second.
/// Not isolated to the main actor, like the loop that calls it: a hop per call would be measured too.
func measure(seconds: Double, batch: Int = 100, _ body: () async throws -> Void) async rethrows -> Double {
    let clock = ContinuousClock()
    let start = clock.now
    let limit = Duration.milliseconds(Int(seconds * 1000))
    var calls = 0
    while clock.now - start < limit {
        for _ in 0..<batch { try await body() }
        calls += batch
    }
    let elapsed = clock.now - start
    let elapsedSeconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    return Double(calls) / elapsedSeconds
}

func formatRate(_ rate: Double) -> String {
    let formatter = NumberFormatter()
    formatter.numberStyle = .decimal
    formatter.maximumFractionDigits = 0
    return (formatter.string(from: NSNumber(value: rate)) ?? "\(Int(rate))") + "/s"
}

func formatCost(_ rate: Double) -> String {
    let nanoseconds = 1e9 / rate
    return nanoseconds >= 1000 ? String(format: "%.1f µs", nanoseconds / 1000) : String(format: "%.0f ns", nanoseconds)
}

func row(_ cells: [String], widths: [Int]) -> String {
    "| " + zip(cells, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: " | ") + " |"
}

enum BenchmarkFailure: Error, CustomStringConvertible {
    case setup(String)
    var description: String {
        switch self {
        case .setup(let message): message
        }
    }
}

struct AppleClaims: Encodable {
    var iss = "https://appleid.apple.com"
    var aud = "com.example.web"
    var exp: Int
    var iat: Int
    var sub = "001234.0a1b2c3d4e5f67890a1b2c3d4e5f6789.1234"
    var nonce: String
    var c_hash: String
    var email = "jane@privaterelay.appleid.com"
    var email_verified = "true"
    var is_private_email = "true"
    var auth_time: Int
    var nonce_supported = true
}

struct Results {
    var tokenSize = 0
    var verifierRate = 0.0
    var rawRate = 0.0
    var cachedRate = 0.0
    var freshRate = 0.0
    var parseRate = 0.0
    var claimsRate = 0.0
}

/// Runs every measurement off the main actor, as a server's request handler would call the verifier.
func runBenchmarks(_ options: Options) async throws -> Results {
    // A fixed key set and a token shaped like Apple's (web sign-in, first authorization: email claims, nonce, c_hash).
    let rsaKey = try _RSA.Signing.PrivateKey(keySize: .bits2048)
    let primitives = try rsaKey.publicKey.getKeyPrimitives()
    let kid = "W6WcOKB"
    let jwk = JSONWebKeySet.Key(
        kty: "RSA", kid: kid, use: "sig", alg: "RS256",
        n: Base64URL.encode(primitives.modulus), e: Base64URL.encode(primitives.publicExponent)
    )
    let audience = try ClientID("com.example.web")
    let verifier = IdentityTokenVerifier(
        keySet: AppleKeySet(source: .fixed(JSONWebKeySet(keys: [jwk]))), audiences: [audience], issuers: ["https://appleid.apple.com"]
    )
    let now = Date()
    let issuedAt = Int(now.timeIntervalSince1970)
    let nonce = "qVh1Wk4xYx0n1vXkz5yVnL1cVb7oVd5o0mZl2yJX5fQ"
    let code = "c6a1b2c3d4e5f.0.srzq.aBcDeFgHiJkLmNoPqRsTuV"
    let token = try JWTSigning.rs256(
        header: ["alg": "RS256", "kid": kid],
        claims: AppleClaims(exp: issuedAt + 600, iat: issuedAt, nonce: nonce, c_hash: IdentityTokenVerifier.codeHash(code), auth_time: issuedAt),
        key: rsaKey
    )

    // Check once that the verifier accepts the token, so the loop measures success, not an early refusal.
    let identity = try await verifier.verify(token, nonce: nonce, code: code, now: now)
    guard identity.emailVerified == true else { throw BenchmarkFailure.setup("the benchmark token did not verify as expected") }

    // The raw operation on the same token and the same key material (built from the JWK's n and e, as the key
    // set does): SHA-256 of the signing input and swift-crypto's RSA PKCS#1 v1.5 verification.
    let parts = token.split(separator: ".")
    let signingInput = Data("\(parts[0]).\(parts[1])".utf8)
    guard let signatureBytes = Base64URL.decode(parts[2]) else { throw BenchmarkFailure.setup("bad signature encoding") }
    let signature = _RSA.Signing.RSASignature(rawRepresentation: signatureBytes)
    let publicKey = try _RSA.Signing.PublicKey(n: primitives.modulus, e: primitives.publicExponent)
    guard publicKey.isValidSignature(signature, for: SHA256.hash(data: signingInput), padding: .insecurePKCS1v1_5) else {
        throw BenchmarkFailure.setup("raw verification failed")
    }

    // Two parts of the verifier's own work, measured alone to show where the time beyond the RSA operation goes.
    let payload = try CompactJWS(token).payload

    // Client secret.
    let signer = ClientSecretSigner(
        teamID: try TeamID("A1B2C3D4E5"), keyID: try KeyID("ABC123DEFG"), key: SigningKey(P256.Signing.PrivateKey()), lifetime: 86_400
    )
    _ = try signer.secret(for: audience, now: now)

    var results = Results(tokenSize: token.utf8.count)
    var failures = 0
    if let only = options.profileOnly {
        // One loop alone, so a profiler's samples all belong to it.
        results.verifierRate = await measure(seconds: options.seconds) {
            if only == "raw" {
                if !publicKey.isValidSignature(signature, for: SHA256.hash(data: signingInput), padding: .insecurePKCS1v1_5) { failures += 1 }
            } else {
                do { _ = try await verifier.verify(token, nonce: nonce, code: code, now: now) } catch { failures += 1 }
            }
        }
        guard failures == 0 else { throw BenchmarkFailure.setup("\(failures) verifications failed during the run") }
        return results
    }
    // Alternate the measurements and keep each one's best round, so a noisy moment does not skew the ratio.
    for _ in 0..<options.rounds {
        results.verifierRate = max(results.verifierRate, await measure(seconds: options.seconds) {
            do {
                _ = try await verifier.verify(token, nonce: nonce, code: code, now: now)
            } catch {
                failures += 1
            }
        })
        results.rawRate = max(results.rawRate, await measure(seconds: options.seconds) {
            if !publicKey.isValidSignature(signature, for: SHA256.hash(data: signingInput), padding: .insecurePKCS1v1_5) { failures += 1 }
        })
        results.parseRate = max(results.parseRate, try await measure(seconds: options.seconds / 4) {
            _ = try CompactJWS(token)
        })
        results.claimsRate = max(results.claimsRate, try await measure(seconds: options.seconds / 4) {
            _ = try ParsedJSON.parse(payload)
        })
        results.cachedRate = max(results.cachedRate, try await measure(seconds: options.seconds / 2, batch: 1000) {
            _ = try signer.secret(for: audience, now: now)
        })
        results.freshRate = max(results.freshRate, try await measure(seconds: options.seconds / 2) {
            _ = try signer.signFresh(for: audience, now: now)
        })
    }
    guard failures == 0 else { throw BenchmarkFailure.setup("\(failures) verifications failed during the run") }
    return results
}

let options = Options(arguments: CommandLine.arguments)
let results = try await runBenchmarks(options)
if let only = options.profileOnly {
    print("\(only): \(formatRate(results.verifierRate)) (\(formatCost(results.verifierRate)) per call)")
    exit(0)
}

let ratio = results.verifierRate / results.rawRate
let widths = [56, 14, 10]
#if DEBUG
let build = "DEBUG build: figures are not representative, use Benchmarks/run-core.sh"
#else
let build = "release build"
#endif
print("siwa core benchmark: \(build), one task on one core, RSA-2048 id_token of \(results.tokenSize) bytes")
print("best of \(options.rounds) alternating rounds of \(options.seconds) s each")
print("")
print(row(["measurement", "rate", "per call"], widths: widths))
print(row(widths.map { String(repeating: "-", count: $0) }, widths: widths))
print(row(["id_token verify (IdentityTokenVerifier, all checks)", formatRate(results.verifierRate), formatCost(results.verifierRate)], widths: widths))
print(row(["raw RS256 (SHA-256 + _RSA isValidSignature)", formatRate(results.rawRate), formatCost(results.rawRate)], widths: widths))
print(row(["verifier / raw (target >= 80%)", String(format: "%.1f%%", ratio * 100), ratio >= 0.8 ? "ok" : "BELOW"], widths: widths))
print(row(["  of which: CompactJWS parse (split, base64url, header)", formatRate(results.parseRate), formatCost(results.parseRate)], widths: widths))
print(row(["  of which: claims JSON parse (ParsedJSON)", formatRate(results.claimsRate), formatCost(results.claimsRate)], widths: widths))
print(row(["client secret, cached secret(for:)", formatRate(results.cachedRate), formatCost(results.cachedRate)], widths: widths))
print(row(["client secret, signFresh (ES256 sign)", formatRate(results.freshRate), formatCost(results.freshRate)], widths: widths))
print(row(["signFresh / cached cost", String(format: "%.0fx", results.cachedRate / results.freshRate), ""], widths: widths))
