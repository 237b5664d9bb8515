/// Apple's answer from `/auth/token`.
public struct TokenResponse: Sendable, Hashable, Codable {
    /// Access token (Apple's are not used for anything else but revocation).
    public var accessToken: String
    /// `bearer`.
    public var tokenType: String
    /// Seconds the access token is valid.
    public var expiresIn: Int
    /// Present on the authorization-code grant only.
    public var refreshToken: String?
    /// The identity token; verify it before use.
    public var idToken: String?

    enum CodingKeys: String, CodingKey {
        case accessToken = "access_token", tokenType = "token_type", expiresIn = "expires_in", refreshToken = "refresh_token", idToken = "id_token"
    }
}
