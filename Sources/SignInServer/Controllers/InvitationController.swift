import AppleSignIn
import Foundation
import Hummingbird
import JOSE
import Logging
import Synchronization

/// An invitation's pages (issue 47, part A). The link `/auth/invite/<token>` shows who invites to what (the note,
/// the groups, until when) with the Sign in with Apple button, whose sign-in carries the invitation: once Apple says
/// who the person is, they join its groups (`SignInCompletion`), whether or not Apple shows siwa their email. A
/// person already signed in accepts with one press (a POST with their session's CSRF token). After either, the
/// page `/auth/invite?id=…` says what happened. A used, expired, revoked or unknown link shows a page that says
/// so and changes nothing.
struct InvitationController: Sendable {
    let invitations: Invitations
    let store: any SignInStore
    let renderer: PageRenderer
    let proxy: ClientAddressResolver
    /// Where a person goes on from an invitation used: the site's home page in front of an upstream, else siwa's
    /// session page.
    let home: String
    /// The invitations of links opened lately (`Invitations.pages`): a link passed round a team is read from the store
    /// once every `InvitationPages.ttl`.
    var recent: InvitationPages { invitations.pages }

    func addRoutes(to sessions: RouterGroup<ServerContext>) {
        sessions.get(RouterPath(DoorRoutes.Page.invitationRoute), use: show)
        sessions.post(RouterPath(DoorRoutes.Page.invitationRoute), use: accept)
        sessions.get("/auth/invite", use: result)
    }

    /// What a page shows of the person signed in, if anyone.
    private func signedIn(_ context: ServerContext) -> (session: SessionRecord, user: UserRecord)? {
        if case .signedIn(let session, let user) = context.visitor { return (session, user) }
        return nil
    }

    /// `GET /auth/invite/<token>`.
    @Sendable func show(_ request: Request, context: ServerContext) async throws -> Response {
        let token = context.parameters.get("token") ?? ""
        let found = try await invitation(token: token)
        let person = signedIn(context)
        if let invitation = found, let person, try await used(invitation, by: person.user) { return page(request, state: .joined(invitation)) }
        return page(request, state: Self.shown(found, token: token, person: person, now: Date()))
    }

    /// The page of `GET /auth/invite/<token>` for a person not signed in, when memory holds what the store said of the
    /// token lately (`recent`); nil when the store is to be asked (the handlers do, and remember it). One function
    /// with `show` (`shown`, `rendered`) for the byte path (`SitePages`).
    func pageFromMemory(token: Substring, language: PageLanguage, now: Date) -> RenderedPage? {
        guard Invitations.isToken(token) else { return rendered(language: language, state: .refused(.unknown, nil)) }
        guard let known = recent.lookup(SignInFlow.hash(String(token)), now: now) else { return nil }
        return rendered(language: language, state: Self.shown(known, token: String(token), person: nil, now: now))
    }

    /// What the link's page shows of `invitation` (nil: none has that token) to `person` (nil: not signed in), who
    /// has not used it: the offer, or why it is closed.
    private static func shown(_ invitation: InvitationRecord?, token: String, person: (session: SessionRecord, user: UserRecord)?, now: Date) -> State {
        guard let invitation else { return .refused(.unknown, nil) }
        if let closed = invitation.closed(at: now) { return .refused(closed, invitation) }
        return .offer(invitation, token: token, person: person)
    }

    /// `POST /auth/invite/<token>`: the person signed in accepts; the page of what happened.
    @Sendable func accept(_ request: Request, context: ServerContext) async throws -> Response {
        let token = context.parameters.get("token") ?? ""
        guard let person = signedIn(context) else {
            // Signed out meanwhile (another tab): the invitation's page again, with its sign-in button.
            return Response.redirect(to: Invitations.linkPath + token, type: .normal)
        }
        var request = request
        let body = (try? await request.collectBody(upTo: 4096)) ?? ByteBuffer()
        let fields = (try? CallbackPayload.parseFields(body.readableBytesView)) ?? [:]
        guard let csrf = fields["csrf_token"], ConstantTime.equals(csrf, person.session.csrfToken) else {
            throw ErrorPage.csrf(retryURL: Invitations.linkPath + token)
        }
        guard Invitations.isToken(token) else { return page(request, state: .refused(.unknown, nil)) }
        let redemption: InvitationRedemption
        do {
            redemption = try await invitations.redeem(tokenHash: SignInFlow.hash(token), for: person.user, ip: proxy.clientAddress(request, context: context))
        } catch {
            throw unavailable(error, retry: Invitations.linkPath + token)
        }
        return Response.redirect(to: Self.resultPath(redemption), type: .normal)
    }

