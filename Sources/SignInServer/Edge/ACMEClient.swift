import AsyncHTTPClient
import Crypto
import Foundation
import JOSE
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// An ACME client (RFC 8555) for the edge's certificates: one account key (ES256), orders for `tls_domains`, the
/// TLS-ALPN-01 (RFC 8737) and HTTP-01 challenges answered by siwa's own listeners. Written here because no Swift
/// ACME library is among the packages siwa may use (docs/architecture.md); it covers what a server ordering its own
/// certificates needs: the directory, nonces (a `badNonce` is retried with the nonce it came with), the account (found
/// again by its key when the stored URL is missing, bound to the CA's own account when it requires that), orders,
/// authorizations, challenges, finalization with a CSR, and the PEM chain; a refusal's `Retry-After` is kept. Every
/// answer of the server is checked before it is used; a failure says which step and the server's problem document
/// (RFC 7807), never a key.
final class ACMEClient: Sendable {
    struct Directory: Sendable {
        let newNonce: String
        let newAccount: String
        let newOrder: String
        /// The server opens accounts only with an external account binding (`meta.externalAccountRequired`).
        var externalAccountRequired = false
        /// Where the server says when to renew a certificate (RFC 9773 `renewalInfo`); nil when it does not.
        var renewalInfo: String? = nil
    }

    /// A failure of one step, with the server's problem when it sent one.
    struct Failure: Error, CustomStringConvertible {
        let step: String
        let detail: String
        var problemType: String? = nil
        /// The server's status code, when it answered with a refusal.
        var status: Int? = nil
        /// The server's `Retry-After` (RFC 8555 6.6: a rate limit says when to ask again; RFC 9110 10.2.3: seconds or
        /// an HTTP date), as a time from now.
        var retryAfter: Duration? = nil
        var description: String {
            "ACME \(step): \(detail)" + (retryAfter.map { " (the server asks for no new attempt for \($0.components.seconds) s)" } ?? "")
        }
        /// The server refused for its rate limits (`rateLimited`): another challenge would be refused as well.
        var rateLimited: Bool { problemType == "urn:ietf:params:acme:error:rateLimited" }
        /// The server no longer knows the account (a CA whose store was reset, as a restarted pebble's is), or no
        /// longer takes it (`unauthorized`, a deactivated account's refusal): registering the key again may help.
        var accountRefused: Bool {
            problemType == "urn:ietf:params:acme:error:accountDoesNotExist" || (step == "newOrder" && problemType == "urn:ietf:params:acme:error:unauthorized")
        }
    }

