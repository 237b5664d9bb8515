/// Why an identity token (or a notification JWS) was refused. Each check has its own code.
public struct IdentityTokenError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The check that failed.
    public struct Check: Sendable, Hashable, CustomStringConvertible {
        /// A short name of the check, e.g. `signature`, `aud`.
        public let name: String
        /// Not three base64url parts of JSON.
        public static let malformed = Check(name: "format")
        /// `alg` is not RS256 (e.g. `none`, `HS256`).
        public static let algorithm = Check(name: "alg")
        /// No `kid` in the header.
        public static let keyIDMissing = Check(name: "kid")
        /// No key in Apple's key set has this `kid`, even after a refetch.
        public static let unknownKey = Check(name: "kid_unknown")
        /// Apple's key set could not be loaded and none is cached.
        public static let keySetUnavailable = Check(name: "key_set")
        /// The signature does not verify.
        public static let signature = Check(name: "signature")
        /// `iss` is not an accepted issuer.
        public static let issuer = Check(name: "iss")
        /// `aud` is not (only) our client ids.
        public static let audience = Check(name: "aud")
        /// `exp` has passed.
        public static let expired = Check(name: "exp")
        /// `iat` is in the future beyond the leeway.
        public static let issuedInFuture = Check(name: "iat")
        /// A nonce was expected and the token carries none.
        public static let nonceMissing = Check(name: "nonce_missing")
        /// The token's nonce is neither the expected nonce nor its SHA-256.
        public static let nonceMismatch = Check(name: "nonce")
        /// `c_hash` does not match the authorization code (or is absent).
        public static let codeHash = Check(name: "c_hash")
        /// A required claim is missing or has the wrong type.
        public static let claims = Check(name: "claims")
        /// The token is larger than any Apple sends.
        public static let tooLarge = Check(name: "size")
        public var description: String { name }
    }

    /// The failed check.
    public let check: Check
    /// A sentence naming the check and the values involved (never a secret).
    public let message: String

    /// Creates an error for `check`.
    public init(_ check: Check, _ message: String) {
        self.check = check
        self.message = message
    }

    public var description: String { "\(check.name) check failed: \(message)" }
}
