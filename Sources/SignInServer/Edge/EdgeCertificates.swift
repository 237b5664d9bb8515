import Crypto
import DoorHTTP
import Foundation
import NIOConcurrencyHelpers
import NIOSSL
import SwiftASN1
import X509

/// The certificates the edge serves, by name, and the TLS contexts made of them: swapped whole when a certificate is
/// renewed or its files change (connections already open keep theirs), read on every hello. Also the TLS-ALPN-01
/// challenge certificates (RFC 8737) while an order waits for validation.
final class EdgeCertificates: Sendable {
    /// A certificate in service: its names, its chain and key (PEM), its life, and the context presenting it.
    struct Served: Sendable {
        let names: [String]
        let chainPEM: String
        let keyPEM: String
        let notBefore: Date
        let notAfter: Date
        let context: NIOSSLContext
        /// Its identifier for the CA's renewal information (RFC 9773); nil without an authority key identifier.
        var certID: String? = nil
    }

    /// What a hello gets.
    enum Choice {
        /// The site's certificate for the name (or the first domain's without SNI).
        case site(NIOSSLContext)
        /// A TLS-ALPN-01 validation: the challenge certificate, `acme-tls/1` only.
        case challenge(NIOSSLContext)
        /// A TLS-ALPN-01 validation for one of `domains` this instance does not hold: another instance's order,
        /// looked up in the store.
        case challengeElsewhere(String)
        /// No certificate for the name: a TLS alert (`unrecognized_name`), never another site's certificate.
        case unknownName
        /// No certificate yet (the first order has not completed).
        case none
    }

    private struct State {
        var served: [String: Served] = [:]
        var challenges: [String: NIOSSLContext] = [:]
    }

    /// `tls_domains`, in order: the first answers a hello without SNI. Empty with the operator's files: the
    /// certificate's own names.
    let domains: [String]
    private let state = NIOLockedValueBox(State())

    init(domains: [String]) {
        self.domains = domains
    }

    /// The names served: `domains`, or the names of the certificates installed when none were configured.
    var names: [String] {
        domains.isEmpty ? state.withLockedValue { Array($0.served.keys).sorted() } : domains
    }

    /// The certificate served for `name`, if any.
    func served(_ name: String) -> Served? {
        state.withLockedValue { $0.served[name.lowercased()] }
    }

    func choose(_ hello: ClientHello) -> Choice {
        state.withLockedValue { state in
            if hello.protocols.contains(EdgeTLS.acmeProtocol) {
                // RFC 8737 3: a validation offers acme-tls/1 alone and names the domain.
                guard hello.protocols == [EdgeTLS.acmeProtocol], let name = hello.serverName else { return .unknownName }
                if let context = state.challenges[name] { return .challenge(context) }
                return domains.contains(name) ? .challengeElsewhere(name) : .unknownName
            }
            guard let name = hello.serverName else {
                let first = domains.first.flatMap { state.served[$0] } ?? state.served.values.sorted { $0.names.first ?? "" < $1.names.first ?? "" }.first
                return first.map { .site($0.context) } ?? .none
            }
            if let served = state.served[name] { return .site(served.context) }
            // A wildcard certificate covers one label.
            if let dot = name.firstIndex(of: "."), let served = state.served["*" + name[dot...]] { return .site(served.context) }
            return domains.contains(name) ? .none : .unknownName
        }
    }

