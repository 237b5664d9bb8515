import AppleSignIn
import Foundation
import JOSE
import JWTKit

/// One input both implementations are given once, outside the timed loops, to show where they differ in what
/// they accept (what a replacement of one by the other would change), not how fast they are.
struct ProbeResult {
    var name: String
    var own: String
    var jwtKit: String
}

/// Runs the id_token probes through both full RS256 paths, and one key-set probe.
func runProbes(fixtures: Fixtures, own: OwnImplementation, jwtKit: JWTKitImplementation) async throws -> [ProbeResult] {
    let payload = fixtures.idTokenPayloadJSON
    let standardHeader = #"{"alg":"RS256","kid":"\#(Fixtures.keyIDs[0])"}"#
    let key = fixtures.rsaKeys[0]
    func signed(header: String, payload: String) throws -> String {
        try Fixtures.signRS256(header: header, payload: payload, key: key)
    }

    // The signature part of a 256-byte signature is 342 characters: two spare bits groups, so "==" would pad it,
    // and its last character carries 4 bits that a strict decoder requires to be zero.
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    var nonCanonical = Array(fixtures.idToken)
    if let last = nonCanonical.last, let value = alphabet.firstIndex(of: last) { nonCanonical[nonCanonical.count - 1] = alphabet[value | 1] }

    let duplicateSub = #"{"sub":"someone-else","# + String(payload.dropFirst())
    let foreignAudience = payload.replacingOccurrences(of: #""aud":"\#(Fixtures.clientID)""#, with: #""aud":["\#(Fixtures.clientID)","com.other.app"]"#)
    let padded = #"{"x_pad":""# + String(repeating: "a", count: 20_000) + #"","# + String(payload.dropFirst())
    let cases: [(String, String)] = [
        ("the benchmark token", fixtures.idToken),
        ("signature with \"==\" padding appended", fixtures.idToken + "=="),
        ("signature with non-zero trailing bits (same bytes if decoded leniently)", String(nonCanonical)),
        ("header without kid (signed by the first key of the set)", try signed(header: #"{"alg":"RS256"}"#, payload: payload)),
        ("unknown kid (signed by the first key of the set)", try signed(header: #"{"alg":"RS256","kid":"UNKNOWN1"}"#, payload: payload)),
        ("header alg HS256 over a valid RS256 signature", try signed(header: #"{"alg":"HS256","kid":"\#(Fixtures.keyIDs[0])"}"#, payload: payload)),
        ("duplicate sub claim in the payload", try signed(header: standardHeader, payload: duplicateSub)),
        ("aud array with a foreign client id", try signed(header: standardHeader, payload: foreignAudience)),
        ("20 KB token (a 20,000-character extra claim)", try signed(header: standardHeader, payload: padded)),
    ]
    var results: [ProbeResult] = []
    for (name, token) in cases {
        results.append(ProbeResult(
            name: name,
            own: await outcome { _ = try await own.verifyIDToken(token, nonce: Fixtures.nonce, code: Fixtures.code) },
            jwtKit: await outcome { _ = try await jwtKit.verifyIDToken(token, nonce: Fixtures.nonce, code: Fixtures.code) }
        ))
    }

    // A key set whose only key is marked "use":"enc"; the token names it.
    let primitives = try key.publicKey.getKeyPrimitives()
    let encryptionKeySet = JSONWebKeySet(keys: [JSONWebKeySet.Key(
        kty: "RSA", kid: "ENCKEY1", use: "enc", alg: "RS256", n: Base64URL.encode(primitives.modulus), e: Base64URL.encode(primitives.publicExponent)
    )])
    let encryptionToken = try signed(header: #"{"alg":"RS256","kid":"ENCKEY1"}"#, payload: payload)
    let ownVerifier = IdentityTokenVerifier(
        keySet: AppleKeySet(source: .fixed(encryptionKeySet)), audiences: [try ClientID(Fixtures.clientID)], issuers: ["https://appleid.apple.com"]
    )
    let jwtKitKeys = JWTKeyCollection()
    try await jwtKitKeys.add(jwksJSON: String(decoding: try JSONEncoder().encode(encryptionKeySet), as: UTF8.self))
    results.append(ProbeResult(
        name: "kid of a key set entry marked \"use\":\"enc\"",
        own: await outcome { _ = try await ownVerifier.verify(encryptionToken, nonce: Fixtures.nonce, code: Fixtures.code) },
        jwtKit: await outcome { _ = try await jwtKitKeys.verify(encryptionToken, as: JWTKitIDToken.self, expectedAudience: Fixtures.clientID) }
    ))
    return results
}

/// "accepted", or "refused: " and a short reason.
private func outcome(_ body: () async throws -> Void) async -> String {
    do {
        try await body()
        return "accepted"
    } catch let error as IdentityTokenError {
        return "refused (\(error.check.name))"
    } catch let error as JWTError {
        return "refused (\(error.errorType)\(error.reason.map { ": " + $0 } ?? ""))"
    } catch {
        let text = String(describing: error).replacingOccurrences(of: "\n", with: " ").replacingOccurrences(of: "|", with: "/")
        return "refused (" + (text.count > 70 ? String(text.prefix(67)) + "..." : text) + ")"
    }
}
