import DoorHTTP
import HTTPTypes

/// A request as every door can describe it, whatever carried it (HTTP/1.1, HTTP/2, a forward-auth check, Envoy's
/// `ext_authz` over HTTP or gRPC): the one input of the door's verdict (`DoorPolicy.decide`). Built cheaply from what
/// each carrier already read; nothing in it is Hummingbird's.
struct DoorRequest: Sendable {
    /// The request as the rules see it: host, method, the normalized path, whether it is a CORS preflight. For a
    /// forward-auth check, what a trusted proxy says of the original request (nil parts when it says nothing).
    var asked: AccessRequest
    /// The method as the site got it (a check's is the original request's, when a trusted proxy says it).
    var method: String
    /// The original request's header fields (a check's: those the proxy passed on), read for who asks and how to
    /// answer: the cookie, `Authorization`, `Accept`, `Sec-Fetch-Mode`, the script markers.
    var fields: HTTPFields
    /// The bearer token the request presents (`BearerCredential.read`, from every `Authorization` field and the
    /// original query).
    var credential: BearerCredential
    /// The client's address, for the audit trail and the store's share-out of look-ups.
    var clientAddress: String
    /// The absolute URL to come back to after signing in, when the door knows it.
    var original: String?
    /// A check's own narrowing of the rules (`/auth/check?group=…`).
    var narrowing: [AccessPolicy] = []

    /// A browser's navigation to a page (sent to sign in), rather than a script's or an app's request (answered 401).
    var isNavigation: Bool { fields.isPageNavigation(method: method) }
}

extension HTTPFields {
    /// A browser's navigation (`method` as the site got it): `GET` or `HEAD` accepting HTML, not made by a script.
    func isPageNavigation(method: String) -> Bool {
        // Each `Accept` field read in place: the joined value a look-up by name builds was a twentieth of a refusal.
        (method == "GET" || method == "HEAD") && contains { $0.name == .accept && $0.value.containsBytes("text/html") } && !isScripted
    }

    /// A request a script or an app makes, not a person's navigation, though it may accept HTML: it presents a bearer
    /// token; a browser says it is not navigating (`Sec-Fetch-Mode` other than `navigate`); or a library marks it
    /// as its own (`scriptMarkers`). It is answered with a status and problem details, never sent to sign in.
    var isScripted: Bool {
        // One pass over the fields (a look-up by name is a pass of its own, and there are eight names to look for).
        // `Sec-Fetch-Mode` as its joined value reads: its first field says the mode.
        var authorizations: [String] = []
        var modeSeen = false
        for field in self {
            if field.name == .authorization {
                authorizations.append(field.value)
            } else if field.name == HTTPField.Name.secFetchMode {
                if !modeSeen, !Self.startsNavigate(Substring(field.value).trimmingBlanks) { return true }
                modeSeen = true
            } else if HTTPField.Name.scriptMarkers.contains(field.name) {
                return true
            }
        }
        return !authorizations.isEmpty && BearerCredential.read(authorization: authorizations, query: nil).isPresented
    }

    /// A CORS preflight: `OPTIONS` (`method`, as the site got it) with `Origin` and `Access-Control-Request-Method`.
    func isCORSPreflight(method: String) -> Bool {
        guard method.uppercased() == "OPTIONS", self[.origin] != nil else { return false }
        return HTTPField.Name.accessControlRequestMethod.map { self[$0] != nil } ?? false
    }

    /// Whether the client asked for JSON (then failures are RFC 9457 problem details).
    var acceptsJSON: Bool {
        contains { $0.name == .accept && ($0.value.containsBytes("application/json") || $0.value.containsBytes("application/problem+json")) }
    }

    /// Whether a `Sec-Fetch-Mode` value (trimmed) begins with `navigate`, in any case.
    private static func startsNavigate(_ mode: Substring) -> Bool {
        let word = "navigate".utf8
        guard mode.utf8.count >= word.count else { return false }
        return zip(mode.utf8, word).allSatisfy { ($0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") ? $0 | 0x20 : $0) == $1 }
    }
}

extension HTTPField.Name {
    static let secFetchMode = HTTPField.Name("Sec-Fetch-Mode")

    /// The fields script libraries add to the requests they make (the page stays where it is and reads the answer):
    /// jQuery, Angular 1 and Prototype (`X-Requested-With`), htmx (`HX-Request`), Inertia (`X-Inertia`), Unpoly
    /// (`X-Up-Version`), Hotwire Turbo frames (`Turbo-Frame`), pjax (`X-PJAX`).
    static let scriptMarkers: [HTTPField.Name] = ["X-Requested-With", "HX-Request", "X-Inertia", "X-Up-Version", "Turbo-Frame", "X-PJAX"]
        .compactMap { HTTPField.Name($0) }
}
