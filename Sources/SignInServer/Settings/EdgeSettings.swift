import Foundation
import JOSE

/// siwa alone at the edge (issue 36): HTTPS on `https_port` with certificates it obtains by ACME (`tls_domains`) or
/// that the operator brings (`tls_cert_file`, `tls_key_file`), HTTP/2 through ALPN, and on `port` only the redirect
/// to HTTPS, ACME's HTTP-01 answers and the health checks. Nil in `ServerSettings.edge`: plain HTTP, as behind a proxy.
public struct EdgeSettings: Sendable {
    /// `tls_domains`: the names siwa serves HTTPS for (the first one to a hello without SNI), lowercased.
    public var domains: [String]
    /// `https_port` (443 by default).
    public var httpsPort: Int
    /// Where HTTPS is bound (`host`).
    public var host: String
    /// The certificate: obtained by ACME, or the operator's files.
    public var source: Source
    /// HTTP/2's limits.
    public var http2 = HTTP2Limits()

    public enum Source: Sendable {
        /// `tls_cert_file` and `tls_key_file` (PEM): reloaded when they change and on SIGHUP.
        case files(certificate: String, key: String)
        /// ACME (RFC 8555).
        case acme(ACMESettings)
    }

    /// `https_port`'s default, the one place it is written; and `port`'s with siwa's own TLS (the plain port, which
    /// only redirects to HTTPS).
    public static let defaultHTTPSPort = 443
    public static let defaultPlainPort = 80

    public init(domains: [String], httpsPort: Int = Self.defaultHTTPSPort, host: String = "0.0.0.0", source: Source) {
        self.domains = domains.map { $0.lowercased() }
        self.httpsPort = httpsPort
        self.host = host
        self.source = source
    }
}

/// The ACME client's settings.
public struct ACMESettings: Sendable {
    /// The two challenges siwa answers (RFC 8555 8.3, RFC 8737).
    public enum Challenge: String, Sendable, CaseIterable {
        case tlsALPN01 = "tls-alpn-01"
        case http01 = "http-01"
    }

    /// Let's Encrypt's production directory.
    public static let letsEncrypt = "https://acme-v02.api.letsencrypt.org/directory"
    /// Let's Encrypt's staging directory (untrusted certificates, generous rate limits): for a first try.
    public static let letsEncryptStaging = "https://acme-staging-v02.api.letsencrypt.org/directory"

    /// `acme_directory`.
    public var directory: String = ACMESettings.letsEncrypt
    /// `acme_email`: the account's contact (expiry notices), if any.
    public var email: String?
    /// `acme_ca_file`: PEM of the CA to trust for the ACME server (a private one: step-ca, pebble); nil: the system's.
    public var caFile: String?
    /// `acme_challenges`: the challenges to try, in order (TLS-ALPN-01 first by default).
    public var challenges: [Challenge] = [.tlsALPN01, .http01]
    /// `acme_eab_kid` and `acme_eab_hmac_key`: the external account binding (RFC 8555 7.3.4) that some CAs require
    /// to open an account (ZeroSSL, Google Trust Services, a step-ca that asks for one); nil: none.
    public var externalAccount: ExternalAccount?
    /// Renewal starts at this fraction of a certificate's life (two thirds).
    public var renewAt: Double = 2.0 / 3.0
    /// The first wait after a failed order; doubled at each failure up to `maximumBackoff`.
    public var firstBackoff: Duration = .seconds(60)
    public var maximumBackoff: Duration = .seconds(6 * 3600)
    /// How long to wait for an authorization or an order to change state before giving up on this try.
    public var pollTimeout: Duration = .seconds(120)

    public init() {}

    /// The key ID and the HMAC key a CA gives for binding the ACME account to an account of its own.
    public struct ExternalAccount: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
        public let keyID: String
        /// The HMAC key's bytes (the CA gives them base64url-encoded). Secret: never printed.
        public let macKey: [UInt8]

        public init(keyID: String, macKey: [UInt8]) {
            self.keyID = keyID
            self.macKey = macKey
        }

        public var description: String { "external account \(keyID) (HMAC key redacted)" }
        public var debugDescription: String { description }
        /// `dump` and reflection show the key ID, not the key.
        public var customMirror: Mirror { Mirror(self, children: ["keyID": keyID, "macKey": "<redacted>"]) }

        /// The HMAC key's bytes from the base64url a CA gives (blanks and line ends around it, and padding, taken off); nil when it is
        /// not base64url.
        public static func macKey(base64URL text: String) -> [UInt8]? {
            var text = Substring(text.trimmingCharacters(in: .whitespacesAndNewlines))
            while text.hasSuffix("=") { text = text.dropLast() }
            return Base64URL.decode(text).map(Array.init)
        }
    }
}

/// HTTP/2's limits (`h2_*` keys), each with a default; a client past one loses its connection, no one else's.
public struct HTTP2Limits: Sendable, Equatable {
    /// `h2_max_concurrent_streams`: streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
    public var maxConcurrentStreams: Int = Self.defaultMaxConcurrentStreams
    /// `h2_max_header_list_size`: the largest header list a request may carry, decoded (SETTINGS_MAX_HEADER_LIST_SIZE).
    public var maxHeaderListSize: Int = Self.defaultMaxHeaderListSize
    /// `h2_stall_timeout_ms`: a connection with streams open that neither sends nor takes a byte this long is ended
    /// (a zero window that never opens, a request that never finishes).
    public var stallTimeoutMS: Int = Self.defaultStallTimeoutMS
    /// `h2_stall_timeout_ms`' default, the one place it is written.
    public static let defaultStallTimeoutMS = 30_000
    /// `h2_max_resets`: streams a client may reset in 30 seconds (rapid reset, CVE-2023-44487).
    public var maxResets: Int = Self.defaultMaxResets
    /// `h2_max_control_frames`: SETTINGS, PING and PRIORITY frames a client may send in 30 seconds.
    public var maxControlFrames: Int = Self.defaultMaxControlFrames
    /// The `h2_*` keys' other defaults, each written only here (the limits, `siwa serve`'s parse and the configuration
    /// reference read them).
    public static let defaultMaxConcurrentStreams = 100
    public static let defaultMaxHeaderListSize = 16_384
    public static let defaultMaxResets = 200
    public static let defaultMaxControlFrames = 200

    public init() {}
}
