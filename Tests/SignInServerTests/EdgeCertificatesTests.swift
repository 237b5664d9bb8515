import Crypto
import Foundation
import Logging
@testable import SignInServer
import Testing
import X509

/// What the edge takes from a CA (or the operator's files) before serving it, and what it asks a CA for.
@Suite("The edge's certificates: what is installed, what is asked for")
struct EdgeCertificatesTests {
    /// A self-signed certificate for `names`, valid from `notBefore` to `notAfter`, and its key, in PEM.
    static func certificate(names: [String], notBefore: Date, notAfter: Date) throws -> (chain: String, key: String) {
        let key = P256.Signing.PrivateKey()
        let name = try DistinguishedName { CommonName("test") }
        let extensions = try Certificate.Extensions([try SubjectAlternativeNames(names.map { .dnsName($0) }).makeCertificateExtension()])
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: Certificate.PublicKey(key.publicKey), notValidBefore: notBefore,
            notValidAfter: notAfter, issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256, extensions: extensions,
            issuerPrivateKey: Certificate.PrivateKey(key)
        )
        return (try certificate.serializeAsPEM().pemString, key.pemRepresentation)
    }

    /// The certificate service of an ACME site for `auth.example.com`, on a new SQLite store (its file is the caller's
    /// to remove).
    static func service() async throws -> (EdgeCertificateService, EdgeCertificates, SQLiteStore, database: String) {
        let database = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-edge-\(UUID().uuidString).sqlite").path
        let store = try SQLiteStore(path: database, cipher: TokenCipher(base64Keys: [TokenCipher.generateKey()]))
        try await store.migrate()
        let certificates = EdgeCertificates(domains: ["auth.example.com"])
        let service = EdgeCertificateService(
            settings: EdgeSettings(domains: ["auth.example.com"], source: .acme(ACMESettings())), certificates: certificates, http01: HTTP01Answers(),
            store: store, metrics: ServerMetrics(), logger: Logger(label: "test")
        )
        return (service, certificates, store, database)
    }

    @Test("a certificate whose validity ends before it begins (a broken or hostile CA's) is refused, and the one in service stays; before, the renewal's jitter over a negative life stopped the process, at every start")
    func backwardsValidity() throws {
        let certificates = EdgeCertificates(domains: ["auth.example.com"])
        let now = Date()
        let good = try Self.certificate(names: ["auth.example.com"], notBefore: now - 3600, notAfter: now + 86_400)
        let served = try certificates.install(chainPEM: good.chain, keyPEM: good.key)
        #expect(served.names == ["auth.example.com"])
        for (notBefore, notAfter) in [(now + 86_400, now - 3600), (now, now)] {
            let backwards = try Self.certificate(names: ["auth.example.com"], notBefore: notBefore, notAfter: notAfter)
            #expect(throws: EdgeError.self) { try certificates.install(chainPEM: backwards.chain, keyPEM: backwards.key) }
        }
        #expect(certificates.served("auth.example.com")?.chainPEM == good.chain)
    }

    @Test("a certificate in service that the store lacks, or holds an older one of (its save failed once it was issued), stays in service and is stored again, not replaced by the older one nor ordered anew; a newer one in the store (another instance's) is served")
    func servedKeptOverOlderStored() async throws {
        let (service, certificates, store, database) = try await Self.service()
        defer { try? FileManager.default.removeItem(atPath: database) }
        let now = Date()
        func make(days: Double) throws -> (chain: String, key: String) {
            try Self.certificate(names: ["auth.example.com"], notBefore: now - 3600, notAfter: now + days * 86_400)
        }
        func keep(_ pair: (chain: String, key: String), days: Double) async throws {
            try await store.saveEdgeRecord(EdgeRecord(name: service.certificateName, value: pair.key + "\n" + pair.chain, notAfter: now + days * 86_400, updatedAt: now))
        }
        func stored() async throws -> String? { try await store.edgeRecord(name: service.certificateName)?.value }

        // Issued and served, its save failed: the store has none, or the one it replaced.
        let older = try make(days: 30)
        let newer = try make(days: 90)
        _ = try certificates.install(chainPEM: newer.chain, keyPEM: newer.key)
        #expect(try await service.loadStored()?.chainPEM == newer.chain)
        #expect(try await stored()?.hasSuffix(newer.chain) == true, "stored again")
        try await keep(older, days: 30)
        #expect(try await service.loadStored()?.chainPEM == newer.chain)
        #expect(certificates.served("auth.example.com")?.chainPEM == newer.chain)
        #expect(try await stored()?.hasSuffix(newer.chain) == true, "stored again")
        // Another instance stored a newer one: served here too.
        let newest = try make(days: 120)
        try await keep(newest, days: 120)
        #expect(try await service.loadStored()?.chainPEM == newest.chain)
        #expect(certificates.served("auth.example.com")?.chainPEM == newest.chain)
    }

    @Test("a certificate that replaces one and no longer names all its names: those names are no longer served with the one it replaced (the operator's files without tls_domains, and with them)")
    func replacedNamesDropped() throws {
        let now = Date()
        for domains in [[], ["auth.example.com", "www.example.com"]] {
            let certificates = EdgeCertificates(domains: domains)
            let both = try Self.certificate(names: ["auth.example.com", "www.example.com"], notBefore: now - 3600, notAfter: now + 86_400)
            try certificates.install(chainPEM: both.chain, keyPEM: both.key)
            #expect(certificates.served("www.example.com")?.chainPEM == both.chain)
            let one = try Self.certificate(names: ["auth.example.com"], notBefore: now - 3600, notAfter: now + 86_400)
            try certificates.install(chainPEM: one.chain, keyPEM: one.key)
            #expect(certificates.served("auth.example.com")?.chainPEM == one.chain)
            #expect(certificates.served("www.example.com") == nil, "\(domains)")
        }
    }

    @Test("the pair in service installed again (a SIGHUP with the files unchanged) keeps its TLS context, whose sessions resume; another pair, or the same certificate with names dropped, gets a new one")
    func samePairKept() throws {
        let now = Date()
        let certificates = EdgeCertificates(domains: [])
        let pair = try Self.certificate(names: ["auth.example.com", "www.example.com"], notBefore: now - 3600, notAfter: now + 86_400)
        let first = try certificates.install(chainPEM: pair.chain, keyPEM: pair.key)
        let again = try certificates.install(chainPEM: pair.chain, keyPEM: pair.key)
        #expect(again.context === first.context)
        #expect(certificates.inService(chainPEM: pair.chain, keyPEM: pair.key)?.context === first.context)
        let other = try Self.certificate(names: ["auth.example.com", "www.example.com"], notBefore: now - 3600, notAfter: now + 86_400)
        #expect(certificates.inService(chainPEM: other.chain, keyPEM: other.key) == nil)
        let replaced = try certificates.install(chainPEM: other.chain, keyPEM: other.key)
        #expect(replaced.context !== first.context)
        #expect(certificates.served("www.example.com")?.context === replaced.context)
    }

    @Test("the renewal date is two thirds of the life less the certificate's own jitter (up to 2 %): the same at every look, and spread over certificates")
    func renewalJitter() async throws {
        let (service, certificates, _, database) = try await Self.service()
        defer { try? FileManager.default.removeItem(atPath: database) }
        let acme = ACMESettings()
        let notBefore = Date(timeIntervalSince1970: 1_800_000_000)
        let life: TimeInterval = 90 * 86_400
        var dates = Set<Date>()
        for _ in 0..<20 {
            let pair = try Self.certificate(names: ["auth.example.com"], notBefore: notBefore, notAfter: notBefore + life)
            let served = try certificates.install(chainPEM: pair.chain, keyPEM: pair.key)
            let date = service.renewalDate(served, acme: acme)
            #expect(service.renewalDate(served, acme: acme) == date, "drawn anew at a second look")
            #expect(date <= notBefore + life * acme.renewAt && date >= notBefore + life * (acme.renewAt - 0.02))
            dates.insert(date)
        }
        #expect(dates.count > 10, "\(dates.count) distinct dates for 20 certificates")
    }

    @Test("the order's CSR names every domain in subjectAltName, and as its common name the first of at most 64 bytes (Let's Encrypt refuses a longer one), or none when every name is longer")
    func signingRequestNames() throws {
        let long = String(repeating: "a", count: 60) + ".example.com"
        #expect(long.utf8.count > 64)
        for (domains, common) in [(["auth.example.com", "www.example.com"], "auth.example.com"), ([long, "auth.example.com"], "auth.example.com"), ([long], nil)] as [([String], String?)] {
            let bytes = try EdgeTLS.signingRequest(domains: domains, key: P256.Signing.PrivateKey())
            let request = try CertificateSigningRequest(derEncoded: bytes)
            let names = try request.attributes.extensionRequest?.extensions.subjectAlternativeNames?.compactMap { name -> String? in
                if case .dnsName(let dns) = name { return dns }
                return nil
            }
            #expect(names == domains)
            let commonNames = request.subject.flatMap { $0 }.filter { $0.type == .RDNAttributeType.commonName }.map { String(describing: $0.value) }
            #expect(commonNames == (common.map { [$0] } ?? []), "\(domains)")
        }
    }
}
