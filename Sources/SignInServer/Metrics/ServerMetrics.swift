import AppleSignIn
import Foundation
import Prometheus

/// The server's metrics, in a registry of its own (no global state, so several servers can live in one
/// process, as in tests), served at `/metrics` in Prometheus text format.
public final class ServerMetrics: Sendable {
    /// The registry `/metrics` emits.
    public let registry = PrometheusCollectorRegistry()
    let signInsStarted: Counter
    let signInsCompleted: Counter
    let callbackDuration: DurationHistogram
    let keySetFetches: Gauge
    let clientSecretSignatures: Gauge
    let activeSessions: Gauge
    /// Requests the front answered on the event loop below NIO's HTTP codecs (`RawFrontPath`), by what they were;
    /// `upstream_bytes`: passed to the upstream.
    let fastChecks: Counter
    let fastForwards: Counter
    let fastProxiedBytes: Counter
    let fastPages: Counter
    let fastExtAuthz: Counter
    /// `siwa_ext_authz_checks_total` by mode and verdict (`DoorVerdict.kind`).
    private let extAuthzCounters: [String: [String: Counter]]
    /// The edge (issue 36): TLS connections by the protocol ALPN chose, hellos refused, HTTP/2 limits met.
    let edgeConnections: EdgeConnectionCounters
    let edgeRefusedHellos: Counter

    struct EdgeConnectionCounters: Sendable {
        let http1: Counter
        let h2: Counter
        let validation: Counter
    }

    /// Creates the metrics.
    public init() {
        signInsStarted = registry.makeCounter(name: "siwa_signins_started_total", help: "Sign-ins started at /auth/apple.")
        signInsCompleted = registry.makeCounter(name: "siwa_signins_completed_total", help: "Sign-ins completed with a new session.")
        callbackDuration = registry.makeDurationHistogram(
            name: "siwa_callback_duration_seconds",
            buckets: [.milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(20), .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(5)],
            help: "Time to handle Apple's return, including the code exchange."
        )
        keySetFetches = registry.makeGauge(name: "siwa_keyset_fetches", help: "Fetches of Apple's key set since start.")
        clientSecretSignatures = registry.makeGauge(name: "siwa_client_secret_signatures", help: "Client secrets signed since start (the rest came from cache).")
        activeSessions = registry.makeGauge(name: "siwa_active_sessions", help: "Sessions not yet expired.")
        let fastHelp = "Requests answered on the event loop from what memory holds: checks and passes of a session in memory, and the sign-in and session pages (the rest went through the handlers)."
        fastChecks = registry.makeCounter(name: "siwa_front_fast_path_total", labels: [("request", "check")], help: fastHelp)
        fastForwards = registry.makeCounter(name: "siwa_front_fast_path_total", labels: [("request", "forward")], help: fastHelp)
        fastProxiedBytes = registry.makeCounter(name: "siwa_front_fast_path_total", labels: [("request", "upstream_bytes")], help: fastHelp)
        fastPages = registry.makeCounter(name: "siwa_front_fast_path_total", labels: [("request", "page")], help: fastHelp)
        fastExtAuthz = registry.makeCounter(name: "siwa_front_fast_path_total", labels: [("request", "ext_authz")], help: fastHelp)
        let verdicts = ["pass", "allow", "sign-in", "unauthorized", "bad-token", "deny", "unavailable", "step-up"]
        extAuthzCounters = Dictionary(uniqueKeysWithValues: ["http", "grpc"].map { [registry] mode in
            (mode, Dictionary(uniqueKeysWithValues: verdicts.map { ($0, Self.extAuthzCounter(registry, $0, mode)) }))
        })
        let tlsHelp = "TLS connections to the HTTPS port, by the protocol ALPN chose (acme-tls/1: an ACME validation)."
        edgeConnections = EdgeConnectionCounters(
            http1: registry.makeCounter(name: "siwa_tls_connections_total", labels: [("protocol", "http/1.1")], help: tlsHelp),
            h2: registry.makeCounter(name: "siwa_tls_connections_total", labels: [("protocol", "h2")], help: tlsHelp),
            validation: registry.makeCounter(name: "siwa_tls_connections_total", labels: [("protocol", "acme-tls/1")], help: tlsHelp)
        )
        edgeRefusedHellos = registry.makeCounter(name: "siwa_tls_hellos_refused_total", help: "TLS hellos for a name siwa has no certificate for (answered with an alert).")
    }

