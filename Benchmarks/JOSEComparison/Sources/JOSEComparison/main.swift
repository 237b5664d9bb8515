// Issue 16 part 3: the project's own JOSE module against vapor/jwt-kit 5 on identical inputs — RS256 id_token verify,
// ES256 client-secret verify and sign, JWKS parse — with swift-crypto's raw operation as the ceiling of each.
// Each round gives every implementation --seconds in slices of 0.1 s, interleaved (order rotating), so a noisy
// moment hits all of them alike; every round is kept. The project's path is measured twice ("A/A"): how far its two
// measurements differ within a round is the noise that an own/jwt-kit difference must exceed in every round.
// Run it with Benchmarks/run-jose.sh (release build). Options: --seconds N per measurement (default 1),
// --rounds N (default 7), --profile OPERATION IMPLEMENTATION (one loop alone, for perf record; OPERATION is
// rs256, es256-verify, es256-sign or jwks, IMPLEMENTATION own, jwt-kit or raw).

import Crypto
import CryptoExtras
import Foundation
import JOSE

struct Options {
    var seconds = 1.0
    var rounds = 7
    /// `--profile OPERATION IMPLEMENTATION`: indices of the one loop to run.
    var profile: (operation: Int, implementation: Int)?
    static let operationNames = ["rs256", "es256-verify", "es256-sign", "jwks"]
    static let implementationNames = ["own", "jwt-kit", "raw"]

    init(arguments: [String]) {
        var iterator = arguments.dropFirst().makeIterator()
        while let argument = iterator.next() {
            switch argument {
            case "--seconds": seconds = iterator.next().flatMap(Double.init) ?? seconds
            case "--rounds": rounds = iterator.next().flatMap(Int.init) ?? rounds
            case "--profile":
                guard let operation = iterator.next().flatMap(Self.operationNames.firstIndex(of:)),
                    let implementation = iterator.next().flatMap(Self.implementationNames.firstIndex(of:))
                else { Self.usage() }
                profile = (operation, implementation)
            default: Self.usage()
            }
        }
    }

    static func usage() -> Never {
        FileHandle.standardError.write(Data("""
            usage: JOSEComparison [--seconds N] [--rounds N] [--profile \(operationNames.joined(separator: "|")) \(implementationNames.joined(separator: "|"))]

            """.utf8))
        exit(2)
    }
}

/// One implementation of one operation: a label and the call the loop repeats.
struct Contender {
    var label: String
    var body: () async throws -> Void
    var samples = Samples()

    init(label: String, _ body: @escaping () async throws -> Void) {
        self.label = label
        self.body = body
    }
}

/// One operation: the project's path, jwt-kit's, swift-crypto's raw operation, and the project's path again (A/A).
struct Operation {
    var name: String
    var contenders: [Contender]
}

struct Report {
    var operations: [Operation]
    var probes: [ProbeResult]
    var idTokenSize: Int
    var clientSecretSize: Int
    var jwksSize: Int
    var jwtKitSecretSample: String
}