    /// A `Retry-After` value as a time from `now`: delay-seconds, or an HTTP date (one in the past is zero); nil for
    /// anything else.
    static func retryAfter(_ value: String?, now: Date = Date()) -> Duration? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if HTTPDate.isDigits(value) {
            // Digits only; a value past a year (or past Int64) is read as a year: no CA asks for longer.
            return .seconds(min(Int64(value) ?? Int64.max, 366 * 24 * 3600))
        }
        guard let date = HTTPDate.parse(value, now: now) else { return nil }
        return .seconds(max(0, min(Int64(date.timeIntervalSince(now).rounded(.up)), 366 * 24 * 3600)))
    }

    let directoryURL: String
    private let http: HTTPClient
    private let key: P256.Signing.PrivateKey
    private let logger: Logger
    private let timeout: TimeAmount = .seconds(30)
    /// The account URL (`kid`) once known, and the next nonce (each nonce used once).
    private let state: NIOLockedValueBox<(account: String?, nonce: String?)>

    init(directoryURL: String, http: HTTPClient, key: P256.Signing.PrivateKey, accountURL: String?, logger: Logger) {
        self.directoryURL = directoryURL
        self.http = http
        self.key = key
        self.logger = logger
        state = NIOLockedValueBox((account: accountURL, nonce: nil))
    }

    var accountURL: String? { state.withLockedValue { $0.account } }

    // MARK: The protocol's steps

    func directory() async throws -> Directory {
        let (status, _, body) = try await send(directoryURL, method: .GET, body: nil, step: "directory")
        guard status == .ok, let json = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
            let newNonce = json["newNonce"] as? String, let newAccount = json["newAccount"] as? String, let newOrder = json["newOrder"] as? String
        else { throw Failure(step: "directory", detail: "\(directoryURL) answered \(status.code) without newNonce, newAccount and newOrder") }
        let required = (json["meta"] as? [String: Any])?["externalAccountRequired"] as? Bool ?? false
        return Directory(
            newNonce: newNonce, newAccount: newAccount, newOrder: newOrder, externalAccountRequired: required, renewalInfo: json["renewalInfo"] as? String
        )
    }

    /// Forgets the account's URL: the next `account` registers the key again.
    func forgetAccount() {
        state.withLockedValue { $0.account = nil }
    }

    /// Registers the account (or finds it again by its key: RFC 8555 7.3.1 answers 200 with its URL), bound to the
    /// CA's own account when `externalAccount` is given (RFC 8555 7.3.4); a server that requires a binding and is
    /// given none is not asked.
    func account(_ directory: Directory, email: String?, externalAccount: ACMESettings.ExternalAccount? = nil) async throws -> String {
        if let known = accountURL { return known }
        var payload: [String: Any] = ["termsOfServiceAgreed": true]
        if let email { payload["contact"] = ["mailto:" + email] }
        if let externalAccount {
            payload["externalAccountBinding"] = try externalAccountBinding(externalAccount, url: directory.newAccount)
        } else if directory.externalAccountRequired {
            throw Failure(
                step: "newAccount",
                detail: "\(directoryURL) opens accounts only with an external account binding: set acme_eab_kid and acme_eab_hmac_key to the key ID and HMAC key your CA gives"
            )
        }
        let (status, headers, _) = try await post(directory.newAccount, payload: payload, directory: directory, step: "newAccount", useJWK: true)
        guard status == .created || status == .ok, let location = headers.first(name: "Location") else {
            throw Failure(step: "newAccount", detail: "answered \(status.code) without the account's Location")
        }
        state.withLockedValue { $0.account = location }
        return location
    }

    struct Order: Sendable {
        let url: String
        let status: String
        let authorizations: [String]
        let finalize: String
        let certificate: String?
        let error: String?
        /// The server's `Retry-After` with the order: when to look at it again (RFC 8555 7.4, an order `processing`).
        var retryAfter: Duration? = nil
    }

    /// A new order for `domains`; `replaces`: the ARI identifier of the certificate it replaces (RFC 9773 5), said only
    /// to a server that serves renewal information. A server that refuses the order for what it names (`alreadyReplaced`:
    /// another client renewed it; `unauthorized`: another account's certificate; `notFound`, `malformed`: one it does
    /// not know) is asked again, once, without it; a rate limit is not asked again.
    func newOrder(_ directory: Directory, domains: [String], replaces: String? = nil) async throws -> Order {
        let replaces = directory.renewalInfo == nil ? nil : replaces
        let (status, headers, body): (HTTPResponseStatus, HTTPHeaders, Data)
        do {
            (status, headers, body) = try await post(directory.newOrder, payload: Self.newOrderPayload(domains: domains, replaces: replaces), directory: directory, step: "newOrder")
        } catch let failure as Failure where replaces != nil && (400..<500).contains(failure.status ?? 0) && !failure.rateLimited {
            logger.info("the CA refused the order naming the certificate it replaces; ordering without naming it", metadata: ["reason": "\(failure)"])
            return try await newOrder(directory, domains: domains, replaces: nil)
        }
        guard status == .created, let location = headers.first(name: "Location") else {
            throw Failure(step: "newOrder", detail: "answered \(status.code) without the order's Location")
        }
        return try Self.order(url: location, headers: headers, body: body, step: "newOrder")
    }

    /// The payload of a new order (RFC 8555 7.4, and RFC 9773 5's `replaces`).
    static func newOrderPayload(domains: [String], replaces: String?) -> [String: Any] {
        var payload: [String: Any] = ["identifiers": domains.map { ["type": "dns", "value": $0] }]
        if let replaces { payload["replaces"] = replaces }
        return payload
    }

    /// The server's renewal information for the certificate `certID` names (RFC 9773 4.2): a plain GET, no account.
    func renewalInfo(_ directory: Directory, certID: String) async throws -> RenewalInfo {
        guard let base = directory.renewalInfo else { throw Failure(step: "renewalInfo", detail: "the directory names no renewalInfo") }
        let url = (base.hasSuffix("/") ? base : base + "/") + certID
        let (status, headers, body) = try await send(url, method: .GET, body: nil, step: "renewalInfo")
        guard status == .ok else { throw Self.refusal(step: "renewalInfo", status: status, headers: headers, body: body) }
        let retryAfter = Self.retryAfter(headers.first(name: "Retry-After"))
        guard let json = try? JSONSerialization.jsonObject(with: body) as? [String: Any], let window = json["suggestedWindow"] as? [String: Any],
            let start = (window["start"] as? String).flatMap(RenewalInfo.date), let end = (window["end"] as? String).flatMap(RenewalInfo.date)
        else { throw Failure(step: "renewalInfo", detail: "an answer without a suggestedWindow of two RFC 3339 times", retryAfter: retryAfter) }
        // RFC 9773 4.2: a window that ends before it starts is as no answer at all.
        guard end > start else { throw Failure(step: "renewalInfo", detail: "a suggestedWindow that ends before it starts", retryAfter: retryAfter) }
        return RenewalInfo(start: start, end: end, explanationURL: json["explanationURL"] as? String, retryAfter: retryAfter)
    }

    func order(_ url: String, directory: Directory) async throws -> Order {
        let (_, headers, body) = try await post(url, payload: nil, directory: directory, step: "order")
        return try Self.order(url: url, headers: headers, body: body, step: "order")
    }

    struct Authorization: Sendable {
        let domain: String
        let status: String
        /// type → (url, token)
        let challenges: [String: (url: String, token: String)]
        let error: String?
        /// The server's `Retry-After` with the authorization: when to look at it again (RFC 8555 7.5.1).
        var retryAfter: Duration? = nil
    }

    func authorization(_ url: String, directory: Directory) async throws -> Authorization {
        let (_, headers, body) = try await post(url, payload: nil, directory: directory, step: "authorization")
        guard let json = try? JSONSerialization.jsonObject(with: body) as? [String: Any], let status = json["status"] as? String,
            let identifier = json["identifier"] as? [String: Any], let domain = identifier["value"] as? String
        else { throw Failure(step: "authorization", detail: "an authorization without status or identifier") }
        var challenges: [String: (url: String, token: String)] = [:]
        var error: String?
        for challenge in json["challenges"] as? [[String: Any]] ?? [] {
            guard let type = challenge["type"] as? String, let url = challenge["url"] as? String else { continue }
            challenges[type] = (url, challenge["token"] as? String ?? "")
            if let problem = challenge["error"] as? [String: Any] { error = Self.describe(problem) }
        }
        return Authorization(
            domain: domain.lowercased(), status: status, challenges: challenges, error: error, retryAfter: Self.retryAfter(headers.first(name: "Retry-After"))
        )
    }

    /// Tells the server the challenge is ready (RFC 8555 7.5.1: an empty object).
    func respond(to challengeURL: String, directory: Directory) async throws {
        _ = try await post(challengeURL, payload: [String: Any](), directory: directory, step: "challenge")
    }

    func finalize(_ order: Order, csr: [UInt8], directory: Directory) async throws -> Order {
        let (_, headers, body) = try await post(order.finalize, payload: ["csr": Base64URL.encode(csr)], directory: directory, step: "finalize")
        return try Self.order(url: order.url, headers: headers, body: body, step: "finalize")
    }

    func certificateChain(_ url: String, directory: Directory) async throws -> String {
        let (_, _, body) = try await post(url, payload: nil, directory: directory, step: "certificate", accept: "application/pem-certificate-chain")
        guard let pem = String(data: body, encoding: .utf8), pem.contains("-----BEGIN CERTIFICATE-----") else {
            throw Failure(step: "certificate", detail: "the answer is not a PEM certificate chain")
        }
        return pem
    }

    /// RFC 8555 8.1: `token.thumbprint`, the thumbprint (RFC 7638) of the account key.
    func keyAuthorization(token: String) -> String {
        token + "." + Self.thumbprint(key.publicKey)
    }

    // MARK: JWS and transport

    static func jwk(_ key: P256.Signing.PublicKey) -> [String: String] {
        let raw = key.x963Representation
        return ["crv": "P-256", "kty": "EC", "x": Base64URL.encode(raw[1..<33]), "y": Base64URL.encode(raw[33..<65])]
    }

    /// The JWK's members in lexicographic order, without whitespace, hashed (RFC 7638 3).
    static func thumbprint(_ key: P256.Signing.PublicKey) -> String {
        let jwk = jwk(key)
        let canonical = "{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"\(jwk["x"] ?? "")\",\"y\":\"\(jwk["y"] ?? "")\"}"
        return Base64URL.encode(SHA256.hash(data: Data(canonical.utf8)))
    }

    /// RFC 8555 7.3.4: the account's public key (its JWK) signed with the CA's HMAC key (HS256), `kid` the CA's key
    /// ID and `url` the newAccount URL, as a flattened JWS.
    func externalAccountBinding(_ external: ACMESettings.ExternalAccount, url: String) throws -> [String: String] {
        let protected: [String: Any] = ["alg": "HS256", "kid": external.keyID, "url": url]
        let header = Base64URL.encode(try JSONSerialization.data(withJSONObject: protected, options: [.sortedKeys]))
        let body = Base64URL.encode(try JSONSerialization.data(withJSONObject: Self.jwk(key.publicKey), options: [.sortedKeys]))
        let mac = HMAC<SHA256>.authenticationCode(for: Data((header + "." + body).utf8), using: SymmetricKey(data: external.macKey))
        return ["protected": header, "payload": body, "signature": Base64URL.encode(Array(mac))]
    }

    /// A flattened JWS (RFC 8555 6.2): `payload` nil for POST-as-GET (an empty payload).
    private func signed(url: String, payload: Any?, nonce: String, useJWK: Bool) throws -> Data {
        var protected: [String: Any] = ["alg": "ES256", "nonce": nonce, "url": url]
        if !useJWK, let account = accountURL { protected["kid"] = account } else { protected["jwk"] = Self.jwk(key.publicKey) }
        let header = Base64URL.encode(try JSONSerialization.data(withJSONObject: protected, options: [.sortedKeys]))
        let body = try payload.map { Base64URL.encode(try JSONSerialization.data(withJSONObject: $0, options: [.sortedKeys])) } ?? ""
        let signature = try key.signature(for: Data((header + "." + body).utf8)).rawRepresentation
        return try JSONSerialization.data(withJSONObject: ["protected": header, "payload": body, "signature": Base64URL.encode(signature)])
    }

    private func nonce(_ directory: Directory) async throws -> String {
        if let kept = state.withLockedValue({ state in defer { state.nonce = nil }; return state.nonce }) { return kept }
        let (_, headers, _) = try await send(directory.newNonce, method: .HEAD, body: nil, step: "newNonce")
        guard let nonce = headers.first(name: "Replay-Nonce") else { throw Failure(step: "newNonce", detail: "no Replay-Nonce") }
        // `send` kept it: taken now, it is not kept for the next request too (an answer without a nonce of its own,
        // a proxy's 502 say, would have had it sent again, and refused as `badNonce`).
        state.withLockedValue { if $0.nonce == nonce { $0.nonce = nil } }
        return nonce
    }

    /// A signed POST; a `badNonce` refusal is tried again (up to five times) with the nonce it carried. Any other
    /// 4xx or 5xx is a `Failure` with the server's problem document.
    private func post(
        _ url: String, payload: Any?, directory: Directory, step: String, useJWK: Bool = false, accept: String? = nil
    ) async throws -> (HTTPResponseStatus, HTTPHeaders, Data) {
        var attempt = 0
        while true {
            attempt += 1
            let body = try signed(url: url, payload: payload, nonce: try await nonce(directory), useJWK: useJWK)
            let (status, headers, data) = try await send(url, method: .POST, body: body, step: step, accept: accept)
            if status.code < 400 { return (status, headers, data) }
            let refusal = Self.refusal(step: step, status: status, headers: headers, body: data)
            if refusal.problemType == "urn:ietf:params:acme:error:badNonce", attempt < 5 { continue }
            throw refusal
        }
    }

    private func send(_ url: String, method: HTTPMethod, body: Data?, step: String, accept: String? = nil) async throws -> (HTTPResponseStatus, HTTPHeaders, Data) {
        var request = HTTPClientRequest(url: url)
        request.method = method
        request.headers.add(name: "User-Agent", value: "siwa-acme")
        if let accept { request.headers.add(name: "Accept", value: accept) }
        if let body {
            request.headers.add(name: "Content-Type", value: "application/jose+json")
            request.body = .bytes(ByteBuffer(data: body))
        }
        let response: HTTPClientResponse
        do {
            response = try await http.execute(request, timeout: timeout)
        } catch {
            throw Failure(step: step, detail: "\(url) could not be reached: \(error)")
        }
        if let nonce = response.headers.first(name: "Replay-Nonce") { state.withLockedValue { $0.nonce = nonce } }
        let data = Data(buffer: try await response.body.collect(upTo: 1 << 20))
        return (response.status, response.headers, data)
    }

    /// An order as the server answered it (`body`), with its `Retry-After` (`headers`).
    private static func order(url: String, headers: HTTPHeaders, body: Data, step: String) throws -> Order {
        guard let json = try? JSONSerialization.jsonObject(with: body) as? [String: Any], let status = json["status"] as? String,
            let finalize = json["finalize"] as? String
        else { throw Failure(step: step, detail: "an order without status or finalize") }
        return Order(
            url: url, status: status, authorizations: json["authorizations"] as? [String] ?? [], finalize: finalize,
            certificate: json["certificate"] as? String, error: (json["error"] as? [String: Any]).map(describe),
            retryAfter: retryAfter(headers.first(name: "Retry-After"))
        )
    }

    /// The failure a refusal (a 4xx or 5xx) stands for: its status, its problem document (RFC 7807), its `Retry-After`.
    private static func refusal(step: String, status: HTTPResponseStatus, headers: HTTPHeaders, body: Data) -> Failure {
        let problem = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] ?? [:]
        return Failure(
            step: step, detail: "\(status.code) " + describe(problem), problemType: problem["type"] as? String, status: Int(status.code),
            retryAfter: retryAfter(headers.first(name: "Retry-After"))
        )
    }

    /// A problem document said in one line: its type's last part and its detail.
    static func describe(_ problem: [String: Any]) -> String {
        let type = (problem["type"] as? String).map { $0.replacingOccurrences(of: "urn:ietf:params:acme:error:", with: "") } ?? "problem"
        return "\(type): \(problem["detail"] as? String ?? "no detail")"
    }
}

