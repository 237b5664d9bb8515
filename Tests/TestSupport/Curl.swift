import Foundation

/// What `curl` answered: the HTTP version it spoke, the status, the header fields (lowercased names, in order) and the
/// body.
public struct CurlAnswer: Sendable, CustomStringConvertible {
    public let version: String
    public let status: Int
    public let fields: [(name: String, value: String)]
    public let body: String

    public func header(_ name: String) -> String? {
        fields.first { $0.name == name.lowercased() }?.value
    }

    public func headers(_ name: String) -> [String] {
        fields.filter { $0.name == name.lowercased() }.map(\.value)
    }

    public var description: String { "HTTP/\(version) \(status) \(fields.map { "\($0.name): \($0.value)" }) \(body.prefix(300))" }
}

/// Debian's curl, for what only a real client shows here: HTTP/2 by ALPN, names under `.localhost` (which curl resolves
/// to loopback itself, as browsers do), a CA of the test's own.
public enum Curl {
    public struct Failure: Error, CustomStringConvertible {
        public let exitCode: Int32
        public let stderr: String
        public var url = ""
        public var description: String { "curl \(url) exited \(exitCode): \(stderr)" }
    }

    /// `url` fetched with `--http2` or `--http1.1`, trusting `caFile`; redirects are not followed.
    public static func fetch(
        _ url: String, http2: Bool = true, caFile: String? = nil, method: String = "GET", headers: [String] = [], body: String? = nil, extra: [String] = []
    ) async throws -> CurlAnswer {
        var arguments = ["-sS", "--max-time", "30", "-D", "-", "-o", "-", "-X", method, http2 ? "--http2" : "--http1.1"]
        if let caFile { arguments += ["--cacert", caFile] }
        for header in headers { arguments += ["-H", header] }
        if let body { arguments += ["--data-binary", body] }
        arguments += extra + [url]
        let outcome = try await ChildProcess.run(URL(fileURLWithPath: "/usr/bin/curl"), arguments: arguments, environment: [:], timeLimit: .seconds(60))
        guard outcome.status == 0 else { throw Failure(exitCode: outcome.status, stderr: outcome.stderr, url: "\(method) \(url) (\(http2 ? "HTTP/2" : "HTTP/1.1"))") }
        // The head (-D -) comes first, then the body; with HTTP/1.1 an interim 100 head may precede the answer's.
        var text = Substring(outcome.stdout)
        while true {
            guard let end = text.range(of: "\r\n\r\n") else { throw Failure(exitCode: 0, stderr: "no head in curl's output: \(outcome.stdout.prefix(200))") }
            let head = text[..<end.lowerBound]
            text = text[end.upperBound...]
            let lines = head.split(separator: "\r\n")
            guard let statusLine = lines.first else { continue }
            let parts = statusLine.split(separator: " ")
            guard parts.count >= 2, let status = Int(parts[1]) else { continue }
            if status == 100 { continue }
            let version = String(parts[0].dropFirst("HTTP/".count))
            let fields = lines.dropFirst().compactMap { line -> (String, String)? in
                guard let colon = line.firstIndex(of: ":") else { return nil }
                return (line[..<colon].lowercased(), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
            }
            return CurlAnswer(version: version, status: status, fields: fields, body: String(text))
        }
    }
}