/// Builds the inputs, checks each path accepts them, then measures. Not isolated to the main actor.
func runBenchmark(_ options: Options) async throws -> Report {
    let fixtures = try Fixtures(now: Date())
    let own = try await OwnImplementation(fixtures: fixtures)
    let jwtKit = try await JWTKitImplementation(fixtures: fixtures)

    // Both accept the same id_token and client secret, and each accepts the other's client secret: the loops
    // measure success on equivalent work.
    let identity = try await own.verifyIDToken(fixtures.idToken, nonce: Fixtures.nonce, code: Fixtures.code)
    let payload = try await jwtKit.verifyIDToken(fixtures.idToken, nonce: Fixtures.nonce, code: Fixtures.code)
    guard identity.subject == payload.subject.value, identity.emailVerified == true, payload.emailVerified?.value == true else {
        throw BenchmarkFailure(description: "the two verifiers disagree on the id_token")
    }
    let now = Date()
    let ownSecret = try own.signClientSecret(now: now)
    let jwtKitSecret = try await jwtKit.signClientSecret(now: now)
    _ = try own.verifyClientSecret(fixtures.clientSecret, now: now)
    _ = try own.verifyClientSecret(jwtKitSecret, now: now)
    _ = try await jwtKit.verifyClientSecret(fixtures.clientSecret, now: now)
    _ = try await jwtKit.verifyClientSecret(ownSecret, now: now)

    // The raw operations on the same bytes and keys.
    let idTokenJWS = try CompactJWS(fixtures.idToken)
    let idTokenInput = Data(idTokenJWS.signingInput)
    let rsaPublicKey = fixtures.rsaKeys[0].publicKey
    let rsaSignature = _RSA.Signing.RSASignature(rawRepresentation: idTokenJWS.signature)
    let secretJWS = try CompactJWS(fixtures.clientSecret)
    let secretInput = Data(secretJWS.signingInput)
    let p256Signature = try P256.Signing.ECDSASignature(rawRepresentation: secretJWS.signature)
    let p256PublicKey = fixtures.p256Key.publicKey
    let keyPrimitives = try fixtures.rsaKeys.map { try $0.publicKey.getKeyPrimitives() }
    guard rsaPublicKey.isValidSignature(rsaSignature, for: SHA256.hash(data: idTokenInput), padding: .insecurePKCS1v1_5),
        p256PublicKey.isValidSignature(p256Signature, for: SHA256.hash(data: secretInput))
    else { throw BenchmarkFailure(description: "raw verification failed") }

    var failures = 0
    var operations = [
        Operation(name: "RS256 verify (id_token, typed claims)", contenders: [
            Contender(label: "own (IdentityTokenVerifier)") {
                do { _ = try await own.verifyIDToken(fixtures.idToken, nonce: Fixtures.nonce, code: Fixtures.code) } catch { failures += 1 }
            },
            Contender(label: "jwt-kit (JWTKeyCollection.verify)") {
                do { _ = try await jwtKit.verifyIDToken(fixtures.idToken, nonce: Fixtures.nonce, code: Fixtures.code) } catch { failures += 1 }
            },
            Contender(label: "raw swift-crypto (SHA-256 + RSA verify)") {
                if !rsaPublicKey.isValidSignature(rsaSignature, for: SHA256.hash(data: idTokenInput), padding: .insecurePKCS1v1_5) { failures += 1 }
            },
        ]),
        Operation(name: "ES256 verify (client secret, typed claims)", contenders: [
            Contender(label: "own (CompactJWS + P256 + JSONDecoder)") {
                do { _ = try own.verifyClientSecret(fixtures.clientSecret, now: Date()) } catch { failures += 1 }
            },
            Contender(label: "jwt-kit (JWTKeyCollection.verify)") {
                do { _ = try await jwtKit.verifyClientSecret(fixtures.clientSecret, now: Date()) } catch { failures += 1 }
            },
            Contender(label: "raw swift-crypto (SHA-256 + P-256 verify)") {
                if !p256PublicKey.isValidSignature(p256Signature, for: SHA256.hash(data: secretInput)) { failures += 1 }
            },
        ]),
        Operation(name: "ES256 sign (client secret)", contenders: [
            Contender(label: "own (ClientSecretSigner.signFresh)") { _ = try own.signClientSecret(now: Date()) },
            Contender(label: "jwt-kit (JWTKeyCollection.sign)") { _ = try await jwtKit.signClientSecret(now: Date()) },
            Contender(label: "raw swift-crypto (SHA-256 + P-256 sign)") { _ = try fixtures.p256Key.signature(for: SHA256.hash(data: secretInput)) },
        ]),
        Operation(name: "JWKS parse (3 RSA keys to usable keys)", contenders: [
            Contender(label: "own (JSONWebKeySet + AppleKeySet)") { _ = try await OwnImplementation.loadKeySet(fixtures.jwksData) },
            Contender(label: "jwt-kit (JWTKeyCollection.add(jwksJSON:))") { _ = try await JWTKitImplementation.loadKeySet(fixtures.jwksText) },
            Contender(label: "raw swift-crypto (3 RSA public keys from n, e)") {
                for primitives in keyPrimitives { _ = try _RSA.Signing.PublicKey(n: primitives.modulus, e: primitives.publicExponent) }
            },
        ]),
    ]

    for index in operations.indices {
        var again = operations[index].contenders[0]
        again.label = "own again (A/A noise reference)"
        operations[index].contenders.append(again)
    }

    if let (operation, implementation) = options.profile {
        // One loop alone, so a profiler's samples all belong to it.
        let contender = operations[operation].contenders[implementation]
        let measured = try await measure(seconds: options.seconds, contender.body)
        let rate = Double(measured.calls) / measured.seconds
        print("\(operations[operation].name), \(contender.label): \(formatRate(rate))/s (\(formatCost(rate)) per call)")
        exit(failures == 0 ? 0 : 1)
    }

    // Warm-up, untimed in effect (its rate is discarded).
    for operation in operations {
        for contender in operation.contenders { _ = try await measure(seconds: min(0.2, options.seconds), contender.body) }
    }
    let slices = max(1, Int((options.seconds / 0.1).rounded()))
    for round in 0..<options.rounds {
        for index in operations.indices {
            let count = operations[index].contenders.count
            var totals = Array(repeating: (calls: 0, seconds: 0.0), count: count)
            for slice in 0..<slices {
                for step in 0..<count {
                    let which = (step + slice + round) % count
                    let measured = try await measure(seconds: options.seconds / Double(slices), operations[index].contenders[which].body)
                    totals[which].calls += measured.calls
                    totals[which].seconds += measured.seconds
                }
            }
            for which in 0..<count { operations[index].contenders[which].samples.rates.append(Double(totals[which].calls) / totals[which].seconds) }
        }
        FileHandle.standardError.write(Data("round \(round + 1)/\(options.rounds) done\n".utf8))
    }
    guard failures == 0 else { throw BenchmarkFailure(description: "\(failures) calls failed during the run") }

    let probes = try await runProbes(fixtures: fixtures, own: own, jwtKit: jwtKit)
    let jwtKitParts = jwtKitSecret.split(separator: ".")
    let sample = jwtKitParts.prefix(2).compactMap { Base64URL.decode($0).map { String(decoding: $0, as: UTF8.self) } }.joined(separator: " ")
    return Report(
        operations: operations, probes: probes, idTokenSize: fixtures.idToken.utf8.count, clientSecretSize: fixtures.clientSecret.utf8.count,
        jwksSize: fixtures.jwksData.count, jwtKitSecretSample: sample
    )
}