/// When a CA suggests renewing a certificate (ACME Renewal Information, RFC 9773): a window, a page that says why
/// (a CA that revokes certificates early says so there), and when to ask again.
struct RenewalInfo: Sendable, Equatable {
    let start: Date
    let end: Date
    let explanationURL: String?
    /// The server's `Retry-After`: when to ask again.
    let retryAfter: Duration?

    /// The identifier of a certificate for renewal information (RFC 9773 4.1): its authority key identifier and its
    /// serial number's DER content, each base64url without padding, joined by `.`. `serial` is the (positive) number's
    /// bytes, big-endian, with or without leading zeros: its DER content has none but the one a first bit set needs.
    static func certID(authorityKeyID: some Sequence<UInt8>, serial: some Sequence<UInt8>) -> String {
        var content = Array(serial.drop { $0 == 0 })
        if content.first.map({ $0 >= 0x80 }) ?? true { content.insert(0, at: 0) }
        return Base64URL.encode(authorityKeyID) + "." + Base64URL.encode(content)
    }

    /// An RFC 3339 time, with or without fractions of a second.
    static func date(_ text: String) -> Date? {
        let whole = ISO8601DateFormatter()
        whole.formatOptions = [.withInternetDateTime]
        if let date = whole.date(from: text) { return date }
        let fractional = ISO8601DateFormatter()
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return fractional.date(from: text)
    }

