import Foundation
import Testing
import TestSupport

/// `upstream_http2` (issue 36): a gRPC service (Python's grpcio) behind `siwa serve --upstream` on siwa's own HTTPS,
/// called by a gRPC client with the site's iOS app's token: a unary call with its trailers, a server-streaming call,
/// and a call without a token refused as gRPC understands it.
@Suite("A gRPC service behind --upstream over HTTP/2")
struct UpstreamHTTP2Tests {
    struct Called: Decodable {
        let code: String
        let unary: String?
        let trailers: [String: String]?
        let stream: [String]?
        let details: String?
    }

    static func call(_ https: Int, root: String, token: String?) async throws -> Called {
        try await ThirdPartyScript.run("grpc_echo.py", ["call", String(https), root, "auth.localhost"] + (token.map { [$0] } ?? []), timeLimit: .seconds(60))
    }

    @Test("a unary call reaches the service as the person and the app and comes back with its trailers; a server-streaming call brings every part; without a token the call is UNAUTHENTICATED")
    func grpcBehindSiwa() async throws {
        let ports = try await FreePorts.reserve(2)
        let (service, https) = (ports[0], ports[1])
        try await TestCertificate.withSelfSigned { cert, key in
            try await ChildProcess.withRunning(
                try ExternalTool.authlibPython.executable(),
                arguments: [ExternalTool.thirdPartyScripts.appendingPathComponent("grpc_echo.py").path, "serve", String(service)],
                output: URL(fileURLWithPath: cert).deletingLastPathComponent().appendingPathComponent("grpc.log"), ready: { await TCPProbe.acceptsConnections(on: service) }
            ) { _ in
                try await LocalSite.run(settings: [
                    "upstream": "http://127.0.0.1:\(service)", "upstream_http2": "true", "tls_cert_file": cert, "tls_key_file": key,
                    "tls_domains": "auth.localhost", "https_port": String(https), "access_rules": BearerUpstreamTests.rules, "trusted_proxies": nil,
                ]) { site in
                    // The iOS app's token, asked for on siwa's HTTPS (curl: this process does not resolve auth.localhost).
                    let person = site.user("Ada")
                    let token = try await Visit.withClient { visit in
                        let body = try await BearerUpstreamTests.nativeCredential(site, visit, sub: person.sub)
                        let answer = try await Curl.fetch(site.url("/auth/api/apple/native"), caFile: cert, method: "POST", headers: ["Content-Type: application/json"], body: body)
                        let json = try #require(try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [String: Any], "\(answer)")
                        return try #require(json["session_token"] as? String)
                    }
                    // The rules let the app's token in on /api/ios/ only: the service's methods are under /siwa.Echo/,
                    // which no rule names, so the global policy (anyone signed in) decides.
                    let called = try await Self.call(https, root: cert, token: token)
                    #expect(called.code == "OK", "\(called)")
                    #expect(called.unary == "echo:hello")
                    #expect(called.trailers?["x-seen-user"] == person.sub, "\(called)")
                    #expect(called.trailers?["x-seen-client"] == BearerUpstreamTests.bundle, "\(called)")
                    #expect(called.stream == (0..<5).map { "part \($0)" }, "\(called)")
                    let refused = try await Self.call(https, root: cert, token: nil)
                    #expect(refused.code == "UNAUTHENTICATED", "\(refused)")
                }
            }

        }
    }
}
