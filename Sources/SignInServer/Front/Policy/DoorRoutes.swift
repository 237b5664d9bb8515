import Foundation
import HTTPTypes

/// The table of what siwa answers from memory as well as through its router: the checks and the two most-viewed
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
    enum Page {
        case signIn, session

        /// The paths of each page, as the router registers them.
        var paths: [String] {
            switch self {
            case .signIn: ["/"]
            case .session: ["/session", "/auth/session"]
            }
        }

        /// The page a target names exactly, as the router routes it; nil for any other target (a query too).
        init?(target: String) {
            if Page.signIn.paths.contains(target) {
                self = .signIn
            } else if Page.session.paths.contains(target) {
                self = .session
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
