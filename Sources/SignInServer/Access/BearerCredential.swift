import Foundation

/// A bearer token as the door reads it (RFC 6750 §2.1): from one `Authorization: Bearer <token>` field, never from the
/// query (§2.3, refused: a URL's token ends up in logs, history and `Referer`). A token siwa issued is one of:
/// - a native app's session token (`/auth/api/apple/native`): the session's id, random, without a prefix;
/// - an access token of siwa's OpenID provider: `siwa_at_` and random.
/// Any other scheme (`Basic`, `Digest`…) is not siwa's: it passes to the upstream as it came.
enum BearerCredential: Equatable, Sendable {
    /// No bearer token: the session cookie, if any, says who asks.
    case none
    /// A token, to be looked up.
    case token(String)

    /// Whether a bearer token (good or not) is presented: siwa answers for it, never the sign-in page.
    var isPresented: Bool { self != .none }
    /// A token presented where the door never takes one (two `Authorization` fields, a token in the query): refused
    /// whatever the rules say, so that it reaches neither the upstream nor a log (400 `invalid_request`).
    case refused(BearerProblem)
    /// A `Bearer` value that is no token (RFC 6750's syntax): refused where a person is needed.
    case malformed(BearerProblem)

    /// The prefix of the OpenID provider's access tokens (a native session token has none).
    static let accessTokenPrefix = "siwa_at_"

    /// The query parameter RFC 6750 §2.3 names, in the spellings a client or a framework might send.
    static func isTokenParameter(_ name: Substring) -> Bool {
        let decoded = name.removingPercentEncoding ?? String(name)
        return decoded.lowercased() == "access_token"
    }

    /// What a request presents: `authorization`, every `Authorization` field it carries; `query`, its query (for a
    /// forward-auth check, the original request's, as the trusted proxy says it).
    static func read(authorization: [String], query: Substring?) -> BearerCredential {
        if let query, query.split(separator: "&", omittingEmptySubsequences: true).contains(where: { isTokenParameter($0.prefix { $0 != "=" }) }) {
            return .refused(BearerProblem(.invalidRequest, "a token in the URL's query (access_token) is not accepted: send it in the Authorization header"))
        }
        guard let field = authorization.first else { return .none }
        guard authorization.count == 1 else {
            return .refused(BearerProblem(.invalidRequest, "the request carries \(authorization.count) Authorization fields; send one"))
        }
        let value = field.trimmingCharacters(in: .whitespaces)
        if let count = joinedCredentials(value) {
            // Two fields a proxy joined into one (Envoy joins its inline headers, `Authorization` among them, with a
            // comma): the same request as two fields, refused the same (found by `VerdictDifferentialTests`).
            return .refused(BearerProblem(.invalidRequest, "the request carries \(count) Authorization credentials in one field; send one"))
        }
        guard let space = value.firstIndex(where: { $0 == " " || $0 == "\t" }) else {
            return value.lowercased() == "bearer" ? .malformed(BearerProblem(.invalidRequest, "the Bearer scheme needs a token")) : .none
        }
        guard value[..<space].lowercased() == "bearer" else { return .none }
        let token = value[space...].trimmingCharacters(in: .whitespaces)
        guard isToken68(token) else {
            return .malformed(BearerProblem(.invalidRequest, "the bearer token is malformed (RFC 6750 b64token: letters, digits, - . _ ~ + / and trailing =)"))
        }
        return .token(token)
    }

    /// How many credentials `value` holds when it is several joined with commas of which one is a bearer token
    /// (`Bearer a,Bearer b`, `Basic x, Bearer y`); nil for one credential (a `Digest` one's parameters hold commas, but
    /// no part of it is `Bearer …`).
    static func joinedCredentials(_ value: String) -> Int? {
        guard value.contains(",") else { return nil }
        let parts = value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        let bearers = parts.filter { part in
            let scheme = part.prefix { $0 != " " && $0 != "\t" }
            return scheme.lowercased() == "bearer" && scheme.count < part.count
        }
        guard !bearers.isEmpty, parts.count > 1 else { return nil }
        // Each part a credential of its own: a scheme, then a token68 (a Digest parameter, `realm="x"`, is not one).
        let credentials = parts.filter { part in
            let words = part.split(whereSeparator: { $0 == " " || $0 == "\t" })
            return words.count == 2 && isToken68(String(words[1]))
        }
        return credentials.count > 1 ? credentials.count : nil
    }

    /// RFC 6750 `b64token`: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`, at most 4 KiB.
    static func isToken68(_ token: String) -> Bool {
        let bytes = Array(token.utf8)
        guard !bytes.isEmpty, bytes.count <= 4096 else { return false }
        var index = 0
        while index < bytes.count, isTokenByte(bytes[index]) { index += 1 }
        guard index > 0 else { return false }
        while index < bytes.count, bytes[index] == UInt8(ascii: "=") { index += 1 }
        return index == bytes.count
    }

    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "+"), UInt8(ascii: "/"): true
        default: false
        }
    }
}

/// Why a bearer token was not taken, as RFC 6750 §3.1 names it: said in `WWW-Authenticate` and in the problem details.
struct BearerProblem: Error, Equatable, Sendable {
    enum Code: String, Sendable {
        /// Malformed, or presented where it must not be: 400.
        case invalidRequest = "invalid_request"
        /// Not siwa's, expired, or revoked (its session ended): 401.
        case invalidToken = "invalid_token"
    }

    let code: Code
    /// For the client's developer; never the token.
    let description: String

    init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }

    /// The token is unknown, expired or its session ended (the same words for each: which one is not told).
    static let notValid = BearerProblem(.invalidToken, "the token is not valid: unknown, expired, or its session has ended")
}
