import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Runs nginx (Debian's, found by `ExternalTool.nginx`) on a free loopback port while `body` runs, then stops it
/// by its pid and deletes its directory.
///
/// `configuration` receives the port and returns what goes inside `http { … }`: `server` blocks (each with
/// `listen 127.0.0.1:PORT;`), `upstream`s, `map`s. The helper writes the rest: `daemon off`, one worker, the pid
/// file, the error log (`notice`), the access log and every temporary path inside the test's directory, so nginx
/// runs the same as root and as another user, and `client_max_body_size 0` (no upload limit; a `server` may set
/// its own). As root the worker runs as root too, because the default `nobody` may not be able to enter the
/// temporary directory to write a buffered request or response body.
///
/// ```swift
/// try await withNginx(configuration: { port in """
///     server {
///         listen 127.0.0.1:\(port);
///         location = /_auth { internal; proxy_pass http://127.0.0.1:\(siwa)/auth/check; proxy_pass_request_body off; proxy_set_header Content-Length ""; }
///         location / { auth_request /_auth; auth_request_set $user $upstream_http_x_auth_request_user; proxy_set_header X-User $user; proxy_pass http://127.0.0.1:\(app); }
///     }
///     """ }) { nginx in
///     let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: nginx.url("/")), timeout: .seconds(10))
/// }
/// ```
/// A start that fails (bad configuration, port taken three times) throws an error carrying nginx's output and
/// error log.
public func withNginx<T>(port: Int? = nil, configuration: (_ port: Int) -> String, _ body: (RunningProxy) async throws -> T) async throws -> T {
    try await ProxyHarness.run(.nginx, port: port, { directory, port in
        ProxyLaunch(
            files: ["nginx.conf": nginxConfiguration(directory: directory, http: configuration(port))],
            arguments: [
                "-p", directory.path + "/",
                "-c", directory.appendingPathComponent("nginx.conf").path,
                "-e", directory.appendingPathComponent("error.log").path,
            ],
            logFiles: ["nginx.conf", "error.log", "access.log"]
        )
    }, ready: { nginx in
        // nginx writes its pid file only after it has bound its ports, so a connection then reaches this nginx.
        guard FileManager.default.fileExists(atPath: nginx.directory.appendingPathComponent("nginx.pid").path) else { return false }
        return await TCPProbe.acceptsConnections(on: nginx.port)
    }, body)
}

/// The whole `nginx.conf` around the caller's `http` part, every path inside `directory`.
func nginxConfiguration(directory: URL, http: String) -> String {
    let path = directory.path
    let user = geteuid() == 0 ? "user root;\n" : ""
    return """
        # Written for one test by TestSupport's withNginx; deleted with its directory.
        daemon off;
        worker_processes 1;
        \(user)pid \(path)/nginx.pid;
        error_log \(path)/error.log notice;
        events { worker_connections 1024; }
        http {
            access_log \(path)/access.log;
            client_body_temp_path \(path)/client_body_temp;
            proxy_temp_path \(path)/proxy_temp;
            fastcgi_temp_path \(path)/fastcgi_temp;
            uwsgi_temp_path \(path)/uwsgi_temp;
            scgi_temp_path \(path)/scgi_temp;
            client_max_body_size 0;
        \(http)
        }

        """
}
