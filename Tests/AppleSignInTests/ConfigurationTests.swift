import AppleSignIn
import Crypto
import Foundation
import Testing

@Suite("Configuration")
struct ConfigurationTests {
    /// Asserts the configuration is refused and returns the error, so the test can check which field it names.
    private func refused(
        sourceLocation: SourceLocation = #_sourceLocation,
        _ make: () throws(ConfigurationError) -> AppleSignInConfiguration
    ) -> ConfigurationError? {
        #expect(throws: ConfigurationError.self, sourceLocation: sourceLocation) { try make() }
    }

    @Test("a valid configuration is accepted with Apple's defaults")
    func validConfiguration() throws {
        let configuration = try TestConfiguration.make(extraAudiences: ["com.example.app"])
        #expect(configuration.teamID.rawValue == "A1B2C3D4E5")
        #expect(configuration.keyID.rawValue == "ABC123DEFG")
        #expect(configuration.audiences.map(\.rawValue) == ["com.example.web", "com.example.app"])
        #expect(configuration.acceptedIssuers == ["https://appleid.apple.com"])
        #expect(configuration.appleBaseURL.absoluteString == "https://appleid.apple.com")
        #expect(configuration.isApple)
        #expect(configuration.endpoint("/auth/token").absoluteString == "https://appleid.apple.com/auth/token")
        #expect(configuration.clientSecretLifetime == 86_400)
    }

    @Test("team_id must be ten upper-case letters or digits", arguments: ["", "A1B2C3D4E", "A1B2C3D4E5F", "a1b2c3d4e5", "A1B2C3D4-5"])
    func invalidTeamID(teamID: String) {
        let error = refused { () throws(ConfigurationError) in try TestConfiguration.make(teamID: teamID) }
        #expect(error?.field == "team_id")
        #expect(error?.message.contains("A1B2C3D4E5") == true)
    }

    @Test("key_id must be ten upper-case letters or digits", arguments: ["", "ABC123", "abc123defg", "ABC123DEFGH"])
    func invalidKeyID(keyID: String) {
        let error = refused { () throws(ConfigurationError) in try TestConfiguration.make(keyID: keyID) }
        #expect(error?.field == "key_id")
        #expect(error?.message.contains("Key ID") == true)
    }

    @Test("services_id must be reverse-DNS", arguments: ["", "example", "com..example", "com.example.", "com.exa mple.web", "https://example.com"])
    func invalidServicesID(servicesID: String) {
        let error = refused { () throws(ConfigurationError) in try TestConfiguration.make(servicesID: servicesID) }
        #expect(error?.field == "services_id")
        #expect(error?.message.contains("com.example.web") == true)
    }

    @Test("an invalid extra audience is named as such")
    func invalidExtraAudience() {
        let error = refused { () throws(ConfigurationError) in try TestConfiguration.make(extraAudiences: ["not a bundle id"]) }
        #expect(error?.field == "extra_audiences")
    }

    @Test(
        "return_urls under Apple's base URL must be https, a domain name and have no fragment",
        arguments: [
            ("http://example.com/callback", "https"),
            ("https://192.0.2.10/callback", "domain name"),
            ("https://[::1]/callback", "domain name"),
            ("https://localhost/callback", "localhost"),
            ("https://app.localhost/callback", "localhost"),
            ("https://example.com/callback#done", "fragment"),
            ("/auth/apple/callback", "absolute"),
        ]
    )
    func invalidReturnURL(url: String, explanation: String) {
        let error = refused { () throws(ConfigurationError) in try TestConfiguration.make(returnURLs: ["https://example.com/ok", url]) }
        #expect(error?.field == "return_urls")
        #expect(error?.message.contains(explanation) == true, "\(error?.message ?? "no error")")
    }

    @Test("at least one return URL is required")
    func noReturnURL() {
        let error = refused { () throws(ConfigurationError) in try TestConfiguration.make(returnURLs: []) }
        #expect(error?.field == "return_urls")
    }

    @Test("return URLs are kept exactly as written, trailing slash included")
    func returnURLsKeptExactly() throws {
        let configuration = try TestConfiguration.make(returnURLs: ["https://example.com/callback/", "https://www.example.com/callback"])
        #expect(configuration.returnURLs.map(\.absoluteString) == ["https://example.com/callback/", "https://www.example.com/callback"])
    }

    @Test("private_key that is a public key is refused by name")
    func publicKeyAsPrivateKey() {
        let publicPEM = P256.Signing.PrivateKey().publicKey.pemRepresentation
        let error = refused { () throws(ConfigurationError) in try TestConfiguration.make(privateKeyPEM: publicPEM) }
        #expect(error?.field == "private_key")
        #expect(error?.message.contains("public key") == true)
        #expect(error?.message.contains("AuthKey_") == true)
    }

