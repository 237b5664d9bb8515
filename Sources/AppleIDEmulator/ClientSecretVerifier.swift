import Crypto
import Foundation
import JOSE

/// Checks a client secret as Apple does: ES256 signed by the registered key, `kid`, `iss` = Team ID,
/// `sub` = `client_id`, `aud` = https://appleid.apple.com, not expired, lifetime at most six months.
struct ClientSecretVerifier: Sendable {
    private struct Claims: Decodable {
        var iss: String
        var sub: String
        var aud: String
        var iat: Double
        var exp: Double
    }

    /// Why a secret was refused; all map to `invalid_client`, the reason goes to the emulator's log.
    struct Refusal: Error, CustomStringConvertible {
        var description: String
    }

    /// Verifies `secret` for `client`.
    static func verify(_ secret: String, for client: EmulatorConfiguration.Client, now: Date) throws(Refusal) {
        guard let jws = try? CompactJWS(secret) else { throw Refusal(description: "client_secret is not a JWT") }
        guard jws.header.alg == "ES256" else { throw Refusal(description: "client_secret alg is \(jws.header.alg ?? "missing"), not ES256") }
        guard jws.header.kid == client.keyID else { throw Refusal(description: "client_secret kid \(jws.header.kid ?? "missing") is not the registered key \(client.keyID)") }
        guard let publicKey = try? P256.Signing.PublicKey(pemRepresentation: client.publicKeyPEM),
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: jws.signature),
            publicKey.isValidSignature(signature, for: Data(jws.signingInput))
        else { throw Refusal(description: "client_secret signature does not verify with the registered key") }
        guard let claims = try? JSONDecoder().decode(Claims.self, from: Data(jws.payload)) else {
            throw Refusal(description: "client_secret claims iss, sub, aud, iat, exp are not all present")
        }
        guard claims.iss == client.teamID else { throw Refusal(description: "client_secret iss \(claims.iss) is not the Team ID \(client.teamID)") }
        guard claims.sub == client.clientID else { throw Refusal(description: "client_secret sub \(claims.sub) differs from client_id \(client.clientID)") }
        guard claims.aud == "https://appleid.apple.com" else { throw Refusal(description: "client_secret aud must be https://appleid.apple.com") }
        let current = now.timeIntervalSince1970
        guard claims.exp > current else { throw Refusal(description: "client_secret expired") }
        guard claims.iat <= current + 60 else { throw Refusal(description: "client_secret iat is in the future") }
        guard claims.exp - claims.iat <= 15_777_000 else { throw Refusal(description: "client_secret lifetime exceeds six months") }
    }
}
