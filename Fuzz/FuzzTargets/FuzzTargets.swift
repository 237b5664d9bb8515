import AppleSignIn
import Crypto
import CryptoExtras
import Dispatch
import Foundation
import JOSE

/// The fuzz targets of issue 9: what a hostile client can put in front of us before anything is trusted — the
/// callback form post (or query), an identity token, and the `user` JSON; and of issue 26, a request head as the
/// door's byte path reads it, against NIO's parser. Each target feeds the input to the
/// real parser or verifier and checks properties that must hold for every input. A violation is returned as
/// `FuzzOutcome.violated`: the SiwaFuzz driver turns it into a crash, which libFuzzer reports with the input saved;
/// `swift test` (FuzzCorpusTests) records it as a failure of that input and goes on with the next.
public enum FuzzTarget: String, CaseIterable, Sendable {
    /// `CallbackPayload.parse(formBody:)` and `parse(query:)`.
    case callback
    /// `IdentityTokenVerifier.verify`: arbitrary tokens (first byte even), or arbitrary claims signed with a
    /// key the verifier trusts (first byte odd), so the claim checks are reached too.
    case jwt
    /// `AppleUser.parse(json:)`.
    case user
    /// `RawHTTP.request` against NIO's HTTP/1 parser, and `RequestTarget` (issue 26).
    case request

    /// Runs one input through the target.
    public func run(_ input: [UInt8]) -> FuzzOutcome {
        FuzzOutcome.evaluate { () throws(PropertyViolation) -> Bool in
            switch self {
            case .callback: try FuzzChecks.callback(input)
            case .jwt: try FuzzChecks.jwt(input)
            case .user: try FuzzChecks.user(input)
            case .request: try FuzzChecks.request(input)
            }
        }
    }

    /// The committed corpus of this target, under `Fuzz/Corpus/<name>`.
    public static func corpusDirectory(for target: FuzzTarget, root: URL) -> URL {
        root.appendingPathComponent("Fuzz/Corpus/\(target.rawValue)", isDirectory: true)
    }
}

/// What one input did to a target.
public enum FuzzOutcome: Sendable, Equatable {
    /// Parsed or verified, every property holding.
    case accepted
    /// Refused, every property holding.
    case refused
    /// A property did not hold: the message says which.
    case violated(String)

    /// Runs `body` (true: accepted), turning a property violation into `.violated`.
    public static func evaluate(_ body: () throws(PropertyViolation) -> Bool) -> FuzzOutcome {
        do {
            return try body() ? .accepted : .refused
        } catch {
            return .violated(error.message)
        }
    }
}

/// A property a fuzz target checks did not hold.
public struct PropertyViolation: Error, Sendable {
    /// Which property, in a sentence.
    public let message: String
}

/// The properties each target checks.
public enum FuzzChecks {
    // MARK: callback

    static func callback(_ input: [UInt8]) throws(PropertyViolation) -> Bool {
        let parsed: CallbackPayload
        do {
            parsed = try CallbackPayload.parse(formBody: input)
        } catch {
            // A refusal must say what was wrong, naming a reason.
            try check(!error.message.isEmpty, "a callback refusal without a message")
            _ = try? CallbackPayload.parse(query: String(decoding: input, as: UTF8.self))
            return false
        }
        try check(input.count <= CallbackPayload.maximumBodySize, "a body over the limit was accepted")
        try check((parsed.code?.utf8.count ?? 0) <= 1024, "code over its limit")
        try check((parsed.idToken?.utf8.count ?? 0) <= 16 * 1024, "id_token over its limit")
        try check((parsed.state?.utf8.count ?? 0) <= 512, "state over its limit")
        try check((parsed.error?.utf8.count ?? 0) <= 128, "error over its limit")

        // What we accepted survives being encoded again and parsed again, unchanged.
        var pairs: [(String, String)] = []
        if let code = parsed.code { pairs.append(("code", code)) }
        if let idToken = parsed.idToken { pairs.append(("id_token", idToken)) }
        if let state = parsed.state { pairs.append(("state", state)) }
        if let error = parsed.error { pairs.append(("error", error)) }
        if let user = parsed.user { pairs.append(("user", user.wireJSON)) }
        let reencoded = Array(FormEncoding.encode(pairs).utf8)
        guard let again = try? CallbackPayload.parse(formBody: reencoded) else {
            // Re-encoding can only grow a field past its byte limit through percent escapes, never past the
            // decoded limit, so a refusal here is a parser asymmetry.
            throw PropertyViolation(message: "an accepted callback was refused after re-encoding")
        }
        try check(again == parsed, "a callback changed after re-encoding")
        return true
    }

    // MARK: user

    static func user(_ input: [UInt8]) throws(PropertyViolation) -> Bool {
        let text = String(decoding: input, as: UTF8.self)
        guard let user = try? AppleUser.parse(json: text) else { return false }
        for value in [user.firstName, user.lastName, user.email] {
            guard let value else { continue }
            try check(!value.isEmpty, "an empty name or email was kept")
            try check(value.trimmingCharacters(in: .whitespacesAndNewlines) == value, "a name or email kept surrounding blanks")
        }
        guard let again = try? AppleUser.parse(json: user.wireJSON) else {
            throw PropertyViolation(message: "an accepted user did not parse after re-encoding")
        }
        try check(again == user, "a user changed after re-encoding")
        return true
    }

    // MARK: jwt