    /// Serves `chainPEM` (leaf first) with `keyPEM` for every name it covers that is served (`domains`; all its DNS
    /// names when none are configured). Throws when the PEM does not parse, the key is not the certificate's, or it
    /// covers none of `domains`. The pair already in service is kept as it is, its TLS context with it, so that the
    /// sessions that context issued still resume (a SIGHUP, or a deploy that rewrote the same files).
    @discardableResult
    func install(chainPEM: String, keyPEM: String) throws -> Served {
        if let same = inService(chainPEM: chainPEM, keyPEM: keyPEM) { return same }
        let chain = try NIOSSLCertificate.fromPEMBytes(Array(chainPEM.utf8))
        guard !chain.isEmpty else { throw EdgeError.certificate("no certificate in the PEM") }
        let key = try NIOSSLPrivateKey(bytes: Array(keyPEM.utf8), format: .pem)
        let leaf = try Certificate(pemEncoded: Self.firstPEMBlock(chainPEM))
        // A validity that ends before it begins (a broken or hostile CA's) would make the renewal's arithmetic
        // meaningless: refused, the certificate in service stays.
        guard leaf.notValidAfter > leaf.notValidBefore else {
            throw EdgeError.certificate("its validity ends (\(leaf.notValidAfter)) before it begins (\(leaf.notValidBefore))")
        }
        let names = try EdgeTLS.dnsNames(leaf)
        let covered = domains.isEmpty ? names : domains.filter { domain in names.contains(domain) || names.contains(EdgeTLS.wildcard(of: domain)) }
        guard !covered.isEmpty else {
            throw EdgeError.certificate("the certificate names \(names.joined(separator: ", ")), none of tls_domains (\(domains.joined(separator: ", ")))")
        }
        let context = try NIOSSLContext(configuration: EdgeTLS.serverConfiguration(chain: chain, key: key, protocols: EdgeTLS.siteProtocols))
        let authorityKeyID = (try? leaf.extensions.authorityKeyIdentifier)??.keyIdentifier
        let served = Served(
            names: covered, chainPEM: chainPEM, keyPEM: keyPEM, notBefore: leaf.notValidBefore, notAfter: leaf.notValidAfter, context: context,
            certID: authorityKeyID.map { RenewalInfo.certID(authorityKeyID: $0, serial: leaf.serialNumber.bytes) }
        )
        // One certificate serves every name (ACME orders one for all of `domains`; the operator gives one pair): a
        // name the new one does not cover is no longer served with the one it replaces.
        state.withLockedValue { state in
            state.served = [:]
            for name in domains.isEmpty ? names : covered { state.served[name] = served }
        }
        return served
    }

    /// The certificate in service, when it is `chainPEM` with `keyPEM` (one serves every name: `install`).
    func inService(chainPEM: String, keyPEM: String) -> Served? {
        state.withLockedValue { state in
            guard let served = state.served.values.first, served.chainPEM == chainPEM, served.keyPEM == keyPEM else { return nil }
            return served
        }
    }

    /// Presents a TLS-ALPN-01 certificate for `domain` carrying `keyAuthorization`'s SHA-256, until `clearChallenge`.
    func setChallenge(domain: String, keyAuthorization: String) throws {
        let context = try Self.challengeContext(domain: domain, keyAuthorization: keyAuthorization)
        state.withLockedValue { $0.challenges[domain] = context }
    }

    /// The TLS context of a TLS-ALPN-01 certificate for `domain` carrying `keyAuthorization`'s SHA-256.
    static func challengeContext(domain: String, keyAuthorization: String) throws -> NIOSSLContext {
        let (chain, key) = try EdgeTLS.challengeCertificate(domain: domain, keyAuthorization: keyAuthorization)
        return try NIOSSLContext(configuration: EdgeTLS.serverConfiguration(chain: [chain], key: key, protocols: [EdgeTLS.acmeProtocol]))
    }

    func clearChallenge(domain: String) {
        state.withLockedValue { _ = $0.challenges.removeValue(forKey: domain) }
    }

    /// The first `-----BEGIN CERTIFICATE-----` block of a chain.
    static func firstPEMBlock(_ pem: String) throws -> String {
        guard let start = pem.range(of: "-----BEGIN CERTIFICATE-----"), let end = pem.range(of: "-----END CERTIFICATE-----", range: start.upperBound..<pem.endIndex) else {
            throw EdgeError.certificate("no certificate in the PEM")
        }
        return String(pem[start.lowerBound..<end.upperBound])
    }
}

/// An edge failure, said to the operator.
struct EdgeError: Error, CustomStringConvertible {
    let description: String

    static func certificate(_ text: String) -> EdgeError { EdgeError(description: text) }
}

