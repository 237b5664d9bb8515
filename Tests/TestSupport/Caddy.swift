import Foundation

/// Runs Caddy (Debian's, found by `ExternalTool.caddy`) on a free loopback port while `body` runs, then stops it
/// by its pid and deletes its directory.
///
/// `configuration` receives the port and returns the Caddyfile's site blocks, each addressed
/// `http://127.0.0.1:PORT` (or `http://NAME:PORT` to match another Host). The helper puts the global options
/// first: no admin endpoint, no automatic HTTPS, every listener bound to 127.0.0.1, a two-second grace period at
/// SIGTERM, storage, configuration autosave and HOME inside the test's directory; and runs
/// `caddy run --adapter caddyfile`.
///
/// ```swift
/// try await withCaddy(configuration: { port in """
///     http://127.0.0.1:\(port) {
///         forward_auth 127.0.0.1:\(siwa) {
///             uri /auth/forward
///             copy_headers X-Auth-Request-User X-Auth-Request-Email X-Siwa-Assertion
///         }
///         reverse_proxy 127.0.0.1:\(app)
///     }
///     """ }) { caddy in
///     let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: caddy.url("/")), timeout: .seconds(10))
/// }
/// ```
/// A start that fails throws an error carrying Caddy's log (a Caddyfile error names the line).
public func withCaddy<T>(configuration: (_ port: Int) -> String, _ body: (RunningProxy) async throws -> T) async throws -> T {
    try await ProxyHarness.run(.caddy, { directory, port in
        ProxyLaunch(
            files: ["Caddyfile": caddyfile(directory: directory, sites: configuration(port))],
            arguments: ["run", "--config", directory.appendingPathComponent("Caddyfile").path, "--adapter", "caddyfile"],
            environment: [
                "HOME": directory.path,
                "XDG_CONFIG_HOME": directory.appendingPathComponent("config").path,
                "XDG_DATA_HOME": directory.appendingPathComponent("data").path,
            ],
            logFiles: ["Caddyfile"]
        )
    }, ready: { caddy in
        // Caddy logs this once every listener of the configuration is open; a connection then reaches this Caddy.
        let output = (try? String(contentsOf: caddy.directory.appendingPathComponent(ProxyHarness.outputFile), encoding: .utf8)) ?? ""
        guard output.contains("serving initial configuration") else { return false }
        return await TCPProbe.acceptsConnections(on: caddy.port)
    }, body)
}

/// The whole Caddyfile: the harness's global options, then the caller's sites.
func caddyfile(directory: URL, sites: String) -> String {
    """
    # Written for one test by TestSupport's withCaddy; deleted with its directory.
    {
    \tadmin off
    \tauto_https off
    \tdefault_bind 127.0.0.1
    \tgrace_period 2s
    \tskip_install_trust
    \tstorage file_system \(directory.appendingPathComponent("storage").path)
    }

    \(sites)

    """
}
