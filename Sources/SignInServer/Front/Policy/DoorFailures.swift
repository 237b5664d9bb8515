import Logging

/// The one mapping of the door's failures to what people and operators see, for every carrier (as Go's
/// `ReverseProxy` has one `ErrorHandler`): the page (and so the status), the log line, and the count in
/// `siwa_upstream_failures_total{reason=…}`. A carrier only says what happened.
struct DoorFailures: Sendable {
    let settings: UpstreamSettings
    let metrics: ServerMetrics

    /// Logs and counts `failure` of a request whose page offers `retryURL`, and returns the page to answer with.
    func page(for failure: UpstreamForwarder.Failure, retryURL: String, logger: Logger) -> ErrorPage {
        // The client left and its request was called off: no failure of the upstream's, and nobody reads the page.
        if case .unreachable(let cause) = failure, Task.isCancelled || cause is CancellationError {
            logger.debug("the client left before the upstream answered")
            return .badGateway(retryURL: retryURL)
        }
        metrics.upstreamFailed(failure.label)
        switch failure {
        case .broken(let reason):
            logger.error("upstream answered what siwa does not pass on", metadata: ["reason": "\(reason)"])
            return .badUpstream(retryURL: retryURL)
        case .busy:
            logger.warning("upstream_max_connections in use: a request waited in vain", metadata: ["limit": "\(settings.maxConnections)"])
            return .busy(retryURL: retryURL)
        case .timedOut:
            logger.error("upstream did not answer in time", metadata: ["timeout_ms": "\(settings.timeoutMS)"])
            return .gatewayTimeout(retryURL: retryURL)
        case .unreachable(let cause):
            logger.error("upstream unreachable", metadata: ["error": "\(cause)"])
            return .badGateway(retryURL: retryURL)
        case .declined:
            // Answered by passing the upstream's answer on (`UpstreamGate.forward`); a page only if a carrier asks.
            logger.error("upstream declined a WebSocket upgrade and its answer was not passed on")
            return .badUpstream(retryURL: retryURL)
        }
    }

    /// An answer that broke off after its head reached the client: no page can be shown, the client's connection
    /// ends; logged and counted.
    func brokeOff(_ reason: String, logger: Logger) {
        metrics.upstreamFailed("broke_off")
        logger.error("upstream answer broke off", metadata: ["error": "\(reason)"])
    }
}

extension UpstreamForwarder.Failure {
    /// The failure's label in `siwa_upstream_failures_total`.
    var label: String {
        switch self {
        case .broken: "broken"
        case .busy: "busy"
        case .timedOut: "timeout"
        case .unreachable: "unreachable"
        case .declined: "declined"
        }
    }
}

extension ServerMetrics {
    /// Counts a request the upstream did not answer (or whose answer broke off), by `reason`.
    func upstreamFailed(_ reason: String) {
        registry.makeCounter(
            name: "siwa_upstream_failures_total", labels: [("reason", reason)],
            help: "Requests to the upstream that got no answer siwa could pass on, by reason (unreachable, timeout, busy, broken, broke_off)."
        ).increment()
    }
}
