import AppleSignIn
import ArgumentParser
import AsyncHTTPClient
import Foundation

/// Options shared by `verify-token` and `verify-notification`: whom to trust and when.
struct VerificationOptions: ParsableArguments {
    @Option(name: .customLong("audience"), help: "Accepted audience (client_id); repeat for several.") var audiences: [String] = []
    @Option(help: "A JWKS file to verify against instead of fetching one.") var jwks: String?
    @Option(help: "A JWKS URL (default: Apple's https://appleid.apple.com/auth/keys).") var jwksUrl: String?
    @Option(name: .customLong("issuer"), help: "Accepted issuer; repeat for several (default https://appleid.apple.com).") var issuers: [String] = []
    @Option(help: "Verify as if the clock read this many seconds since 1970.") var at: Double?

    /// The key set to use.
    func keySet() throws -> AppleKeySet {
        if let jwks {
            guard let data = FileManager.default.contents(atPath: jwks) else {
                throw ValidationError("cannot read the JWKS file \(jwks)")
            }
            guard let set = try? JSONDecoder().decode(JSONWebKeySet.self, from: data) else {
                throw ValidationError("\(jwks) is not a JWKS ({\"keys\": [...]})")
            }
            return AppleKeySet(source: .fixed(set))
        }
        let urlText = jwksUrl ?? AppleSignInConfiguration.appleBaseURL + "/auth/keys"
        guard let url = URL(string: urlText), url.scheme == "https" || url.scheme == "http" else {
            throw ValidationError("--jwks-url must be an http(s) URL")
        }
        return AppleKeySet(source: .remote(url, HTTPClient.shared, timeout: .seconds(10)))
    }

    /// The parsed audiences.
    func clientIDs() throws -> [ClientID] {
        guard !audiences.isEmpty else { throw ValidationError("give at least one --audience (the Services ID or bundle ID)") }
        return try audiences.map { text in try ClientID(text, field: "--audience") }
    }

    /// The accepted issuers.
    var acceptedIssuers: [String] { issuers.isEmpty ? [AppleSignInConfiguration.appleBaseURL] : issuers }

    /// The verification clock.
    var now: Date { at.map { Date(timeIntervalSince1970: $0) } ?? Date() }
}

/// Reads a token argument, `-` meaning standard input.
func readTokenArgument(_ argument: String) -> String {
    let text = argument == "-" ? CLIOutput.readStandardInput() : argument
    return text.trimmingCharacters(in: .whitespacesAndNewlines)
}

/// `siwa verify-token`: verifies an identity token as the server does.
struct VerifyTokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify-token",
        abstract: "Verify an Apple identity token and print its claims as JSON.",
        discussion: "Example: siwa verify-token - --audience com.example.web < id_token.txt"
    )

    @Argument(help: "The id_token, or - to read it from standard input.") var token: String
    @OptionGroup var options: VerificationOptions
    @Option(help: "The raw nonce sent in the authorization request.") var nonce: String?
    @Option(help: "The authorization code returned with the token (checks c_hash).") var code: String?

    func run() async throws {
        let verifier = IdentityTokenVerifier(keySet: try options.keySet(), audiences: try options.clientIDs(), issuers: options.acceptedIssuers)
        do {
            let identity = try await verifier.verify(readTokenArgument(token), nonce: nonce, code: code, now: options.now)
            print(try CLIOutput.json(identity))
        } catch {
            CLIOutput.stderr("invalid token: \(error)")
            throw ExitCode.failure
        }
    }
}

/// `siwa verify-notification`: verifies a server-to-server notification.
struct VerifyNotificationCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify-notification",
        abstract: "Verify an Apple server-to-server notification and print its event as JSON.",
        discussion: "Example: siwa verify-notification - --audience com.example.web < notification.json"
    )

    @Argument(help: "The notification: the JWS, the whole {\"payload\": ...} body, or - for standard input.") var payload: String
    @OptionGroup var options: VerificationOptions

    func run() async throws {
        let verifier = NotificationVerifier(keySet: try options.keySet(), audiences: try options.clientIDs(), issuers: options.acceptedIssuers)
        let text = readTokenArgument(payload)
        do {
            let notification = text.hasPrefix("{")
                ? try await verifier.verify(body: Array(text.utf8), now: options.now)
                : try await verifier.verify(payload: text, now: options.now)
            print(try CLIOutput.json(notification))
        } catch {
            CLIOutput.stderr("invalid notification: \(error)")
            throw ExitCode.failure
        }
    }
}