/// How the edge speaks TLS.
enum EdgeTLS {
    /// RFC 8737's protocol.
    static let acmeProtocol = "acme-tls/1"
    /// What the site's certificate negotiates: HTTP/2, then HTTP/1.1.
    static let siteProtocols = ["h2", "http/1.1"]

    /// TLS 1.2 suites: ECDHE for forward secrecy, AEAD only (TLS 1.3's are all both).
    static let tls12Suites: [NIOTLSCipher] = [
        .TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, .TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        .TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, .TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        .TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, .TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ]

    static func serverConfiguration(chain: [NIOSSLCertificate], key: NIOSSLPrivateKey, protocols: [String]) -> TLSConfiguration {
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        configuration.cipherSuiteValues = tls12Suites
        configuration.applicationProtocols = protocols
        return configuration
    }

    /// The DNS names of a certificate's subjectAltName, lowercased.
    static func dnsNames(_ certificate: Certificate) throws -> [String] {
        guard let names = try certificate.extensions.subjectAlternativeNames else { return [] }
        return names.compactMap { name in
            if case .dnsName(let dns) = name { return dns.lowercased() }
            return nil
        }
    }

    /// `*.example.com` for `auth.example.com`.
    static func wildcard(of domain: String) -> String {
        guard let dot = domain.firstIndex(of: ".") else { return domain }
        return "*" + domain[dot...]
    }

    /// id-pe-acmeIdentifier (RFC 8737 6.1).
    static let acmeIdentifier: ASN1ObjectIdentifier = [1, 3, 6, 1, 5, 5, 7, 1, 31]

    /// RFC 8737 3: a self-signed certificate for `domain` alone, with the critical acmeIdentifier extension holding
    /// the SHA-256 of the key authorization as a DER OCTET STRING.
    static func challengeCertificate(domain: String, keyAuthorization: String) throws -> (NIOSSLCertificate, NIOSSLPrivateKey) {
        let key = P256.Signing.PrivateKey()
        let digest = Array(SHA256.hash(data: Data(keyAuthorization.utf8)))
        let name = try DistinguishedName { CommonName(domain) }
        let now = Date()
        let extensions = try Certificate.Extensions([
            try SubjectAlternativeNames([.dnsName(domain)]).makeCertificateExtension(),
            Certificate.Extension(oid: acmeIdentifier, critical: true, value: ArraySlice([0x04, UInt8(digest.count)] + digest)),
        ])
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: Certificate.PublicKey(key.publicKey), notValidBefore: now - 3600,
            notValidAfter: now + 7 * 86_400, issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256, extensions: extensions,
            issuerPrivateKey: Certificate.PrivateKey(key)
        )
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return (try NIOSSLCertificate(bytes: serializer.serializedBytes, format: .der), try NIOSSLPrivateKey(bytes: Array(key.pemRepresentation.utf8), format: .pem))
    }

    /// A CSR (PKCS #10) for `domains`, signed by `key`: all in subjectAltName, and the first of at most 64 bytes
    /// as the subject's common name (RFC 5280's upper bound, which Let's Encrypt enforces; with none that short, an
    /// empty subject, which it takes).
    static func signingRequest(domains: [String], key: P256.Signing.PrivateKey) throws -> [UInt8] {
        let common = domains.first { $0.utf8.count <= 64 }
        let subject = try common.map { name in try DistinguishedName { CommonName(name) } } ?? DistinguishedName()
        let extensions = try Certificate.Extensions([try SubjectAlternativeNames(domains.map { .dnsName($0) }).makeCertificateExtension()])
        var attributes = CertificateSigningRequest.Attributes()
        attributes.insert(try CertificateSigningRequest.Attribute(ExtensionRequest(extensions: extensions)))
        let request = try CertificateSigningRequest(
            version: .v1, subject: subject, privateKey: Certificate.PrivateKey(key), attributes: attributes, signatureAlgorithm: .ecdsaWithSHA256
        )
        var serializer = DER.Serializer()
        try serializer.serialize(request)
        return serializer.serializedBytes
    }
}
