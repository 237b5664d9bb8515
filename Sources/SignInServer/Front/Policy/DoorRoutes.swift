import Foundation
import HTTPTypes
import JOSE

/// The table of what siwa answers from memory as well as through its router: the checks and the most-viewed
/// pages. The router registers these paths from here (`ForwardAuthController`, `SignInController`,
/// `SessionController`) and the byte path (`RawFrontPath`) reads the same table, so a new endpoint is one change.
enum DoorRoutes {
    /// The forward-auth checks: nginx's `auth_request` asks `/auth/check` (202 when let through), Traefik's and
    /// Caddy's forward auth `/auth/forward` (200).
    enum Check: CaseIterable {
        case check, forward

        /// The path the router and the byte path answer.
        var path: String {
            switch self {
            case .check: "/auth/check"
            case .forward: "/auth/forward"
            }
        }

        /// The status of a request let through.
        var passStatus: HTTPResponse.Status {
            switch self {
            case .check: .accepted
            case .forward: .ok
            }
        }

        /// The check `path` (up to the query) names, if any.
        init?(path: String) {
            guard let found = Self.allCases.first(where: { $0.path == path }) else { return nil }
            self = found
        }
    }

    /// siwa's pages the byte path may answer from memory.
    enum Page: Equatable {
        case signIn, session
        /// An invitation's link (`/auth/invite/<token>`), with the token as the target carries it.
        case invitation(token: Substring)

        /// The paths of the sign-in and session pages, as the router registers them.
        static let signInPaths = ["/"]
        static let sessionPaths = ["/session", "/auth/session"]
        /// The path before an invitation's token, and the route the router registers for it.
        static let invitationPrefix = Invitations.linkPath
        static let invitationRoute = "/auth/invite/:token"

        /// The page a target names exactly, as the router routes it; nil for any other target (a query too). An
        /// invitation's token is one path segment of base64url's characters (what `RandomToken` draws); any other
        /// (a percent sign, a second segment, a query) is the router's to read.
        init?(target: String) {
            if Page.signInPaths.contains(target) {
                self = .signIn
            } else if Page.sessionPaths.contains(target) {
                self = .session
            } else if target.utf8.starts(with: Page.invitationPrefix.utf8) {
                let token = target.dropFirst(Page.invitationPrefix.count)
                guard !token.isEmpty, token.utf8.allSatisfy(Base64URL.isAlphabet) else { return nil }
                self = .invitation(token: token)
            } else {
                return nil
            }
        }
    }
}

/// siwa's own pages as the byte path may answer them from memory, given by the controllers (`SitePages`): the door
/// says what it asks for, and never names a controller.
protocol PagesFromMemory: Sendable {
    /// The page at `target` for a `GET` whose session cookie hashes to `sessionHash`, with its one `Cookie` and
    /// `Accept-Language` fields, when memory decides who asks; nil when the handlers answer.
    func fromMemory(target: String, sessionHash: String?, cookie: String?, acceptLanguage: String?, now: Date) -> RenderedPage?
}
