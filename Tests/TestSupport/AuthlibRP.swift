import Foundation

/// The Authlib relying party a test started (Tests/EndToEndTests/ThirdParty/authlib_rp.py): where it listens,
/// the URLs to register for it at the provider, and its pages.
public struct RunningAuthlibRP: Sendable {
    /// The Flask server itself: port, directory, output.
    public let server: RunningProxy
    /// The client id it presents to the provider.
    public let clientID: String

    /// `http://127.0.0.1:PORT`.
    public var origin: String { server.origin }
    /// Its port.
    public var port: Int { server.port }
    /// The absolute URL of `path` (with its query) on the relying party.
    public func url(_ path: String) -> String { server.url(path) }
    /// The redirect URI to register for this client at the provider.
    public var redirectURI: String { server.url("/callback") }
    /// The post-logout redirect URI to register for this client at the provider.
    public var postLogoutRedirectURI: String { server.url("/logged-out") }
    /// The start page: "Not signed in" and a link `#sign-in`, or "Signed in as NAME" with the id_token's and
    /// userinfo's claims (`#id_token-sub`, `#id_token-email`, `#id_token-name`, `#userinfo-name`, …) and a
    /// link `#sign-out`.
    public var startURL: String { server.url("/") }
    /// Where a sign-in starts; `prompt`, `max_age` and `login_hint` given here are passed on to the provider.
    public func loginURL(prompt: String? = nil, maxAge: Int? = nil, loginHint: String? = nil) -> String {
        var components = URLComponents(string: server.url("/login"))
        let items = [("prompt", prompt), ("max_age", maxAge.map(String.init)), ("login_hint", loginHint)]
            .compactMap { name, value in value.map { URLQueryItem(name: name, value: $0) } }
        components?.queryItems = items.isEmpty ? nil : items
        return components?.string ?? server.url("/login")
    }
    /// The signed-in state as JSON (needs the browser's cookie): `{"signed_in", "id_token": {claims},
    /// "userinfo": {claims}, "error": {"error", "error_description"}}`.
    public var claimsURL: String { server.url("/claims") }
    /// The refresh_token grant and a userinfo call with the new access token, as JSON: `{"refreshed", "rotated",
    /// "userinfo"}`, or `{"refreshed": false, "error", "error_description"}` with status 400.
    public var refreshURL: String { server.url("/refresh") }
    /// RP-initiated logout: to the provider's `end_session_endpoint` with `id_token_hint`,
    /// `post_logout_redirect_uri` and `state`; back on `/logged-out` the state is checked ("Signed out").
    public var logoutURL: String { server.url("/logout") }

    /// Everything it printed so far (Flask's request log, Python tracebacks), to attach to a failure.
    public func logs() -> String { server.logs() }
}

/// Runs Authlib's OpenID Connect client as a Flask web application (ThirdParty/authlib_rp.py, with the interpreter
/// of `$SIWA_TEST_PYTHON`) on a free loopback port while `body` runs; then stops it by its pid.
///
/// It knows the provider by its discovery document only (`<provider>/.well-known/openid-configuration`, read at the
/// first sign-in, so the provider may start within `body`), signs in with the code flow, PKCE S256 and a nonce,
/// authenticates at the token endpoint as `authentication` says (`clientSecret` is unused for `.publicClient`),
/// validates the id_token (signature by `jwks_uri`, `iss` equal to the discovery's `issuer`, `aud`, `exp`, `nonce`,
/// `at_hash`, an algorithm of `id_token_signing_alg_values_supported`) and calls userinfo. Register the client at
/// the provider with `rp.redirectURI` and `rp.postLogoutRedirectURI`:
///
/// ```swift
/// try await withAuthlibRP(provider: siwa, clientID: "authlib", clientSecret: secret) { rp in
///     // In Chromium: open rp.loginURL() → Apple (emulator) → rp.startURL says "Signed in as Grace Hopper";
///     // then rp.logoutURL → siwa's end-session → "Signed out".
/// }
/// ```
/// A start that fails throws an error carrying its output (an ImportError names the package scripts/test installs).
public func withAuthlibRP<T>(
    provider: String,
    clientID: String,
    clientSecret: String?,
    authentication: OIDCClientAuthentication = .clientSecretBasic,
    scope: String = "openid email profile",
    _ body: (RunningAuthlibRP) async throws -> T
) async throws -> T {
    let provider = provider.hasSuffix("/") ? String(provider.dropLast()) : provider
    return try await ProxyHarness.run(.authlibPython, { _, port in
        ProxyLaunch(
            files: [:],
            arguments: [ExternalTool.thirdPartyScripts.appendingPathComponent("authlib_rp.py").path],
            environment: [
                "PORT": String(port),
                "DISCOVERY_URL": provider + "/.well-known/openid-configuration",
                "CLIENT_ID": clientID,
                "CLIENT_SECRET": authentication == .publicClient ? "" : (clientSecret ?? ""),
                "TOKEN_ENDPOINT_AUTH_METHOD": authentication.rawValue,
                "SCOPE": scope,
                "PYTHONUNBUFFERED": "1",
            ],
            logFiles: []
        )
    }, ready: { rp in
        (try? await HTTPProbe.status(rp.url("/"))) == 200
    }) { rp in
        try await body(RunningAuthlibRP(server: rp, clientID: clientID))
    }
}

extension ExternalTool {
    /// The Python of the package's `.build-venv`, with Authlib and Flask (scripts/test makes it and exports
    /// `SIWA_TEST_PYTHON`).
    public static let authlibPython = ExternalTool(
        name: "python", environmentVariable: "SIWA_TEST_PYTHON", installedBy: "scripts/test's .build-venv with authlib and flask",
        fallbacks: [packageDirectory.appendingPathComponent(".build-venv/bin/python")]
    )

    /// Tests/EndToEndTests/ThirdParty: the third-party clients' scripts.
    public static let thirdPartyScripts = packageDirectory.appendingPathComponent("Tests/EndToEndTests/ThirdParty", isDirectory: true)
}
