import EnvoyAuthorization
import Foundation
import SwiftProtobuf
import Testing
import TestSupport

/// Envoy's gRPC `Check` from a gRPC client other than Envoy (Python's grpcio), with messages made by the generated
/// Swift: over siwa's HTTPS port (HTTP/2 by ALPN) and over h2c on its plain port.
@Suite("The gRPC Check from grpcio, over TLS and h2c")
struct ExtAuthzGRPCTests {
    struct Outcome: Decodable {
        let code: String
        let response: String?
    }

    /// A `CheckRequest` for `GET https://app.localhost/reports?x=1` with `fields`, from 203.0.113.7.
    static func request(_ fields: [String: String]) throws -> String {
        var request = Envoy_Service_Auth_V3_CheckRequest()
        request.attributes.request.http.method = "GET"
        request.attributes.request.http.path = "/reports?x=1"
        request.attributes.request.http.host = "app.localhost"
        request.attributes.request.http.scheme = "https"
        request.attributes.request.http.headers = fields
        request.attributes.source.address.socketAddress.address = "203.0.113.7"
        let bytes: [UInt8] = try request.serializedBytes()
        return bytes.map { String(format: "%02x", $0) }.joined()
    }

    static func check(_ arguments: [String], _ fields: [String: String]) async throws -> Envoy_Service_Auth_V3_CheckResponse {
        let outcome = try await ThirdPartyScript.run("grpc_check.py", arguments, sending: try request(fields), as: Outcome.self)
        #expect(outcome.code == "OK", "\(outcome)")
        let hex = try #require(outcome.response)
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            bytes.append(try #require(UInt8(hex[index..<next], radix: 16)))
            index = next
        }
        return try Envoy_Service_Auth_V3_CheckResponse(serializedBytes: bytes)
    }

    @Test("over siwa's HTTPS port: no one navigating is denied with 302 to sign in and back to the original URL, a script with 401 and WWW-Authenticate; over h2c: a signed-in person is allowed, the identity set and the client's own identity headers named for removal")
    func checkOverTLSAndH2C() async throws {
        try await EdgeFloodTests.withSite { _, cert, https in
            let tls = [String(https), cert, "auth.localhost"]
            let navigation = try await Self.check(tls, ["accept": "text/html", "sec-fetch-mode": "navigate"])
            guard case .deniedResponse(let denied)? = navigation.httpResponse else { Issue.record("not denied: \(navigation)"); return }
            #expect(denied.status.code == .found)
            let location = try #require(denied.headers.first { $0.header.key == "location" }?.header.value)
            #expect(location.contains("/auth/apple?rd=https%3A%2F%2Fapp.localhost%2Freports%3Fx%3D1"), "\(location)")
            let script = try await Self.check(tls, ["accept": "application/json"])
            guard case .deniedResponse(let unauthorized)? = script.httpResponse else { Issue.record("not denied: \(script)"); return }
            #expect(unauthorized.status.code == .unauthorized)
            #expect(script.status.code == 16, "UNAUTHENTICATED")
            #expect(unauthorized.headers.contains { $0.header.key == "www-authenticate" && $0.header.value.hasPrefix("Bearer realm=\"siwa\"") })
        }
        try await LocalSite.run { site in
            try await Visit.withClient { visit in
                let ada = site.user("Ada")
                let session = try await visit.signIn(site, user: ada).session
                let allowed = try await Self.check([String(site.port)], ["cookie": "siwa_session=\(session)", "x-auth-request-groups": "root", "X_Siwa_Assertion": "forged"])
                guard case .okResponse(let ok)? = allowed.httpResponse else { Issue.record("not allowed: \(allowed)"); return }
                #expect(allowed.status.code == 0)
                let set = Dictionary(ok.headers.map { ($0.header.key, $0.header.value) }, uniquingKeysWith: { $1 })
                #expect(set["x-auth-request-user"] == ada.sub)
                #expect(ok.headers.allSatisfy { $0.appendAction == .overwriteIfExistsOrAdd })
                let assertion = try #require(set["x-siwa-assertion"])
                #expect(try BearerUpstreamTests.claims(assertion)["aud"] as? String == "https://app.localhost")
                #expect(set["x-auth-request-groups"] != nil || ok.headersToRemove.contains("x-auth-request-groups"), "the client's groups are replaced or removed: \(ok.headersToRemove)")
                #expect(ok.headersToRemove.contains("x_siwa_assertion"), "the client's own spelling is removed too: \(ok.headersToRemove)")
            }
        }
    }
}