let options = Options(arguments: CommandLine.arguments)
let report = try await runBenchmark(options)

#if DEBUG
let build = "DEBUG build: figures are not representative, use Benchmarks/run-jose.sh"
#else
let build = "release build"
#endif
print("JOSE comparison: \(build), one task; \(options.rounds) rounds of \(options.seconds) s per implementation, interleaved in 0.1 s slices")
print("inputs: RS256 id_token \(report.idTokenSize) B (RSA-2048, 3-key set), ES256 client secret \(report.clientSecretSize) B, JWKS \(report.jwksSize) B")
print("")

let widths = [42, 44, 10, 9, 19, 8, 8]
print(row(["operation", "implementation", "median/s", "per op", "min – max /s", "rsd", "spread"], widths: widths))
print(separator(widths))
for operation in report.operations {
    for contender in operation.contenders {
        let samples = contender.samples
        print(row([
            operation.name, contender.label, formatRate(samples.median), formatCost(samples.median),
            "\(formatRate(samples.minimum)) – \(formatRate(samples.maximum))", formatPercent(samples.relativeStandardDeviation), formatPercent(samples.spread),
        ], widths: widths))
    }
}
print("")
print("rsd: relative standard deviation of the rounds; spread: (max − min) / median, the run-to-run noise of one")
print("implementation. Rounds interleave the implementations, so the per-round ratio cancels what the rounds share;")
print("own/own (A/A) is that ratio for the project's path against itself, the noise left in a comparison. A difference")
print("is beyond noise when the own/jwt-kit ratio of every round lies outside the A/A range, on the same side.")
print("")

let verdictWidths = [42, 11, 17, 17, 28, 8, 11]
print(row(["operation", "own/jwt-kit", "per-round ratio", "A/A (own/own)", "verdict", "own/raw", "jwt-kit/raw"], widths: verdictWidths))
print(separator(verdictWidths))
for operation in report.operations {
    let own = operation.contenders[0].samples, jwtKit = operation.contenders[1].samples, raw = operation.contenders[2].samples
    let again = operation.contenders[3].samples
    let ratio = own.median / jwtKit.median
    let paired = zip(own.rates, jwtKit.rates).map { $0 / $1 }
    let selfPaired = zip(own.rates, again.rates).map { $0 / $1 }
    let (low, high) = (paired.min() ?? 1, paired.max() ?? 1)
    let (noiseLow, noiseHigh) = (min(selfPaired.min() ?? 1, 1), max(selfPaired.max() ?? 1, 1))
    let verdict = low > noiseHigh ? "own faster, beyond noise" : (high < noiseLow ? "jwt-kit faster, beyond noise" : "within noise")
    print(row([
        operation.name, String(format: "%.2f×", ratio), String(format: "%.2f – %.2f", low, high),
        String(format: "%.2f – %.2f", noiseLow, noiseHigh), verdict,
        formatPercent(own.median / raw.median), formatPercent(jwtKit.median / raw.median),
    ], widths: verdictWidths))
}
print("")
print("What each accepts (RS256 id_token path, same nonce and code; not timed):")
print("")
let probeWidths = [72, 22, 40]
print(row(["input", "own", "jwt-kit"], widths: probeWidths))
print(separator(probeWidths))
for probe in report.probes { print(row([probe.name, probe.own, probe.jwtKit], widths: probeWidths)) }
print("")
print("jwt-kit's client secret (header, claims): \(report.jwtKitSecretSample)")
