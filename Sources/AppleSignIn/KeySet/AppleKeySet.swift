import AsyncHTTPClient
import CryptoExtras
import Foundation
import Logging
import NIOCore
import Synchronization

/// Apple's identity-token signing keys, cached. Honours `Cache-Control: max-age` (bounded to 1 min…1 day),
/// refetches on an unknown `kid` at most once a minute with one fetch shared by every concurrent caller,
/// and keeps the last good set when a fetch fails.
public final class AppleKeySet: Sendable {
    /// Where keys come from.
    public enum Source: Sendable {
        /// A JWKS over HTTP(S) (Apple's `/auth/keys` or the emulator's).
        case remote(URL, HTTPClient, timeout: TimeAmount)
        /// A fixed set (a file given to the CLI, tests).
        case fixed(JSONWebKeySet)
    }

    /// Bounds and defaults of the cache policy.
    public struct Policy: Sendable {
        /// Lifetime when the response has no usable `max-age`.
        public var defaultMaxAge: TimeInterval = 3600
        /// Smallest lifetime honoured.
        public var minimumMaxAge: TimeInterval = 60
        /// Largest lifetime honoured.
        public var maximumMaxAge: TimeInterval = 86_400
        /// Least time between two fetches caused by unknown `kid`s.
        public var unknownKeyRefetchInterval: TimeInterval = 60
        /// Least time between retries after a failed fetch.
        public var retryAfterFailure: TimeInterval = 5
        /// Largest key set body accepted.
        public var maximumBodySize = 256 * 1024
        /// Creates the default policy.
        public init() {}
    }

    private struct State {
        var keys: [String: _RSA.Signing.PublicKey] = [:]
        var loaded = false
        var expiresAt = Date.distantPast
        var lastAttempt: Date?
        var lastFailed = false
        var fetching = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let source: Source
    private let policy: Policy
    private let logger: Logger
    private let now: @Sendable () -> Date
    private let state = Mutex(State())
    private let fetchCounter = Atomic<Int>(0)

    /// Creates a cache over `source`; nothing is fetched until the first token needs a key.
    public init(source: Source, policy: Policy = Policy(), logger: Logger = Logger(label: "siwa.keyset"), now: @escaping @Sendable () -> Date = Date.init) {
        self.source = source
        self.policy = policy
        self.logger = logger
        self.now = now
        if case .fixed(let set) = source {
            state.withLock {
                $0.keys = set.rsaSigningKeys()
                $0.loaded = true
                $0.expiresAt = .distantFuture
            }
        }
    }

    /// Number of fetches started so far (for metrics and to show the hot path does not fetch).
    public var fetches: Int { fetchCounter.load(ordering: .relaxed) }

    /// True once a key set has been loaded (the readiness probe).
    public var isLoaded: Bool { state.withLock { $0.loaded } }

    /// Loads the set now if it is not loaded (start-up warm-up); failures are logged, not thrown.
    public func warmUp() async {
        guard !isLoaded else { return }
        await refresh()
    }

    /// The key for `kid`, refetching when the cache is stale or the kid is new.
    public func key(for kid: String) async throws(IdentityTokenError) -> _RSA.Signing.PublicKey {
        var waited = false
        while true {
            enum Step { case found(_RSA.Signing.PublicKey), fetch, wait, unknown, unavailable }
            let current = now()
            let step: Step = state.withLock { state in
                let cached = state.keys[kid]
                if let cached, current < state.expiresAt { return .found(cached) }
                if state.fetching { return waited ? (cached.map { .found($0) } ?? (state.loaded ? .unknown : .unavailable)) : .wait }
                if waited {
                    if let cached { return .found(cached) }
                    return state.loaded ? .unknown : .unavailable
                }
                let sinceLast = state.lastAttempt.map { current.timeIntervalSince($0) } ?? .infinity
                if cached != nil || !state.loaded {
                    // Stale or never loaded: fetch, unless the last attempt failed moments ago.
                    if state.lastFailed && sinceLast < policy.retryAfterFailure {
                        return cached.map { .found($0) } ?? .unavailable
                    }
                } else if sinceLast < policy.unknownKeyRefetchInterval && current < state.expiresAt {
                    return .unknown
                } else if state.lastFailed && sinceLast < policy.retryAfterFailure {
                    return .unknown
                }
                state.fetching = true
                state.lastAttempt = current
                return .fetch
            }
            switch step {
            case .found(let key):
                return key
            case .unknown:
                throw IdentityTokenError(.unknownKey, "no key with kid \(kid) in the issuer's key set")
            case .unavailable:
                throw IdentityTokenError(.keySetUnavailable, "the issuer's key set could not be loaded and none is cached")
            case .wait:
                await waitForFetch()
            case .fetch:
                await performFetch()
            }
            waited = true
        }
    }

