import Crypto
import Foundation
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
