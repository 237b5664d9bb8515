import Foundation

/// The `user` JSON Apple sends on the first authorization only: `{"name":{"firstName","lastName"},"email"}`.
/// Parsed tolerantly: unknown keys (e.g. `middleName`) ignored, names missing or empty become nil.
public struct AppleUser: Sendable, Hashable, Codable {
    /// Given name, if shared and non-empty.
    public var firstName: String?
    /// Family name, if shared and non-empty.
    public var lastName: String?
    /// The email shared (real or relay), if any.
    public var email: String?

    /// Creates a user record.
    public init(firstName: String? = nil, lastName: String? = nil, email: String? = nil) {
        self.firstName = firstName
        self.lastName = lastName
        self.email = email
    }

    /// "First Last", or whichever part exists; nil when neither does.
    public var displayName: String? {
        let parts = [firstName, lastName].compactMap { $0 }
        return parts.isEmpty ? nil : parts.joined(separator: " ")
    }

    /// The `user` JSON as Apple sends it (`{"name":{"firstName":…,"lastName":…},"email":…}`), e.g. to send a
    /// return again; `parse(json:)` reads it back to the same value.
    public var wireJSON: String {
        var name: [String: String] = [:]
        if let firstName { name["firstName"] = firstName }
        if let lastName { name["lastName"] = lastName }
        var object: [String: Any] = ["name": name]
        if let email { object["email"] = email }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    private struct Wire: Decodable {
        struct Name: Decodable {
            var firstName: String?
            var lastName: String?
        }
        var name: Name?
        var email: String?
    }

    /// Parses Apple's `user` field.
    public static func parse(json: String) throws(CallbackError) -> AppleUser {
        let wire: Wire
        do {
            wire = try JSONDecoder().decode(Wire.self, from: Data(json.utf8))
        } catch {
            throw CallbackError(reason: .malformedUser, field: "user", message: "the user field is not the JSON object Apple sends ({\"name\":{…},\"email\":…})")
        }
        return AppleUser(
            firstName: nonEmpty(wire.name?.firstName),
            lastName: nonEmpty(wire.name?.lastName),
            email: nonEmpty(wire.email)
        )
    }

    private static func nonEmpty(_ text: String?) -> String? {
        guard let trimmed = text?.trimmingCharacters(in: .whitespacesAndNewlines), !trimmed.isEmpty else { return nil }
        return trimmed
    }
}