    /// Fetches now (used at start-up and by `warmUp`), sharing a fetch already under way.
    public func refresh() async {
        let start: Bool = state.withLock { state in
            if state.fetching { return false }
            state.fetching = true
            state.lastAttempt = now()
            return true
        }
        if start { await performFetch() } else { await waitForFetch() }
    }

    private func waitForFetch() async {
        await withCheckedContinuation { continuation in
            let resumeNow = state.withLock { state in
                if state.fetching {
                    state.waiters.append(continuation)
                    return false
                }
                return true
            }
            if resumeNow { continuation.resume() }
        }
    }

    private func performFetch() async {
        fetchCounter.add(1, ordering: .relaxed)
        let result = await fetch()
        let current = now()
        let waiters: [CheckedContinuation<Void, Never>] = state.withLock { state in
            switch result {
            case .success(let (set, maxAge)):
                state.keys = set.rsaSigningKeys()
                state.loaded = true
                state.lastFailed = false
                state.expiresAt = current.addingTimeInterval(maxAge)
            case .failure:
                state.lastFailed = true
            }
            state.fetching = false
            let waiting = state.waiters
            state.waiters = []
            return waiting
        }
        if case .failure(let error) = result {
            logger.debug("Apple key set fetch failed; keeping the last good set", metadata: ["error": "\(error)"])
        } else {
            logger.debug("Apple key set loaded")
        }
        for waiter in waiters { waiter.resume() }
    }

    private struct FetchError: Error, CustomStringConvertible {
        var description: String
    }

    private func fetch() async -> Result<(JSONWebKeySet, TimeInterval), any Error> {
        switch source {
        case .fixed(let set):
            return .success((set, .infinity))
        case .remote(let url, let client, let timeout):
            do {
                var request = HTTPClientRequest(url: url.absoluteString)
                request.headers.add(name: "Accept", value: "application/json")
                let deadline = NIODeadline.now() + timeout
                let response = try await client.execute(request, deadline: deadline)
                let body = try await response.body.collect(upTo: policy.maximumBodySize, deadline: deadline)
                guard response.status == .ok else {
                    return .failure(FetchError(description: "HTTP \(response.status.code) from \(url.absoluteString)"))
                }
                let set = try JSONDecoder().decode(JSONWebKeySet.self, from: Data(body.readableBytesView))
                guard !set.rsaSigningKeys().isEmpty else {
                    return .failure(FetchError(description: "the key set at \(url.absoluteString) has no RSA signing key"))
                }
                let maxAge = Self.maxAge(response.headers["Cache-Control"].joined(separator: ","), policy: policy)
                return .success((set, maxAge))
            } catch {
                return .failure(error)
            }
        }
    }

    /// The cache lifetime from a `Cache-Control` value, bounded by the policy.
    static func maxAge(_ cacheControl: String, policy: Policy) -> TimeInterval {
        for directive in cacheControl.split(separator: ",") {
            let parts = directive.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            let name = parts.first?.lowercased() ?? ""
            if name == "no-store" || name == "no-cache" { return policy.minimumMaxAge }
            if name == "max-age", parts.count == 2, let seconds = TimeInterval(parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "\" "))) {
                return min(max(seconds, policy.minimumMaxAge), policy.maximumMaxAge)
            }
        }
        return policy.defaultMaxAge
    }
}
