import AppleSignIn
import Crypto
import CryptoExtras
import Foundation
import JOSE
import Synchronization

/// Keys generated once per test run: RSA generation is slow, so every suite shares these.
enum TestKeys {
    /// The key Apple "uses" in these tests (kid `APPLE1`).
    static let apple = try! _RSA.Signing.PrivateKey(keySize: .bits2048)
    /// A second key: a rotated-in Apple key, or a forger's key.
    static let other = try! _RSA.Signing.PrivateKey(keySize: .bits2048)

    static let appleKID = "APPLE1"
    static let otherKID = "APPLE2"

    /// The JWK Apple would publish for `key`.
    static func jwk(_ key: _RSA.Signing.PrivateKey, kid: String, use: String? = "sig", alg: String? = "RS256", kty: String = "RSA") -> JSONWebKeySet.Key {
        let primitives = try! key.publicKey.getKeyPrimitives()
        return JSONWebKeySet.Key(
            kty: kty, kid: kid, use: use, alg: alg,
            n: Base64URL.encode(primitives.modulus), e: Base64URL.encode(primitives.publicExponent)
        )
    }

    /// A key set holding only Apple's test key.
    static var appleSet: JSONWebKeySet { JSONWebKeySet(keys: [jwk(apple, kid: appleKID)]) }

    /// A fresh `.p8`-style PEM (PKCS#8).
    static func p8() -> (key: P256.Signing.PrivateKey, pem: String) {
        let key = P256.Signing.PrivateKey()
        return (key, key.pemRepresentation)
    }
}

/// A JSON value, so tests can write claims of any shape (Apple's booleans-as-strings, arrays for `aud`).
enum TestJSON: Encodable, Sendable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByFloatLiteral
{
    case string(String)
    case int(Int)
    case double(Double)
    case bool(Bool)
    case array([TestJSON])
    case object([String: TestJSON])

    init(stringLiteral value: String) { self = .string(value) }
    init(integerLiteral value: Int) { self = .int(value) }
    init(floatLiteral value: Double) { self = .double(value) }
    init(booleanLiteral value: Bool) { self = .bool(value) }
    init(arrayLiteral elements: TestJSON...) { self = .array(elements) }
    init(dictionaryLiteral elements: (String, TestJSON)...) { self = .object(Dictionary(uniqueKeysWithValues: elements)) }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .bool(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// The value as compact JSON text (for claims Apple sends as a JSON-encoded string).
    var jsonText: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return String(decoding: try! encoder.encode(self), as: UTF8.self)
    }
}

/// Builds identity tokens the way Apple does, with every claim overridable.
enum TestTokens {
    static let issuer = "https://appleid.apple.com"
    static let audience = "com.example.web"
    static let nativeAudience = "com.example.app"
    /// A fixed "now" so tests do not depend on the wall clock.
    static let now = Date(timeIntervalSince1970: 1_750_000_000)

    static func claims(at now: Date = now, _ overrides: [String: TestJSON?] = [:]) -> [String: TestJSON] {
        let seconds = Int(now.timeIntervalSince1970)
        var claims: [String: TestJSON] = [
            "iss": .string(issuer),
            "aud": .string(audience),
            "exp": .int(seconds + 600),
            "iat": .int(seconds),
            "sub": "001234.0123456789abcdef0123456789abcdef.1234",
            "auth_time": .int(seconds),
            "nonce_supported": true,
        ]
        for (name, value) in overrides {
            claims[name] = value
        }
        return claims
    }

    static func rs256(
        _ claims: [String: TestJSON],
        key: _RSA.Signing.PrivateKey = TestKeys.apple,
        header: [String: String] = ["alg": "RS256", "kid": TestKeys.appleKID]
    ) -> String {
        try! JWTSigning.rs256(header: header, claims: claims, key: key)
    }

    /// A token with the given header and an arbitrary signature (for algorithm tests).
    static func unsigned(header: [String: String], claims: [String: TestJSON], signature: String = "") -> String {
        try! JWTSigning.signingInput(header: header, claims: claims) + "." + signature
    }
}

/// A clock tests move by hand, injected into the key set cache.
final class TestClock: Sendable {
    private let current: Mutex<Date>

    init(_ start: Date = TestTokens.now) { current = Mutex(start) }

    var now: Date { current.withLock { $0 } }

    func advance(by seconds: TimeInterval) {
        current.withLock { $0 = $0.addingTimeInterval(seconds) }
    }

    var closure: @Sendable () -> Date { { self.now } }
}

/// Builds a configuration with valid defaults, so each test changes one field.
enum TestConfiguration {
    static let teamID = "A1B2C3D4E5"
    static let keyID = "ABC123DEFG"

    static func make(
        teamID: String = teamID,
        keyID: String = keyID,
        servicesID: String = TestTokens.audience,
        extraAudiences: [String] = [],
        returnURLs: [String] = ["https://example.com/auth/apple/callback"],
        privateKeyPEM: String? = nil,
        appleBaseURL: String = AppleSignInConfiguration.appleBaseURL,
        clientSecretLifetime: TimeInterval = 86_400
    ) throws(ConfigurationError) -> AppleSignInConfiguration {
        try AppleSignInConfiguration(
            teamID: teamID,
            keyID: keyID,
            servicesID: servicesID,
            extraAudiences: extraAudiences,
            returnURLs: returnURLs,
            privateKeyPEM: privateKeyPEM ?? TestKeys.p8().pem,
            appleBaseURL: appleBaseURL,
            clientSecretLifetime: clientSecretLifetime
        )
    }
}
