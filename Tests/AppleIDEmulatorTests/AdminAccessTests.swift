import AppleIDEmulator
import Hummingbird
import HummingbirdTesting
import Testing

/// The admin API answers on loopback only.
@Suite("Admin API access")
struct AdminAccessTests {
    static let adminRequests: [(HTTPRequest.Method, String, String?)] = [
        (.get, "/emulator/admin/keys", nil),
        (.post, "/emulator/admin/keys/rotate", nil),
        (.put, "/emulator/admin/faults/token", #"{"status": 503}"#),
        (.delete, "/emulator/admin/faults", nil),
        (.get, "/emulator/admin/deliveries", nil),
        (.get, "/emulator/admin/counters", nil),
        (.post, "/emulator/admin/notify", #"{"type":"consent-revoked","sub":"x"}"#),
    ]

    @Test("a request whose peer is not known to be loopback is refused with 403")
    func refusedWithoutLoopbackPeer() async throws {
        let emulator = try AppleIDEmulator(configuration: Fixtures.configuration(), initialKeys: 1)
        let app = Application(router: emulator.buildRouter())
        try await app.test(.router) { client in
            // In router mode the context has no remote address, as for a peer that is not on loopback.
            for (method, path, body) in Self.adminRequests {
                try await client.execute(uri: path, method: method, body: body.map { ByteBuffer(string: $0) }) { response in
                    #expect(response.status == .forbidden, "\(method) \(path)")
                }
            }
            // The refused fault was not applied, and the Apple endpoints answer as usual.
            try await client.execute(uri: "/auth/keys", method: .get) { response in
                #expect(response.status == .ok)
            }
            try await client.execute(uri: "/healthz", method: .get) { response in
                #expect(response.status == .ok)
            }
        }
    }

    @Test("the same requests from loopback on the live server succeed")
    func loopbackAllowed() async throws {
        try await withEmulator { emulator async throws in
            #expect(try await emulator.admin(.GET, "keys").status == 200)
            #expect(try await emulator.admin(.GET, "counters").status == 200)
            #expect(try await emulator.admin(.GET, "deliveries").status == 200)
            #expect(try await emulator.admin(.PUT, "faults/token", json: #"{"status": 503}"#).status == 200)
            #expect(try await emulator.admin(.DELETE, "faults").status == 204)
        }
    }

    @Test("counters show what happened")
    func counters() async throws {
        try await withEmulator { emulator async throws in
            let code = try await emulator.authorize()["code"]!
            _ = try await emulator.appleClient().exchange(code: code, redirectURI: .init(string: Fixtures.redirectURI))
            _ = try await emulator.get("/auth/keys")
            let counters = try await emulator.admin(.GET, "counters").json
            #expect(counters["authorizations"] as? Int == 1)
            #expect(counters["codesExchanged"] as? Int == 1)
            #expect(counters["keySetRequests"] as? Int == 1)
        }
    }
}