    @Test("private_key that is a certificate is refused by name")
    func certificateAsPrivateKey() {
        let certificate = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUZ2V0dGluZyBhIHJlYWwgY2VydA==\n-----END CERTIFICATE-----\n"
        let error = refused { () throws(ConfigurationError) in try TestConfiguration.make(privateKeyPEM: certificate) }
        #expect(error?.field == "private_key")
        #expect(error?.message.contains("certificate") == true)
    }

    @Test(
        "private_key that is not a P-256 PKCS#8 key is refused by name",
        arguments: [
            "not a key at all",
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----",
            P384.Signing.PrivateKey().pemRepresentation,
        ]
    )
    func garbagePrivateKey(pem: String) {
        let error = refused { () throws(ConfigurationError) in try TestConfiguration.make(privateKeyPEM: pem) }
        #expect(error?.field == "private_key")
        #expect(error?.message.contains(pem) == false, "the key text must not be echoed")
    }

    @Test("a .p8 key with surrounding whitespace is accepted and never printed")
    func p8Accepted() throws {
        let (key, pem) = TestKeys.p8()
        let configuration = try TestConfiguration.make(privateKeyPEM: "\n  " + pem + "\n\n")
        #expect(configuration.signingKey.publicKeyPEM == key.publicKey.pemRepresentation)
        #expect(!"\(configuration.signingKey)".contains("BEGIN"))
        #expect("\(configuration.signingKey)".contains("redacted"))
    }

    @Test("client_secret_lifetime above six months is refused", arguments: [15_777_001.0, 31_536_000.0, 59.0, -1.0])
    func invalidLifetime(lifetime: TimeInterval) {
        let error = refused { () throws(ConfigurationError) in try TestConfiguration.make(clientSecretLifetime: lifetime) }
        #expect(error?.field == "client_secret_lifetime")
        #expect(error?.message.contains("15777000") == true)
    }

    @Test("client_secret_lifetime of exactly six months is accepted")
    func maximumLifetime() throws {
        let configuration = try TestConfiguration.make(clientSecretLifetime: 15_777_000)
        #expect(configuration.clientSecretLifetime == 15_777_000)
    }

    @Test("apple_base_url must be an absolute http(s) URL, and https for appleid.apple.com", arguments: ["appleid.apple.com", "ftp://appleid.apple.com", "http://appleid.apple.com"])
    func invalidBaseURL(base: String) {
        let error = refused { () throws(ConfigurationError) in try TestConfiguration.make(appleBaseURL: base) }
        #expect(error?.field == "apple_base_url")
    }

    @Test("a local emulator base URL allows http://127.0.0.1 and localhost return URLs, and Apple's issuer is still the one accepted (the emulator signs as Apple)")
    func localEmulator() throws {
        let configuration = try TestConfiguration.make(
            returnURLs: ["http://127.0.0.1:8080/auth/apple/callback", "http://localhost:8080/auth/apple/callback"],
            appleBaseURL: "http://127.0.0.1:9090/"
        )
        #expect(!configuration.isApple)
        #expect(configuration.returnURLs.count == 2)
        #expect(configuration.acceptedIssuers == ["https://appleid.apple.com"])
        #expect(configuration.endpoint("/auth/keys").absoluteString == "http://127.0.0.1:9090/auth/keys")
    }

    @Test("a local emulator base URL still refuses fragments and other schemes")
    func localEmulatorStillRefuses() {
        let fragment = refused { () throws(ConfigurationError) in
            try TestConfiguration.make(returnURLs: ["http://127.0.0.1:8080/cb#x"], appleBaseURL: "http://127.0.0.1:9090")
        }
        #expect(fragment?.field == "return_urls")
        let scheme = refused { () throws(ConfigurationError) in
            try TestConfiguration.make(returnURLs: ["ftp://127.0.0.1/cb"], appleBaseURL: "http://127.0.0.1:9090")
        }
        #expect(scheme?.field == "return_urls")
    }

    @Test("accepted issuers can be configured, but not emptied")
    func acceptedIssuers() throws {
        let configuration = try AppleSignInConfiguration(
            teamID: TestConfiguration.teamID, keyID: TestConfiguration.keyID, servicesID: "com.example.web",
            returnURLs: ["https://example.com/cb"], privateKeyPEM: TestKeys.p8().pem,
            acceptedIssuers: ["https://appleid.apple.com", "https://account.apple.com"]
        )
        #expect(configuration.acceptedIssuers == ["https://appleid.apple.com", "https://account.apple.com"])
        #expect(throws: ConfigurationError(field: "accepted_issuers", "needs at least one issuer, normally https://appleid.apple.com")) {
            try AppleSignInConfiguration(
                teamID: TestConfiguration.teamID, keyID: TestConfiguration.keyID, servicesID: "com.example.web",
                returnURLs: ["https://example.com/cb"], privateKeyPEM: TestKeys.p8().pem, acceptedIssuers: []
            )
        }
    }
}
