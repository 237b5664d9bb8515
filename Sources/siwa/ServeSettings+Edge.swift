import AppleSignIn
import Foundation
import SignInServer

extension ServePlan {
    /// `tls_domains`, `tls_cert_file`, `tls_key_file`, `https_port`, `acme_*` and `h2_*`: siwa alone at the edge, or nil
    /// (plain HTTP) when neither domains nor certificate files are given.
    static func edge(_ values: LayeredValues, host: String, port: Int) throws -> EdgeSettings? {
        let domains = values.list("tls_domains").map { $0.lowercased() }
        let certificate = values.string("tls_cert_file").flatMap { $0.isEmpty ? nil : $0 }
        let key = values.string("tls_key_file").flatMap { $0.isEmpty ? nil : $0 }
        let acmeKeys = ["acme_directory", "acme_email", "acme_ca_file", "acme_challenges", "acme_eab_kid", "acme_eab_hmac_key"].filter { values.string($0) != nil }
        guard !domains.isEmpty || certificate != nil || key != nil else {
            if let first = acmeKeys.first { throw ConfigurationError(field: first, "applies to siwa's own TLS: set tls_domains too") }
            if values.string("https_port") != nil { throw ConfigurationError(field: "https_port", "applies to siwa's own TLS: set tls_domains (or tls_cert_file and tls_key_file) too") }
            return nil
        }
        for domain in domains where !Self.isDNSName(domain) {
            throw ConfigurationError(field: "tls_domains", "entries are DNS names siwa is reached at (auth.example.com), without scheme, port or wildcard; got \(domain)")
        }
        let httpsPort = try values.int("https_port", default: EdgeSettings.defaultHTTPSPort)
        guard (0...65535).contains(httpsPort) else { throw ConfigurationError(field: "https_port", "must be between 0 and 65535") }
        if httpsPort == port, httpsPort != 0 { throw ConfigurationError(field: "https_port", "must differ from port (\(port)), which serves the redirect to HTTPS") }
        let source: EdgeSettings.Source
        switch (certificate, key) {
        case (let certificate?, let key?):
            if let first = acmeKeys.first { throw ConfigurationError(field: first, "applies to certificates siwa obtains; tls_cert_file and tls_key_file bring one instead: set one or the other") }
            for (field, path) in [("tls_cert_file", certificate), ("tls_key_file", key)] where !FileManager.default.isReadableFile(atPath: path) {
                throw ConfigurationError(field: field, "cannot read \(path)")
            }
            source = .files(certificate: certificate, key: key)
        case (nil, nil):
            var acme = ACMESettings()
            if let directory = values.string("acme_directory") {
                guard let url = URL(string: directory), url.scheme == "https", url.host != nil else {
                    throw ConfigurationError(field: "acme_directory", "must be the https URL of an ACME directory, e.g. \(ACMESettings.letsEncryptStaging); got \(directory)")
                }
                acme.directory = directory
            }
            if let email = values.string("acme_email"), !email.isEmpty {
                guard email.contains("@"), !email.contains(where: \.isWhitespace) else { throw ConfigurationError(field: "acme_email", "must be an email address; got \(email)") }
                acme.email = email
            }
            if let caFile = values.string("acme_ca_file"), !caFile.isEmpty {
                guard FileManager.default.isReadableFile(atPath: caFile) else { throw ConfigurationError(field: "acme_ca_file", "cannot read \(caFile)") }
                acme.caFile = caFile
            }
            let challenges = values.list("acme_challenges")
            if !challenges.isEmpty {
                acme.challenges = try challenges.map { name in
                    guard let challenge = ACMESettings.Challenge(rawValue: name.lowercased()) else {
                        throw ConfigurationError(field: "acme_challenges", "entries are tls-alpn-01 and http-01; got \(name)")
                    }
                    return challenge
                }
            }
            acme.externalAccount = try externalAccount(values)
            guard !domains.isEmpty else { throw ConfigurationError(field: "tls_domains", "is required to obtain a certificate (or give tls_cert_file and tls_key_file)") }
            source = .acme(acme)
        case (nil, _):
            throw ConfigurationError(field: "tls_cert_file", "is required with tls_key_file")
        case (_, nil):
            throw ConfigurationError(field: "tls_key_file", "is required with tls_cert_file")
        }
        var edge = EdgeSettings(domains: domains, httpsPort: httpsPort, host: host, source: source)
        var limits = HTTP2Limits()
        limits.maxConcurrentStreams = try bounded(values, "h2_max_concurrent_streams", default: limits.maxConcurrentStreams, 1...10_000)
        limits.maxHeaderListSize = try bounded(values, "h2_max_header_list_size", default: limits.maxHeaderListSize, 1_024...1_048_576)
        limits.stallTimeoutMS = try positiveMilliseconds(values, "h2_stall_timeout_ms", default: limits.stallTimeoutMS)
        limits.maxResets = try bounded(values, "h2_max_resets", default: limits.maxResets, 1...100_000)
        limits.maxControlFrames = try bounded(values, "h2_max_control_frames", default: limits.maxControlFrames, 1...100_000)
        edge.http2 = limits
        return edge
    }

