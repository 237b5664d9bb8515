/// An endpoint of the emulator that faults can be injected into.
public enum EmulatorEndpoint: String, Codable, Sendable, Hashable, CaseIterable {
    /// `GET /auth/authorize`.
    case authorize
    /// `POST /auth/token`.
    case token
    /// `GET /auth/keys`.
    case keys
    /// `POST /auth/revoke`.
    case revoke
}

/// A fault to inject into one endpoint (admin API `POST /emulator/admin/faults`).
public struct EmulatorFault: Codable, Sendable, Hashable {
    /// Delay before answering, in milliseconds.
    public var latencyMS: Int?
    /// Answer with this HTTP status (e.g. 500, 503) instead of the real answer.
    public var status: Int?
    /// Close the connection without answering.
    public var drop: Bool?
    /// Answer 200 with a body that is not JSON.
    public var malformed: Bool?
    /// Apply to a fraction of calls only (0…1); all calls when nil.
    public var probability: Double?
    /// Apply to this many calls, then clear; forever when nil.
    public var remaining: Int?

    enum CodingKeys: String, CodingKey {
        case latencyMS = "latency_ms", status, drop, malformed, probability, remaining
    }

    /// Creates a fault.
    public init(latencyMS: Int? = nil, status: Int? = nil, drop: Bool? = nil, malformed: Bool? = nil, probability: Double? = nil, remaining: Int? = nil) {
        self.latencyMS = latencyMS
        self.status = status
        self.drop = drop
        self.malformed = malformed
        self.probability = probability
        self.remaining = remaining
    }
}
