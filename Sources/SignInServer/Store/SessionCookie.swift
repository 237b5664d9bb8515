/// How a session cookie's value names its session in the store: by its SHA-256, never by the value itself.
enum SessionCookie {
    /// The SHA-256 of a session cookie's value; nil for an empty one.
    static func hash(_ value: String) -> String? {
        value.isEmpty ? nil : SignInFlow.hash(value)
    }
}