    /// A time picked uniformly at random in the window (RFC 9773 4.2), so that a CA's certificates are not all
    /// renewed at one moment.
    func pickedTime() -> Date {
        start + Double.random(in: 0..<end.timeIntervalSince(start))
    }

    /// When to ask again (RFC 9773 4.3): the server's `Retry-After` (`askAgain`); six hours without one.
    var nextAsk: Duration {
        Self.askAgain(after: retryAfter ?? .seconds(6 * 3600))
    }

    /// A `Retry-After` of renewal information, an answer's or a refusal's, within a minute and a day (RFC 9773 4.3).
    static func askAgain(after retryAfter: Duration) -> Duration {
        min(max(retryAfter, .seconds(60)), .seconds(24 * 3600))
    }
}

/// An HTTP date (RFC 9110 5.6.7) read as a recipient must: the IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), and
/// the obsolete RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime (`Sun Nov  6 08:49:37 1994`) forms. Read
/// strictly, by hand: Foundation's `DateFormatter` takes a date without its `GMT`, or one form for another.
enum HTTPDate {
    private static let days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
    private static let longDays = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    static func parse(_ text: String, now: Date = Date()) -> Date? {
        let parts = text.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        switch parts.count {
        case 6:
            // IMF-fixdate.
            guard parts[0].hasSuffix(","), days.contains(String(parts[0].dropLast())), parts[5] == "GMT", parts[1].count == 2, parts[3].count == 4,
                let day = digits(parts[1]), let month = months.firstIndex(of: parts[2]), let year = digits(parts[3])
            else { return nil }
            return date(year: year, month: month + 1, day: day, time: parts[4])
        case 4:
            // RFC 850: a two-digit year is the one within 50 years of now (RFC 9110 5.6.7: never more than 50 ahead).
            let dated = parts[1].split(separator: "-", omittingEmptySubsequences: false).map(String.init)
            guard parts[0].hasSuffix(","), longDays.contains(String(parts[0].dropLast())), parts[3] == "GMT", dated.count == 3,
                dated[0].count == 2, dated[2].count == 2, let day = digits(dated[0]), let month = months.firstIndex(of: dated[1]), let short = digits(dated[2])
            else { return nil }
            let thisYear = Calendar(identifier: .gregorian).dateComponents(in: TimeZone(identifier: "GMT") ?? .current, from: now).year ?? 2000
            var year = thisYear - thisYear % 100 + short
            if year > thisYear + 50 { year -= 100 } else if year < thisYear - 50 { year += 100 }
            return date(year: year, month: month + 1, day: day, time: parts[2])
        case 5:
            // asctime: its day is padded with a blank, not a zero.
            guard days.contains(parts[0]), let month = months.firstIndex(of: parts[1]), (1...2).contains(parts[2].count), parts[4].count == 4,
                let day = digits(parts[2]), let year = digits(parts[4])
            else { return nil }
            return date(year: year, month: month + 1, day: day, time: parts[3])
        default:
            return nil
        }
    }

    /// Whether `text` is one or more ASCII digits (a `Retry-After`'s delay-seconds, a date's numbers).
    static func isDigits(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
    }

    private static func digits(_ text: String) -> Int? {
        isDigits(text) ? Int(text) : nil
    }

    /// The date of these parts and `HH:MM:SS`, when it is one (no 31 November, no hour 24).
    private static func date(year: Int, month: Int, day: Int, time: String) -> Date? {
        let clock = time.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        guard clock.count == 3, clock.allSatisfy({ $0.count == 2 }), let hour = digits(clock[0]), let minute = digits(clock[1]), let second = digits(clock[2]),
            hour < 24, minute < 60, second < 61, let zone = TimeZone(identifier: "GMT")
        else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let asked = DateComponents(year: year, month: month, day: day, hour: hour, minute: minute, second: min(second, 59))
        guard let date = calendar.date(from: asked) else { return nil }
        let back = calendar.dateComponents([.year, .month, .day], from: date)
        guard back.year == year, back.month == month, back.day == day else { return nil }
        return date
    }
}
