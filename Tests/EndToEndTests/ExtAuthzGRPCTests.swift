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
        return Self.hex(try request.serializedBytes())
    }

    static func check(_ arguments: [String], _ fields: [String: String]) async throws -> Envoy_Service_Auth_V3_CheckResponse {
        let outcome = try await ThirdPartyScript.run("grpc_check.py", arguments, sending: try request(fields), as: Outcome.self)
        return try response(outcome)
    }

    /// The `CheckResponse` of a call that ended OK.
    static func response(_ outcome: Outcome) throws -> Envoy_Service_Auth_V3_CheckResponse {
        #expect(outcome.code == "OK", "\(outcome)")
        let hex = try #require(outcome.response)
        let bytes = Self.bytes(hex)
        try #require(bytes.count * 2 == hex.utf8.count, "not hex: \(hex)")
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

    /// The matrix of `VerdictDifferentialTests` as `CheckRequest`s, each for a host of its own: the first call for a host
    /// is answered by the handler (no assertion for that origin is in memory yet), the second, for a request memory lets
    /// pass, from memory on the HTTP/2 stream (`GRPCCheckFromMemory`). Both must be the same `CheckResponse`.
    @Test("a Check memory lets pass is answered on the HTTP/2 stream with the CheckResponse the handler gives: the generated matrix (who, how, where, the fields as a map or as raw headers, a client's own identity fields), each case asked twice, the first by the handler, the second from memory")
    func checksFromMemoryAgree() async throws {
        let settings = VerdictDifferentialTests.settings.merging(["trusted_proxies": "127.0.0.1", "check_cache_seconds": "600"]) { $1 }
        try await LocalSite.run(settings: settings) { site in
            try await Visit.withClient { visit in
                let ada = try await visit.signIn(site, user: site.user("Ada")).session
                let grace = try await visit.signIn(site, user: site.user("Grace")).session
                let token = try await BearerUpstreamTests.nativeToken(site, visit, sub: site.user("Ada").sub)
                try await Task.sleep(for: .milliseconds(1200))
                var generator = SplitMix64(seed: 46_2)
                var requests: [Envoy_Service_Auth_V3_CheckRequest] = []
                var names: [String] = []
                // A preflight, a token in the URL and a malformed credential (a public path lets each through) are the
                // handler's to read.
                var memoryReads: [Bool] = []
                for who in VerdictDifferentialTests.Who.allCases {
                    for how in VerdictDifferentialTests.How.allCases {
                        for path in VerdictDifferentialTests.paths {
                            let asked = VerdictDifferentialTests.asked(who, how, path: path, ada: ada, grace: grace, token: token)
                            let (method, target) = (asked.method.rawValue, asked.target)
                            // Ada's cookie among another, as a browser sends it.
                            var fields = asked.headers + (asked.cookie.map { [("Cookie", (who == .ada ? "theme=dark; " : "") + "siwa_session=\($0)")] } ?? [])
                            // A client's own identity, in spellings some frameworks read as the same field.
                            if Bool.random(using: &generator) {
                                fields.append((["X-Siwa-Assertion", "X_Siwa_Assertion", "x_auth_request_user", "X-Auth-Request-Email"].randomElement(using: &generator) ?? "", "forged"))
                            }
                            if Bool.random(using: &generator) { fields.append(("cookie", "second=1")) }
                            var request = Envoy_Service_Auth_V3_CheckRequest()
                            request.attributes.request.http.method = method
                            request.attributes.request.http.path = target
                            request.attributes.request.http.host = "app-\(requests.count).example"
                            request.attributes.request.http.scheme = Bool.random(using: &generator) ? "https" : "http"
                            request.attributes.source.address.socketAddress.address = "203.0.113.7"
                            let raw = Bool.random(using: &generator)
                            if raw {
                                // `encode_raw_headers`: each field as sent, its value in `raw_value`.
                                request.attributes.request.http.headerMap.headers = fields.map { name, value in
                                    var header = Envoy_Config_Core_V3_HeaderValue()
                                    header.key = name.lowercased()
                                    header.rawValue = Data(value.utf8)
                                    return header
                                }
                            } else {
                                // Envoy's map: repeated fields joined (a cookie's with "; ", others with ",").
                                var map: [String: String] = [:]
                                for (name, value) in fields {
                                    let key = name.lowercased()
                                    map[key] = map[key].map { $0 + (key == "cookie" ? "; " : ",") + value } ?? value
                                }
                                request.attributes.request.http.headers = map
                            }
                            requests.append(request)
                            memoryReads.append(how != .preflight && who != .tokenInQuery && who != .malformedToken)
                            names.append("\(who) \(how) \(method) \(target) \(raw ? "raw headers" : "map") \(fields.map(\.0))")
                        }
                    }
                }
                let hex = try requests.map { Self.hex(try $0.serializedBytes()) }
                // In batches, so that a case's second call follows its first within seconds, well inside the 20 s an
                // assertion is handed out again (`IdentityAssertions.reuse`); the suite's load once stretched one pass
                // over the whole matrix past it.
                var verdicts: Set<String> = []
                var (allowedInAll, firstFromMemory) = (0, 0)
                for batch in stride(from: 0, to: requests.count, by: 32).map({ $0..<min($0 + 32, requests.count) }) {
                    let first = try await BytePathTests.counted("ext_authz", site, visit)
                    let handlers = try await Self.checks([String(site.port)], Array(hex[batch]))
                    let between = try await BytePathTests.counted("ext_authz", site, visit)
                    let memory = try await Self.checks([String(site.port)], Array(hex[batch]))
                    let last = try await BytePathTests.counted("ext_authz", site, visit)
                    try #require(handlers.count == batch.count && memory.count == batch.count)
                    var allowed = 0
                    for (offset, index) in batch.enumerated() {
                        #expect(memory[offset] == handlers[offset], "\(names[index]): from memory\n\(memory[offset])\nby the handler\n\(handlers[offset])")
                        switch handlers[offset].httpResponse {
                        case .okResponse?:
                            verdicts.insert("ok")
                            if memoryReads[index] { allowed += 1 }
                        case .deniedResponse(let denied)?: verdicts.insert("denied \(denied.status.code.rawValue)")
                        default: verdicts.insert("other")
                        }
                    }
                    // Every request let through that memory reads was answered from memory the second time.
                    #expect(last - between == allowed, "cases \(batch): \(last - between) of \(allowed) allowed checks answered from memory")
                    allowedInAll += allowed
                    firstFromMemory += between - first
                }
                // The first time only those that sign no assertion (no person: a public path) could be.
                #expect(firstFromMemory < allowedInAll, "\(firstFromMemory) first checks of \(allowedInAll) answered from memory")
                // The matrix reaches allowances and every kind of refusal, so that agreeing means something.
                #expect(verdicts.isSuperset(of: ["ok", "denied 302", "denied 401", "denied 403", "denied 400"]), "\(verdicts.sorted())")
            }
        }
    }

    /// A call as `h2_requests.py` sends it over h2c: the whole head, the message's bytes, in one DATA frame or in two
    /// with a pause between them.
    struct Call: Encodable {
        let head: [[String]]
        let body_hex: String
        var split = false
        var pause_ms = 0
    }

    struct Answered: Decodable {
        let status: Int?
        let fields: [[String]]
        let body_hex: String
        let reset: Int?
    }

    @Test("a Check whose message comes in two reads (HEADERS and half the message, the rest 300 ms later) is answered from memory as the same call in one piece is, with the same CheckResponse; a request that is not a Check on the same connection is answered as ever")
    func slowMessageFromMemory() async throws {
        let settings = VerdictDifferentialTests.settings.merging(["trusted_proxies": "127.0.0.1", "check_cache_seconds": "600"]) { $1 }
        try await LocalSite.run(settings: settings) { site in
            try await Visit.withClient { visit in
                let ada = try await visit.signIn(site, user: site.user("Ada")).session
                var request = Envoy_Service_Auth_V3_CheckRequest()
                request.attributes.request.http.method = "GET"
                request.attributes.request.http.path = "/reports?x=1"
                request.attributes.request.http.host = "app.example"
                request.attributes.request.http.scheme = "https"
                request.attributes.request.http.headers = ["cookie": "siwa_session=\(ada)", "accept": "text/html"]
                request.attributes.source.address.socketAddress.address = "203.0.113.7"
                let message: [UInt8] = try request.serializedBytes()
                let length = UInt32(message.count)
                let framed: [UInt8] = [0, UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)] + message
                let hex = Self.hex(framed)
                let authority = "127.0.0.1:\(site.port)"
                let head = [
                    [":method", "POST"], [":scheme", "http"], [":authority", authority], [":path", "/envoy.service.auth.v3.Authorization/Check"],
                    ["content-type", "application/grpc"], ["te", "trailers"],
                ]
                let whole = Call(head: head, body_hex: hex)
                let slow = Call(head: head, body_hex: hex, split: true, pause_ms: 300)
                let page = Call(head: [[":method", "GET"], [":scheme", "http"], [":authority", authority], [":path", "/healthz"]], body_hex: "")
                func send(_ calls: [Call]) async throws -> [Answered] {
                    try await ThirdPartyScript.run("h2_requests.py", [String(site.port), "127.0.0.1", "-"], sending: calls, as: [Answered].self)
                }
                // The first call signs the assertion (the handler's); then one in one piece, from memory.
                let first = try await send([whole])
                let before = try await BytePathTests.counted("ext_authz", site, visit)
                let answers = try await send([whole, slow, page, whole])
                let after = try await BytePathTests.counted("ext_authz", site, visit)
                try #require(first.count == 1 && answers.count == 4, "\(answers)")
                for answer in first + answers.prefix(2) + answers.suffix(1) {
                    #expect(answer.status == 200 && answer.reset == nil, "\(answer)")
                    #expect(answer.fields.contains(["grpc-status", "0"]), "\(answer.fields)")
                }
                #expect(after - before == 3, "the calls in one piece and the slow one from memory: \(after - before)")
                // The same CheckResponse for the call that came slowly.
                let response = try Envoy_Service_Auth_V3_CheckResponse(serializedBytes: Array(Self.bytes(answers[0].body_hex).dropFirst(5)))
                guard case .okResponse? = response.httpResponse else { Issue.record("not allowed: \(response)"); return }
                #expect(answers[1].body_hex == answers[0].body_hex && answers[3].body_hex == answers[0].body_hex, "the slow call's answer:\n\(answers[1])\nin one piece:\n\(answers[0])")
                #expect(answers[2].status == 200 && answers[2].reset == nil, "\(answers[2])")
            }
        }
    }

    /// `bytes` as hex, as the Python scripts take them.
    static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }

    /// The bytes `hex` spells, up to its first pair that is not hex.
    static func bytes(_ hex: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while let next = hex.index(index, offsetBy: 2, limitedBy: hex.endIndex), next > index, let byte = UInt8(hex[index..<next], radix: 16) {
            bytes.append(byte)
            index = next
        }
        return bytes
    }

    /// `requests` (hex) called in order on one channel; each call's `CheckResponse`.
    static func checks(_ arguments: [String], _ requests: [String]) async throws -> [Envoy_Service_Auth_V3_CheckResponse] {
        let outcomes = try await ThirdPartyScript.run("grpc_check.py", arguments, sending: requests, as: [Outcome].self)
        return try outcomes.map(response)
    }
}