    /// `acme_eab_kid` and `acme_eab_hmac_key`, both or neither; the HMAC key is base64url (as CAs give it, padded or
    /// not). An error names the key, never the HMAC key's value.
    static func externalAccount(_ values: LayeredValues) throws -> ACMESettings.ExternalAccount? {
        let keyID = values.string("acme_eab_kid").flatMap { $0.isEmpty ? nil : $0 }
        let encoded = values.string("acme_eab_hmac_key").flatMap { $0.isEmpty ? nil : $0 }
        switch (keyID, encoded) {
        case (nil, nil):
            return nil
        case (nil, _):
            throw ConfigurationError(field: "acme_eab_kid", "is required with acme_eab_hmac_key: your CA gives both (the key ID and its HMAC key)")
        case (_, nil):
            throw ConfigurationError(field: "acme_eab_hmac_key", "is required with acme_eab_kid: your CA gives both (the key ID and its HMAC key)")
        case (let keyID?, let encoded?):
            guard !keyID.contains(where: { $0.isWhitespace || $0.isNewline }) else {
                throw ConfigurationError(field: "acme_eab_kid", "must be the key ID your CA gives, without blanks")
            }
            guard let key = ACMESettings.ExternalAccount.macKey(base64URL: encoded), key.count >= 16 else {
                throw ConfigurationError(field: "acme_eab_hmac_key", "must be the HMAC key your CA gives, base64url-encoded, of 16 bytes or more (its value is not shown)")
            }
            return ACMESettings.ExternalAccount(keyID: keyID, macKey: key)
        }
    }

    static func bounded(_ values: LayeredValues, _ key: String, default value: Int, _ range: ClosedRange<Int>) throws -> Int {
        let number = try values.int(key, default: value)
        guard range.contains(number) else { throw ConfigurationError(field: key, "must be between \(range.lowerBound) and \(range.upperBound); got \(number)") }
        return number
    }

    /// `hsts_max_age`: 0 (off) up to two years.
    static func hstsMaxAge(_ values: LayeredValues) throws -> Int {
        try bounded(values, "hsts_max_age", default: ServerSettings.defaultHSTSMaxAge, 0...63_072_000)
    }

    /// Letters, digits and hyphens in dot-separated labels, at least two labels, or `localhost` names.
    static func isDNSName(_ name: String) -> Bool {
        let labels = name.split(separator: ".", omittingEmptySubsequences: false)
        return name.count <= 253 && labels.count >= 1 && labels.allSatisfy { label in
            !label.isEmpty && label.count <= 63 && label.first != "-" && label.last != "-" && label.allSatisfy { ($0.isASCII && ($0.isLetter || $0.isNumber)) || $0 == "-" }
        } && !labels.allSatisfy { $0.allSatisfy(\.isNumber) }
    }

    /// The origin browsers reach siwa at over its own TLS: the first domain, with `https_port` unless 443.
    static func origin(of edge: EdgeSettings) -> String {
        "https://\(edge.domains.first ?? "localhost")" + (edge.httpsPort == 443 ? "" : ":\(edge.httpsPort)")
    }
}
