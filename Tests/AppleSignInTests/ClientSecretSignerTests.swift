import AppleSignIn
import Crypto
import Foundation
import JOSE
import Synchronization
import Testing

/// Decodes a client secret and checks its ES256 signature with `publicKey`.
struct DecodedClientSecret {
    var header: [String: String]
    var claims: ClientSecretSigner.Claims
    var signatureValid: Bool

    init(_ secret: String, publicKey: P256.Signing.PublicKey) throws {
        let parts = secret.split(separator: ".", omittingEmptySubsequences: false)
        try #require(parts.count == 3)
        header = try JSONDecoder().decode([String: String].self, from: try #require(Base64URL.decode(parts[0])))
        claims = try JSONDecoder().decode(ClientSecretSigner.Claims.self, from: try #require(Base64URL.decode(parts[1])))
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: try #require(Base64URL.decode(parts[2])))
        signatureValid = publicKey.isValidSignature(signature, for: Data("\(parts[0]).\(parts[1])".utf8))
    }
}

@Suite("Client secret")
struct ClientSecretSignerTests {
    let key = P256.Signing.PrivateKey()
    let clientID = try! ClientID("com.example.web")
    let now = Date(timeIntervalSince1970: 1_750_000_000)

    private func signer(lifetime: TimeInterval = 1000) throws -> ClientSecretSigner {
        ClientSecretSigner(teamID: try TeamID("A1B2C3D4E5"), keyID: try KeyID("ABC123DEFG"), key: SigningKey(key), lifetime: lifetime)
    }

    @Test("the secret is an ES256 JWT with kid, iss, iat, exp, aud and sub, signed by the .p8 key")
    func claimsAndSignature() throws {
        let secret = try signer().secret(for: clientID, now: now)
        let decoded = try DecodedClientSecret(secret, publicKey: key.publicKey)
        #expect(decoded.header == ["alg": "ES256", "kid": "ABC123DEFG"])
        #expect(decoded.claims.iss == "A1B2C3D4E5")
        #expect(decoded.claims.iat == 1_750_000_000)
        #expect(decoded.claims.exp == 1_750_001_000)
        #expect(decoded.claims.aud == "https://appleid.apple.com")
        #expect(decoded.claims.sub == "com.example.web")
        #expect(decoded.signatureValid)
    }

    @Test("the signature does not verify with another key")
    func otherKeyDoesNotVerify() throws {
        let secret = try signer().secret(for: clientID, now: now)
        #expect(try DecodedClientSecret(secret, publicKey: P256.Signing.PrivateKey().publicKey).signatureValid == false)
    }

    @Test("the lifetime is capped at six months")
    func lifetimeCapped() throws {
        let secret = try signer(lifetime: 40_000_000).secret(for: clientID, now: now)
        let claims = try DecodedClientSecret(secret, publicKey: key.publicKey).claims
        #expect(claims.exp - claims.iat == 15_777_000)
    }

    @Test("the secret is reused until 80% of its lifetime, then re-signed")
    func cachedUntilEightyPercent() throws {
        let signer = try signer(lifetime: 1000)
        let first = try signer.secret(for: clientID, now: now)
        #expect(signer.signatures == 1)
        #expect(try signer.secret(for: clientID, now: now.addingTimeInterval(1)) == first)
        #expect(try signer.secret(for: clientID, now: now.addingTimeInterval(799)) == first)
        #expect(signer.signatures == 1)

        let second = try signer.secret(for: clientID, now: now.addingTimeInterval(800))
        #expect(second != first)
        #expect(signer.signatures == 2)
        let claims = try DecodedClientSecret(second, publicKey: key.publicKey).claims
        #expect(claims.iat == 1_750_000_800)
        #expect(claims.exp == 1_750_001_800)
        #expect(try signer.secret(for: clientID, now: now.addingTimeInterval(801)) == second)
        #expect(signer.signatures == 2)
    }

    @Test("each client_id gets its own secret, with its own sub")
    func perClientID() throws {
        let signer = try signer()
        let web = try signer.secret(for: clientID, now: now)
        let app = try signer.secret(for: try ClientID("com.example.app"), now: now)
        #expect(web != app)
        #expect(try DecodedClientSecret(app, publicKey: key.publicKey).claims.sub == "com.example.app")
        #expect(signer.signatures == 2)
    }

    @Test("signFresh signs every time and leaves the cache alone")
    func signFresh() throws {
        let signer = try signer()
        let cached = try signer.secret(for: clientID, now: now)
        let fresh = try signer.signFresh(for: clientID, now: now.addingTimeInterval(5))
        #expect(fresh.secret != cached)
        #expect(fresh.expiresAt == now.addingTimeInterval(1005))
        #expect(signer.signatures == 2)
        #expect(try signer.secret(for: clientID, now: now.addingTimeInterval(10)) == cached)
        #expect(signer.signatures == 2)
    }

    @Test("100 concurrent callers with a cold cache all get one valid secret, signed once")
    func concurrentCallers() async throws {
        let clientID = self.clientID
        let now = Date()
        // Several rounds, each with a cold cache and every caller released at once by a gate, so a
        // check-then-sign race shows up reliably.
        for _ in 0..<10 {
            let signer = try signer(lifetime: 86_400)
            let gate = StartingGate(parties: 100)
            let secrets = try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<100 {
                    group.addTask {
                        await gate.arrive()
                        return try signer.secret(for: clientID, now: now)
                    }
                }
                var secrets: [String] = []
                for try await secret in group { secrets.append(secret) }
                return secrets
            }
            #expect(secrets.count == 100)
            #expect(Set(secrets).count == 1)
            #expect(signer.signatures == 1)
            #expect(try DecodedClientSecret(try #require(secrets.first), publicKey: key.publicKey).signatureValid)
        }
    }

    @Test("callers on many threads at once with a cold cache share one signature")
    func concurrentThreads() throws {
        let clientID = self.clientID
        let now = Date()
        // Many short rounds: each has a fresh cold cache, and one overlap of two threads is enough to catch a race.
        var extraSignatures = 0
        for _ in 0..<100 {
            let signer = try signer(lifetime: 86_400)
            let threads = 4
            let arrived = Atomic<Int>(0)
            let results = Mutex<[String]>([])
            let done = DispatchGroup()
            for _ in 0..<threads {
                done.enter()
                Thread.detachNewThread {
                    // Spin until every thread is running, so all of them ask for the secret at the same moment.
                    arrived.add(1, ordering: .relaxed)
                    while arrived.load(ordering: .relaxed) < threads {}
                    let secret = (try? signer.secret(for: clientID, now: now)) ?? ""
                    results.withLock { $0.append(secret) }
                    done.leave()
                }
            }
            done.wait()
            let secrets = results.withLock { $0 }
            #expect(secrets.count == threads)
            #expect(Set(secrets).count == 1)
            extraSignatures += signer.signatures - 1
        }
        #expect(extraSignatures == 0)
    }

    @Test("the configuration's key, ids and lifetime are used")
    func fromConfiguration() throws {
        let (key, pem) = TestKeys.p8()
        let configuration = try TestConfiguration.make(privateKeyPEM: pem, clientSecretLifetime: 3600)
        let signer = ClientSecretSigner(configuration: configuration)
        let decoded = try DecodedClientSecret(try signer.secret(for: configuration.servicesID, now: now), publicKey: key.publicKey)
        #expect(decoded.signatureValid)
        #expect(decoded.header["kid"] == TestConfiguration.keyID)
        #expect(decoded.claims.iss == TestConfiguration.teamID)
        #expect(decoded.claims.exp - decoded.claims.iat == 3600)
    }
}
