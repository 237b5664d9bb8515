import Crypto
import CryptoExtras
import Foundation

/// Produces compact JWS strings (header.payload.signature) for the algorithms Sign in with Apple uses.
public enum JWTSigning {
    /// Signs `claims` with ES256 (the client secret).
    public static func es256(header: [String: String], claims: some Encodable, key: P256.Signing.PrivateKey) throws -> String {
        let signingInput = try signingInput(header: header, claims: claims)
        let signature = try key.signature(for: Data(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
    }

    /// Signs `claims` with RS256 (identity tokens and notifications).
    public static func rs256(header: [String: String], claims: some Encodable, key: _RSA.Signing.PrivateKey) throws -> String {
        let signingInput = try signingInput(header: header, claims: claims)
        let signature = try key.signature(for: SHA256.hash(data: Data(signingInput.utf8)), padding: .insecurePKCS1v1_5)
        return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
    }

    /// `base64url(header) + "." + base64url(claims)`, with sorted keys so output is reproducible.
    public static func signingInput(header: [String: String], claims: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Base64URL.encode(try encoder.encode(header)) + "." + Base64URL.encode(try encoder.encode(claims))
    }
}