    /// Counts an HTTP/2 connection ended for passing one of its limits (`limit`: the `h2_*` key, or the flood).
    func http2LimitMet(_ limit: String) {
        registry.makeCounter(name: "siwa_http2_limit_total", labels: [("limit", limit)], help: "HTTP/2 connections ended for passing a limit, by limit.").increment()
    }

    /// Counts an HTTP/2 stream refused alone (RST_STREAM REFUSED_STREAM) for opening past `h2_max_concurrent_streams`.
    func http2StreamRefused() {
        registry.makeCounter(
            name: "siwa_http2_streams_refused_total", help: "HTTP/2 streams refused alone (REFUSED_STREAM) for opening past h2_max_concurrent_streams."
        ).increment()
    }

    /// Counts a request or connection ended for passing a limit on the client's time (`limit`: the key,
    /// `client_header_timeout_ms`, `client_body_timeout_ms` or `client_send_timeout_ms`). An idle connection's end is
    /// no limit met.
    func clientLimitMet(_ limit: String) {
        registry.makeCounter(
            name: "siwa_client_limit_total", labels: [("limit", limit)],
            help: "Requests (an HTTP/2 stream) or connections ended for passing a limit on the client's time, by limit."
        ).increment()
    }

    /// Counts an answer to Envoy's `ext_authz` by the verdict's kind (`DoorVerdict.kind`) and the mode (`http`,
    /// `grpc`), through the counters made at start (the registry's look-up, by name and labels, cost a check answered
    /// from memory 6,000 instructions); a kind not in that list (Metrics is below Verdict and cannot read
    /// `DoorVerdict`'s) is looked up, counted all the same.
    func extAuthz(_ verdict: String, mode: String) {
        (extAuthzCounters[mode]?[verdict] ?? Self.extAuthzCounter(registry, verdict, mode)).increment()
    }

    private static func extAuthzCounter(_ registry: PrometheusCollectorRegistry, _ verdict: String, _ mode: String) -> Counter {
        registry.makeCounter(name: "siwa_ext_authz_checks_total", labels: [("verdict", verdict), ("mode", mode)], help: "Checks Envoy's ext_authz asked, by verdict and mode.")
    }

    /// Seconds until the certificate served for `domain` expires.
    func certificateExpiry(domain: String, seconds: Double) {
        registry.makeGauge(name: "siwa_tls_certificate_expiry_seconds", labels: [("domain", domain)], help: "Seconds until the certificate served for a domain expires.").set(seconds)
    }

    /// Counts an ACME order by outcome (issued, failed) and the challenge that validated it.
    func acmeOrder(outcome: String, challenge: String) {
        registry.makeCounter(name: "siwa_acme_orders_total", labels: [("outcome", outcome), ("challenge", challenge)], help: "ACME orders by outcome and challenge.").increment()
    }

    /// Counts a failed sign-in by reason.
    func signInFailed(_ reason: String) {
        registry.makeCounter(name: "siwa_signins_failed_total", labels: [("reason", reason)], help: "Sign-ins that failed, by reason.").increment()
    }

    /// Counts a notification by type and outcome.
    func notification(type: String, outcome: String) {
        registry.makeCounter(name: "siwa_notifications_total", labels: [("type", type), ("outcome", outcome)], help: "Server-to-server notifications received.").increment()
    }

    /// Records one call to Apple (wired as the `AppleIDClient` observer).
    func appleCall(path: String, outcome: String, duration: Duration) {
        registry.makeCounter(name: "siwa_apple_requests_total", labels: [("endpoint", path), ("outcome", outcome)], help: "Calls to Apple by endpoint and outcome (ok or error code).").increment()
        registry.makeDurationHistogram(
            name: "siwa_apple_request_duration_seconds", labels: [("endpoint", path)],
            buckets: [.milliseconds(5), .milliseconds(20), .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(5), .seconds(10)],
            help: "Latency of calls to Apple."
        ).record(duration)
    }

    /// The Prometheus text, after refreshing the gauges read at scrape time.
    func render(keySet: AppleKeySet, secrets: ClientSecretSigner, activeSessions count: Int?) -> String {
        keySetFetches.set(Double(keySet.fetches))
        clientSecretSignatures.set(Double(secrets.signatures))
        if let count { activeSessions.set(Double(count)) }
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return String(decoding: buffer, as: UTF8.self)
    }
}