    /// `GET /auth/invite?id=…`: what became of the invitation `id` for the person signed in (`failed`: the store did
    /// not answer when the sign-in tried to use it).
    @Sendable func result(_ request: Request, context: ServerContext) async throws -> Response {
        if request.uri.queryParameters.get("failed") != nil { return page(request, state: .failed) }
        guard let person = signedIn(context), let id = request.uri.queryParameters.get("id").map({ String($0) }), !id.isEmpty else {
            return page(request, state: .refused(.unknown, nil))
        }
        let found: InvitationRecord?
        do {
            found = try await store.invitation(id: id)
        } catch {
            throw unavailable(error, retry: "/auth/invite?id=" + FormEncoding.encode(id))
        }
        guard let invitation = found else { return page(request, state: .refused(.unknown, nil)) }
        if try await used(invitation, by: person.user) { return page(request, state: .joined(invitation)) }
        return page(request, state: .refused(invitation.closed(at: Date()) ?? .unknown, invitation))
    }

    /// Where the browser goes after `redemption`: the page of the invitation's outcome.
    static func resultPath(_ redemption: InvitationRedemption?) -> String {
        switch redemption {
        case .joined(let invitation), .alreadyJoined(let invitation), .refused(_, .some(let invitation)): "/auth/invite?id=" + FormEncoding.encode(invitation.id)
        case .refused(_, .none): "/auth/invite?id="
        case nil: "/auth/invite?failed=1"
        }
    }

    /// The invitation of `token`, without asking the store about what cannot be a token, nor again within `ttl`.
    private func invitation(token: String) async throws -> InvitationRecord? {
        guard Invitations.isToken(token) else { return nil }
        let hash = SignInFlow.hash(token)
        let now = Date()
        if let known = recent.lookup(hash, now: now) { return known }
        do {
            let found = try await store.invitation(tokenHash: hash)
            recent.remember(found, for: hash, now: now)
            return found
        } catch {
            throw unavailable(error, retry: Invitations.linkPath + token)
        }
    }

    private func used(_ invitation: InvitationRecord, by user: UserRecord) async throws -> Bool {
        do {
            return try await store.invitationUsed(id: invitation.id, by: user.subject)
        } catch {
            throw unavailable(error, retry: "/")
        }
    }

    private func unavailable(_ error: any Error, retry: String) -> ErrorPage {
        invitations.logger.error("store unavailable", metadata: ["error": "\(String(describing: type(of: error)))"])
        return ErrorPage.storeUnavailable(retryURL: retry)
    }

    /// What an invitation's page shows.
    enum State {
        case offer(InvitationRecord, token: String, person: (session: SessionRecord, user: UserRecord)?)
        case joined(InvitationRecord)
        case refused(InvitationRefusal, InvitationRecord?)
        /// The store did not answer when the sign-in tried to use it.
        case failed
    }

    /// The page of `state`: a shape per state, language and which values are present, rendered once and cached
    /// (`PageRenderer.page`); only the invitation's and the person's values are filled in per request.
    private func page(_ request: Request, state: State) -> Response {
        rendered(language: request.pageLanguage, state: state).response
    }

    /// The page of `state` in `language`, as its head and body.
    private func rendered(language: PageLanguage, state: State) -> RenderedPage {
        let dates = DateFormatters.shared
        func described(_ invitation: InvitationRecord) -> [String: String] {
            [
                "groups": invitation.groups.joined(separator: ", "), "expires": dates.display(invitation.expiresAt, language) + " UTC",
                "expiresISO": dates.isoString(invitation.expiresAt), "note": invitation.note ?? "",
            ]
        }
        var fixed: [String: Bool] = [:]
        var fixedText: [String: String] = [:]
        var slots: [String: String] = [:]
        let heading: String
        var status = HTTPResponse.Status.ok
        switch state {
        case .offer(let invitation, let token, let person):
            heading = "inviteHeading"
            fixed["offer"] = true
            slots = described(invitation)
            if let person {
                slots["who"] = ConsoleController.label(person.user)
                slots["csrfToken"] = person.session.csrfToken
                slots["acceptURL"] = Invitations.linkPath + token
            } else {
                slots["startURL"] = "/auth/apple?invite=" + token
            }
        case .joined(let invitation):
            heading = "inviteJoinedHeading"
            fixed["joined"] = true
            slots["groups"] = described(invitation)["groups"]
            fixedText["home"] = home
        case .refused(let why, _):
            heading = "inviteRefused.\(why.rawValue)"
            status = why == .unknown ? .notFound : .gone
            fixedText["message"] = renderer.string("inviteRefused.\(why.rawValue).message", language)
        case .failed:
            heading = "inviteFailedHeading"
            status = .serviceUnavailable
            fixedText["message"] = renderer.string("inviteFailedMessage", language)
        }
        let title = renderer.string(heading, language)
        fixedText["heading"] = title
        return renderer.rendered("invite", title: title, language: language, fixed: fixed, fixedText: fixedText, slots: slots, status: status)
    }
}
