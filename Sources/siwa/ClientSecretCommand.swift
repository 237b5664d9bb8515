import AppleSignIn
import ArgumentParser
import Foundation

/// `siwa client-secret`: signs the ES256 client secret Apple's token endpoint wants.
struct ClientSecretCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "client-secret",
        abstract: "Print a client secret JWT on stdout and its expiry on stderr.",
        discussion: "Example: siwa client-secret --team-id ABCDE12345 --key-id XYZ9876543 --key-file AuthKey_XYZ9876543.p8 --client-id com.example.web"
    )

    @Option(help: "Team ID (10 characters).") var teamId: String
    @Option(help: "Key ID of the .p8 key (10 characters).") var keyId: String
    @Option(help: "The client_id: Services ID, or bundle ID for a native app.") var clientId: String
    @Option(help: "Path to AuthKey_<KEYID>.p8.") var keyFile: String
    @Option(help: "Lifetime in days (at most 182).") var days: Double = 180

    func run() throws {
        do {
            let teamID = try TeamID(teamId, field: "--team-id")
            let keyID = try KeyID(keyId, field: "--key-id")
            let clientID = try ClientID(clientId, field: "--client-id")
            let pem = try readKeyFile(keyFile)
            let key = try SigningKey(pem: pem, field: "--key-file")
            let lifetime = days * 86_400
            guard lifetime >= 60, lifetime <= AppleSignInConfiguration.maximumClientSecretLifetime else {
                throw ConfigurationError(field: "--days", "must be more than 0 and at most 182 (Apple's limit is 15777000 seconds, about six months)")
            }
            let signer = ClientSecretSigner(teamID: teamID, keyID: keyID, key: key, lifetime: lifetime)
            let (secret, expiresAt) = try signer.signFresh(for: clientID)
            print(secret)
            CLIOutput.stderr("expires \(ISO8601DateFormatter().string(from: expiresAt)) (\(Int(expiresAt.timeIntervalSince1970)))")
        } catch let error as ConfigurationError {
            CLIOutput.stderr("error: \(error)")
            throw ExitCode.failure
        }
    }
}

/// Reads a key file, turning a missing or unreadable file into a configuration error.
func readKeyFile(_ path: String, field: String = "--key-file") throws(ConfigurationError) -> String {
    guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
        throw ConfigurationError(field: field, "cannot read \(path); give the path of AuthKey_<KEYID>.p8")
    }
    return text
}
