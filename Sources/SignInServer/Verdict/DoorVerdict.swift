import Foundation
import HTTPTypes

/// The door's verdict on one request (`DoorVerdicts.decide`), the same whatever door asked: every door only renders
/// it, as a forwarded request or a page (`--upstream`), a status with identity headers (`/auth/check`,
/// `/auth/forward`, Envoy's `ext_authz` over HTTP), or a `CheckResponse` (Envoy's `ext_authz` over gRPC).
enum DoorVerdict: Sendable {
    /// Let through, with `Admission`'s identity (none on a `public` rule).
    case allow(Admission)
    /// No person, and the rule needs one. A browser's navigation (`navigation`) is sent to sign in and comes back to
    /// `returnTo`; anything else is told 401 with a challenge.
    case signIn(navigation: Bool, returnTo: String?)
    /// A bearer token siwa does not take: 400 `invalid_request` (presented where the door never takes one, or
    /// malformed) or 401 `invalid_token`, with its challenge (RFC 6750 §3).
    case badToken(BearerProblem)
    /// Turned away by the rules (403): `user` is who is signed in (nil: no one, on a `deny` rule). `bearer`: a token
    /// came, so the challenge says `insufficient_scope`; `scripted`: a script or an app asks (problem details, not a
    /// page).
    case deny(UserRecord?, bearer: Bool, scripted: Bool)
    /// The store did not answer; `retryURL` is the page to try again.
    case unavailable(retryURL: String)
    /// The rule lets the person in, but only with an authentication with Apple at most `maxAge` seconds old, and
    /// theirs is older (`max_auth_age`). A browser's navigation gets a page that says so and sends it to Apple again,
    /// back to `returnTo`; anything else 401 `insufficient_user_authentication` with `max_age` (RFC 9470).
    case stepUp(navigation: Bool, returnTo: String?, maxAge: Int)

    /// The status every door answers a refusal with (nil: let through). A check (nginx's `auth_request`) says 401 for
    /// every bearer problem and its own statuses for the rest (`DoorPolicy.checkStatus`).
    var status: HTTPResponse.Status? {
        switch self {
        case .allow: nil
        case .signIn(let navigation, _): navigation ? .found : .unauthorized
        case .badToken(let problem): problem.code == .invalidRequest ? .badRequest : .unauthorized
        case .deny: .forbidden
        case .unavailable: .serviceUnavailable
        case .stepUp: .unauthorized
        }
    }

    /// The `WWW-Authenticate` of a refusal (RFC 6750 §3): every 401, and a 403 to a bearer token.
    var challenge: String? {
        switch self {
        case .allow, .unavailable, .deny(_, bearer: false, _), .signIn(navigation: true, _): nil
        case .signIn: Self.challenge(error: nil)
        case .badToken(let problem): Self.challenge(error: problem)
        case .deny(_, bearer: true, _):
            "Bearer realm=\"\(Self.realm)\", error=\"insufficient_scope\", error_description=\"the access rules do not let this token's person or client through here\""
        case .stepUp(_, _, let maxAge):
            // RFC 9470 §3: the error, and the largest age of an authentication the resource takes.
            "Bearer realm=\"\(Self.realm)\", error=\"insufficient_user_authentication\", error_description=\"a more recent sign-in with Apple is required\", max_age=\(maxAge)"
        }
    }

    /// The realm every challenge of the door names.
    static let realm = "siwa"

    /// `Bearer realm="siwa"`, with the error of `problem` when a token was refused.
    static func challenge(error problem: BearerProblem?) -> String {
        var challenge = "Bearer realm=\"\(realm)\""
        if let problem { challenge += ", error=\"\(problem.code.rawValue)\", error_description=\"\(problem.description)\"" }
        return challenge
    }

    /// The verdict's kind in one word, for logs, metrics and the tests that hold the doors to one verdict.
    var kind: String {
        switch self {
        // Matched, not compared with nil: `== nil` on an optional person went through the run time's generic witnesses.
        case .allow(let admission):
            if case .some = admission.person { "allow" } else { "pass" }
        case .signIn(let navigation, _): navigation ? "sign-in" : "unauthorized"
        case .badToken: "bad-token"
        case .deny: "deny"
        case .unavailable: "unavailable"
        case .stepUp: "step-up"
        }
    }
}

/// Who a request is let through as, and what goes on with it.
struct Admission: Sendable {
    /// A person let in: their groups now, and the client holding the bearer token that let them in (nil for a
    /// browser's cookie).
    struct Person: Sendable, Equatable {
        let user: UserRecord
        let groups: [String]
        let client: String?
        /// When the person last authenticated with Apple for the session or token that let them in
        /// (`SessionRecord.authenticatedAt`): the identity headers and the assertion say it.
        var authenticatedAt: Date? = nil
    }

    /// Nil on a `public` rule: no identity goes on.
    let person: Person?
    /// The `Authorization` the upstream gets: the request's own, unless a bearer token let the person in and its
    /// rule does not pass it (`pass_authorization`), when the identity headers and the assertion stand for it (nil).
    let authorization: String?
    /// Whether the request carried `Authorization` that does not go on (the doors that cannot drop it themselves
    /// name it among the fields to remove).
    let dropsAuthorization: Bool

    /// The identity header fields of the person, with `assertion` (addressed to the door's audience) when signed.
    func identityFields(assertion: String?) -> [HTTPField] {
        guard let person else { return [] }
        return IdentityHeaders.fields(for: person, assertion: assertion)
    }

    /// The field names the upstream must not get from the client, for a door that cannot strip them itself (Envoy's
    /// `headers_to_remove`): every identity name siwa owns that `given` does not set, each identity claim the client
    /// made under another name (`IdentityHeaders.claimsIdentity`, as it spelled it), and `Authorization` when it does
    /// not go on.
    func removedNames(given: [HTTPField], from fields: HTTPFields) -> [String] {
        removedNames(given: given, claimed: fields.lazy.map(\.name.rawName))
    }

    /// The same, for the names of the fields the client sent, `sent`, as it spelled them (the byte path's reading).
    func removedNames(given: [HTTPField], claimed sent: some Sequence<String>) -> [String] {
        // `given` holds a handful of fields: looked through, not hashed into a set (4,600 instructions a check).
        func isGiven(_ name: HTTPField.Name) -> Bool { given.contains { $0.name == name } }
        var removed: [String] = []
        removed.reserveCapacity(IdentityHeaders.all.count + 1)
        for name in IdentityHeaders.all where !isGiven(name) { removed.append(name.canonicalName) }
        for raw in sent where IdentityHeaders.claimsIdentity(raw) {
            guard let name = HTTPField.Name(raw), !isGiven(name), !removed.contains(name.canonicalName) else { continue }
            removed.append(name.canonicalName)
        }
        if dropsAuthorization { removed.append("authorization") }
        return removed
    }
}
