import Crypto

/// The Sign in with Apple private key (the `.p8` file): an EC P-256 key in PKCS#8 PEM.
/// Its description never shows the key.
public struct SigningKey: Sendable, CustomStringConvertible {
    let privateKey: P256.Signing.PrivateKey

    /// Parses the contents of a `.p8` file, refusing public keys, certificates and other curves by name.
    public init(pem: String, field: String = "private_key") throws(ConfigurationError) {
        let text = pem.trimmingCharacters(in: .whitespacesAndNewlines)
        if text.contains("BEGIN CERTIFICATE") {
            throw ConfigurationError(field: field, "is a certificate; Sign in with Apple needs the private key file AuthKey_<KEYID>.p8 downloaded when the key was created")
        }
        if text.contains("BEGIN PUBLIC KEY") {
            throw ConfigurationError(field: field, "is a public key; Sign in with Apple needs the private key file AuthKey_<KEYID>.p8 (it begins with -----BEGIN PRIVATE KEY-----)")
        }
        guard text.contains("-----BEGIN") else {
            throw ConfigurationError(field: field, "is not a PEM file; expected the contents of AuthKey_<KEYID>.p8, which begins with -----BEGIN PRIVATE KEY-----")
        }
        do {
            privateKey = try P256.Signing.PrivateKey(pemRepresentation: text)
        } catch {
            throw ConfigurationError(field: field, "is not an EC P-256 private key in PKCS#8 PEM; download the key again from Certificates, Identifiers & Profiles → Keys (a key can be downloaded only once)")
        }
    }

    /// Wraps a key generated in memory (tests, the emulator's own clients).
    public init(_ privateKey: P256.Signing.PrivateKey) {
        self.privateKey = privateKey
    }

    /// The matching public key in PEM, to register with the emulator or compare with Apple's portal.
    public var publicKeyPEM: String { privateKey.publicKey.pemRepresentation }

    public var description: String { "SigningKey(P-256, redacted)" }
}
