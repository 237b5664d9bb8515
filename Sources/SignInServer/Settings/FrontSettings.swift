import Foundation

/// The front's settings: where siwa is reached, where it may send the browser, and who may pass.
public struct FrontSettings: Sendable {
    /// `scheme://host[:port]` of siwa as browsers reach it, without a trailing slash (`public_url`).
    public var publicOrigin: String
    /// `allowed_redirect_domains`.
    public var redirects: RedirectPolicy
    /// The access rules, the global policy and the groups in force (`AccessControl`), shared by every copy of these
    /// settings: SIGHUP and a change of the configuration file replace what it holds for all of them.
    public var access: AccessControl
    /// `invitation_contact`: whom a person refused by a rule may ask for an invitation (an address, a team), named on
    /// the 403 page; nil: the page says only that access comes by invitation.
    public var invitationContact: String? = nil

    /// The global policy (`allowed_emails`, `allowed_email_domains`, `allowed_subs`, `allowed_groups`) in force.
    /// Assigning gives these settings access control of their own, with no rules.
    public var policy: AccessPolicy {
        get { access.configuration.global }
        set { access = AccessControl(AccessConfiguration(global: newValue)) }
    }

    public init(publicOrigin: String, redirects: RedirectPolicy = RedirectPolicy(domains: []), policy: AccessPolicy = AccessPolicy()) {
        self.init(publicOrigin: publicOrigin, redirects: redirects, access: AccessControl(AccessConfiguration(global: policy)))
    }

    public init(publicOrigin: String, redirects: RedirectPolicy = RedirectPolicy(domains: []), access: AccessControl) {
        self.publicOrigin = publicOrigin.hasSuffix("/") ? String(publicOrigin.dropLast()) : publicOrigin
        self.redirects = redirects
        self.access = access
    }
}
