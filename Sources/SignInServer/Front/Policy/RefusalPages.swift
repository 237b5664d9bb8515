import Foundation
import HTTPTypes
import Hummingbird
import JOSE

extension FrontSettings {
    /// The 302 to the sign-in, coming back to `original` (an absolute URL) when it is an allowed `rd`.
    func signInRedirect(returningTo original: String?) -> RenderedPage {
        RenderedPage(status: .found, headers: [.location: signInURL(returningTo: original), .cacheControl: "no-store"], body: ByteBuffer())
    }

    /// Where a sign-in with Apple starts that comes back to `original` (an absolute URL) when it is known.
    func signInURL(returningTo original: String?) -> String {
        publicOrigin + "/auth/apple" + (original.map { "?rd=" + FormEncoding.encode($0) } ?? "")
    }
}

extension PageRenderer {
    /// The 403 page of a person the policy does not let in: whom they are signed in as, and how to sign out; with
    /// no one signed in (a `deny` rule), the page that says the address is closed. `assetOrigin`: where its
    /// stylesheets are linked, when it is shown on another host than siwa's.
    /// The page says that access comes by invitation, and whom to ask (`contact`, `invitation_contact`) when given.
    func denied(_ user: UserRecord?, signOutURL: String, language: PageLanguage, assetOrigin: String = "", contact: String? = nil) -> RenderedPage {
        guard let user else { return rendered(.closed, language: language) }
        return rendered(
            "denied", title: string("deniedHeading", language), language: language, fixedText: assetOrigin.isEmpty ? [:] : ["assetOrigin": assetOrigin],
            slots: [
                "who": user.displayName.map { "\($0) (\(user.email ?? user.subject))" } ?? user.email ?? user.subject, "signOutURL": signOutURL,
                "contact": contact ?? "",
            ],
            status: .forbidden
        )
    }

    /// `page` as RFC 9457 problem details, in English (for clients that asked for JSON).
    func problem(_ page: ErrorPage) -> RenderedPage {
        RenderedPage.problem(page.status, page.key, string("error.\(page.key).heading", .english), string("error.\(page.key).message", .english))
    }
}
