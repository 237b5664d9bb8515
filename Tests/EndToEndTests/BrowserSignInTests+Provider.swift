import Foundation
import NIOCore
import TestSupport
import Testing

/// siwa as the OpenID Provider of real relying parties the tests start: Apache httpd with Debian's
/// mod_auth_openidc and Authlib's OpenID Connect client, both configured from siwa's discovery document alone,
/// signing in through Apple (the emulator) in real Chromium (the browser of the browser suite, shared).
extension BrowserSignInTests {
    @Test("mod_auth_openidc and Authlib: sign-in through Apple, the name on the first sign-in and on a later one, one siwa session for both apps, refresh rotation, logout through end-session")
    func apacheAndAuthlib() async throws {
        let e2e = try EndToEnd.current()
        let browser = e2e.browser
        try await e2e.startClean()
        // A site of its own, so every emulator user is new to it: Apple sends the name on this first sign-in only.
        let siwaPort = try await FreePorts.reserve(1)[0]
        let siwa = "http://127.0.0.1:\(siwaPort)"
        let apacheSecret = "apache secret/with:odd+characters"
        let authlibSecret = "authlib-" + UUID().uuidString
        try await withApacheOIDC(provider: siwa, clientID: "apache", clientSecret: apacheSecret) { apache in
            try await withAuthlibRP(provider: siwa, clientID: "authlib", clientSecret: authlibSecret, authentication: .clientSecretPost) { rp in
                let clients: [[String: Any]] = [
                    ["client_id": "apache", "client_secret": apacheSecret, "redirect_uris": [apache.redirectURI], "post_logout_redirect_uris": [apache.loggedOutURL], "iss_in_errors": false],
                    ["client_id": "authlib", "client_secret": authlibSecret, "redirect_uris": [rp.redirectURI], "post_logout_redirect_uris": [rp.postLogoutRedirectURI]],
                ]
                let json = String(decoding: try JSONSerialization.data(withJSONObject: clients), as: UTF8.self)
                try await LocalSite.run(settings: ["port": String(siwaPort), "oidc_clients": json]) { site in
                    let ada = site.user("Ada")
                    func consent() async throws {
                        try await browser.waitForPage(site.emulatorOrigin + "/auth/authorize")
                        try await browser.element("input[name=emulator_user][value=\"\(ada.sub)\"]").click()
                        try await browser.element("#continue").click()
                    }
                    func echoed() async throws -> EchoedRequest {
                        try EchoedRequest(json: ByteBuffer(string: try await browser.element("body").text()))
                    }

                    // Apache: the protected page → siwa → Apple → back, with the claims in the module's headers.
                    try await browser.open(apache.protectedURL)
                    try await consent()
                    try await browser.waitForPage(apache.protectedURL)
                    let first = try await echoed()
                    #expect(first.values("oidc_claim_sub") == [ada.sub], "\(apache.logs())")
                    #expect(first.values("oidc_claim_name") == ["Ada Lovelace"])
                    #expect(first.values("oidc_claim_email") == [ada.email])
                    #expect(first.values("oidc_claim_iss") == [siwa])

                    // Authlib: the same person already has a siwa session, so no trip to Apple.
                    try await browser.open(rp.loginURL())
                    try await browser.waitForPage(rp.startURL)
                    #expect(try await browser.element("#id_token-name").text() == "Ada Lovelace", "\(rp.logs())")
                    #expect(try await browser.element("#userinfo-email").text() == ada.email)
                    try await browser.open(rp.refreshURL)
                    let refreshed = try JSONSerialization.jsonObject(with: Data(try await browser.element("body").text().utf8)) as? [String: Any]
                    #expect(refreshed?["refreshed"] as? Bool == true, "\(String(describing: refreshed))")
                    #expect(refreshed?["rotated"] as? Bool == true)

                    // Apache's logout goes through siwa's end-session endpoint: confirmed, the siwa session ends.
                    try await browser.open(apache.logoutURL(returningTo: apache.loggedOutURL))
                    try await browser.waitUntil("the end-session confirmation") { try await browser.currentURL().hasPrefix(siwa + "/oauth2/end-session") }
                    try await browser.element("#confirm-end-session").click()
                    try await browser.waitUntil("the page after logout") { try await browser.currentURL().hasPrefix(apache.loggedOutURL) }

                    // A later sign-in through Authlib: Apple sends no name now; the app still gets it from siwa.
                    try await browser.open(rp.loginURL())
                    try await consent()
                    try await browser.waitForPage(rp.startURL)
                    #expect(try await browser.element("#id_token-name").text() == "Ada Lovelace")
                    #expect(try await browser.element("#userinfo-name").text() == "Ada Lovelace")

                    // And through Apache again (the module's own session was ended at logout): the name once more.
                    try await browser.open(apache.protectedURL)
                    try await browser.waitForPage(apache.protectedURL)
                    #expect(try await echoed().values("oidc_claim_name") == ["Ada Lovelace"])

                    // Authlib's RP-initiated logout with state, back on its page.
                    try await browser.open(rp.logoutURL)
                    try await browser.element("#confirm-end-session").click()
                    try await browser.waitUntil("Authlib's signed-out page") { try await browser.currentURL().hasPrefix(rp.postLogoutRedirectURI) }
                    #expect(try await browser.element("body").text().contains("Signed out"))
                }
            }
        }
        try await e2e.startClean()
    }
}
