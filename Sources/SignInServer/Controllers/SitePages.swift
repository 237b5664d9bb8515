import Foundation
import HTTPTypes
import NIOCore

/// siwa's most-viewed pages, the sign-in page (`/`), the session page (`/session`, `/auth/session`) and an
/// invitation's link (`/auth/invite/<token>`), for a visitor whom memory decides. The byte path (`RawFrontPath`)
/// answers them below NIO's codecs and Hummingbird's task per request, which were most of a page's cost in profiles
/// (issue 26), with the controllers' own functions (`SignInController.signInPage`, `SessionController.sessionPage`,
/// `InvitationController.pageFromMemory`, which the routes call too), the session cache the `SessionMiddleware`
/// reads, and the headers the middleware and Hummingbird add. Everything else is the handlers': a target with a
/// query, a session cookie not in memory, two `Accept-Language` fields, HTTP/1.0, `HEAD`, an invitation not read
/// lately or opened by a person signed in (whether they joined is the store's to say). In front of an upstream, `/`
/// and `/session` are the upstream's (`siteAtRoot` false).
struct SitePages: PagesFromMemory {
    let signIn: SignInController
    let session: SessionController
    let invitation: InvitationController
    let store: any UsersAndSessions
    let cookies: CookiePolicy
    /// Whether `/` and `/session` are siwa's (no upstream behind it).
    let siteAtRoot: Bool

    /// The page at `target` for a `GET` whose session cookie hashes to `sessionHash` (nil without one, or with an
    /// empty one: `SessionCookie.hash`, as `SessionMiddleware` reads it) with `cookie` (its one `Cookie`
    /// field) and `acceptLanguage` (its one `Accept-Language` field), when memory decides who asks: nobody, or a
    /// session this instance holds. Nil when the handlers answer: another target, a session cookie memory does not
    /// know (the store decides), the session page without a session (the handlers' "not signed in" page).
    func fromMemory(target: String, sessionHash: String?, cookie: String?, acceptLanguage: String?, now: Date) -> RenderedPage? {
        guard let page = DoorRoutes.Page(target: target) else { return nil }
        // In front of an upstream only the pages below `/auth` are siwa's.
        if !siteAtRoot, page == .signIn || target == "/session" { return nil }
        let found = sessionHash.flatMap { store.cachedSession(idHash: $0, now: now) }
        if sessionHash != nil, found == nil { return nil }
        let language = PageLanguage.negotiate(acceptLanguage)
        switch page {
        case .signIn:
            var fields = HTTPFields()
            if let cookie { fields.append(HTTPField(name: .cookie, lenientValue: Array(cookie.utf8))) }
            return signIn.signInPage(language: language, signedIn: found != nil, returnTo: nil, csrfCookie: fields.cookieValue(cookies.csrfName))
        case .session:
            guard let (session, user) = found else { return nil }
            return self.session.sessionPage(language: language, session: session, user: user)
        case .invitation(let token):
            // A person signed in is shown whether they joined already: the store's to say.
            guard sessionHash == nil else { return nil }
            return invitation.pageFromMemory(token: token, language: language, now: now)
        }
    }
}