    static func jwt(_ input: [UInt8]) throws(PropertyViolation) -> Bool {
        guard let mode = input.first else { return false }
        let fixture = try JWTFixture.shared.get()
        let rest = Array(input.dropFirst())
        if mode % 2 == 0 {
            // Any token at all: nothing the fuzzer writes is signed by the key generated in this process, so
            // nothing may verify.
            let token = String(decoding: rest, as: UTF8.self)
            _ = try? CompactJWS(token)
            let result = try blocking { await fixture.verify(token) }
            if case .success = result { throw PropertyViolation(message: "an unsigned or foreign token verified") }
            return false
        } else {
            // Arbitrary claims, correctly signed: every claim check is on its own.
            let token = try fixture.sign(payload: rest)
            let result = try blocking { await fixture.verify(token) }
            guard case .success(let identity) = result else { return false }
            guard let claims = (try? JSONSerialization.jsonObject(with: Data(rest))) as? [String: Any] else {
                throw PropertyViolation(message: "a token verified whose claims Foundation cannot read as an object")
            }
            try check(claims["sub"] as? String == identity.subject, "the verified subject is not the sub claim")
            try check(!identity.subject.isEmpty, "an empty subject verified")
            try check(claims["iss"] as? String == JWTFixture.issuer, "a token from another issuer verified")
            let audiences = (claims["aud"] as? [String]) ?? [claims["aud"] as? String].compactMap { $0 }
            try check(!audiences.isEmpty && audiences.allSatisfy { $0 == JWTFixture.audience }, "a token for another audience verified")
            let now = JWTFixture.now.timeIntervalSince1970
            try check(identity.expiresAt.timeIntervalSince1970 + 60 >= now, "an expired token verified")
            try check(identity.issuedAt.timeIntervalSince1970 <= now + 60, "a token issued in the future verified")
            // Nonce and c_hash recomputed here with Foundation, not with the helpers the verifier uses.
            let nonceDigest = SHA256.hash(data: Data(JWTFixture.nonce.utf8)).map { String(format: "%02x", $0) }.joined()
            let nonce = claims["nonce"] as? String
            try check(nonce == JWTFixture.nonce || nonce == nonceDigest || (nonce == nil && identity.nonceSupported == false),
                  "a token with the wrong nonce verified")
            let codeDigest = Data(SHA256.hash(data: Data(JWTFixture.code.utf8)).prefix(16))
            try check((claims["c_hash"] as? String).flatMap(foundationBase64URL) == codeDigest, "a token with the wrong c_hash verified")
            return true
        }
    }

    // MARK: support

    /// Base64url decoded by Foundation (after mapping to standard base64), independent of `JOSE.Base64URL`.
    static func foundationBase64URL(_ text: String) -> Data? {
        var standard = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while standard.count % 4 != 0 { standard += "=" }
        return Data(base64Encoded: standard)
    }

    /// Throws a violation of the property `message` names unless `condition` holds.
    public static func check(_ condition: Bool, _ message: @autoclosure () -> String) throws(PropertyViolation) {
        if !condition { throw PropertyViolation(message: message()) }
    }

    /// Runs async work from libFuzzer's synchronous callback.
    static func blocking<T: Sendable>(_ body: @escaping @Sendable () async -> T) throws(PropertyViolation) -> T {
        let box = ResultBox<T>()
        let done = DispatchSemaphore(value: 0)
        Task.detached {
            box.value = await body()
            done.signal()
        }
        done.wait()
        guard let value = box.value else { throw PropertyViolation(message: "async work finished without a result") }
        return value
    }
}

/// Hands a result from a task to the thread waiting on the semaphore (which orders the accesses).
private final class ResultBox<T: Sendable>: @unchecked Sendable {
    var value: T?
}

/// A verifier trusting one RSA key generated at start-up, with the audience, nonce and code the seeds use.
final class JWTFixture: Sendable {
    /// Set up once; a failure to set up is reported by every jwt input rather than trapping.
    static let shared: Result<JWTFixture, PropertyViolation> = {
        do {
            return .success(try JWTFixture())
        } catch {
            return .failure(PropertyViolation(message: "the fuzz fixture could not be set up: \(error)"))
        }
    }()
    static let audience = "com.example.siwa.web"
    static let issuer = "https://appleid.apple.com"
    static let keyID = "FUZZKEY001"
    static let nonce = "fuzz-nonce"
    static let code = "fuzz-code"
    /// The verification clock: 2027-01-15, inside the seeds' iat…exp.
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    let key: _RSA.Signing.PrivateKey
    let verifier: IdentityTokenVerifier

    private init() throws {
        key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let primitives = try key.publicKey.getKeyPrimitives()
        let jwk = JSONWebKeySet.Key(
            kty: "RSA", kid: Self.keyID, use: "sig", alg: "RS256",
            n: Base64URL.encode(primitives.modulus), e: Base64URL.encode(primitives.publicExponent)
        )
        verifier = IdentityTokenVerifier(
            keySet: AppleKeySet(source: .fixed(JSONWebKeySet(keys: [jwk]))),
            audiences: [try ClientID(Self.audience)], issuers: [Self.issuer]
        )
    }

    /// A compact JWS over `payload` exactly as given, signed RS256 with the trusted key.
    func sign(payload: [UInt8]) throws(PropertyViolation) -> String {
        let signingInput = Base64URL.encode(Array(#"{"alg":"RS256","kid":"\#(Self.keyID)"}"#.utf8)) + "." + Base64URL.encode(payload)
        guard let signature = try? key.signature(for: SHA256.hash(data: Data(signingInput.utf8)), padding: .insecurePKCS1v1_5) else {
            throw PropertyViolation(message: "signing failed")
        }
        return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
    }

    func verify(_ token: String) async -> Result<AppleIdentity, IdentityTokenError> {
        do {
            return .success(try await verifier.verify(token, nonce: Self.nonce, code: Self.code, now: Self.now))
        } catch {
            return .failure(error)
        }
    }
}
