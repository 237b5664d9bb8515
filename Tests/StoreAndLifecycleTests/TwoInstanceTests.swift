import AppleIDEmulator
import Foundation
import PostgresNIO
@testable import SignInServer
import Testing

/// Two instances on different ports against one PostgreSQL database, as behind a load balancer.
@Suite("Two instances on one PostgreSQL")
struct TwoInstanceTests {
    @Test("a sign-in started on A completes on B, sign-out on B ends it on A at once (though A has it cached), a notification to A ends sessions served by B")
    func twoInstancesShareEverything() async throws {
        try await TestPostgres.withFreshDatabase { url, client, _ in
            let sql = PostgresSQL(client: client)
            try await withWorld { world in
                var settings = try world.settings(database: url, dataKeys: [TokenCipher.generateKey()])
                // Sessions stay cached far longer than this test waits: only LISTEN/NOTIFY can end them on the other instance.
                settings.checkCacheSeconds = 600
                try await withInstance(world, settings: settings) { a in
                    try await withInstance(world, settings: settings) { b in
                        #expect(a.port != b.port)
                        #expect(try await a.get("/readyz").status == 200)
                        #expect(try await b.get("/readyz").status == 200)

                        // Started on A (pending state and binding saved by A), completed on B.
                        let session = try await a.signIn(Site.ada, finishOn: b)
                        let onA = try await a.sessionPage(session)
                        #expect(onA.status == 200)
                        #expect(onA.capture(#"id="name">([^<]*)<"#) == "Ada Lovelace")
                        let onB = try await b.sessionPage(session)
                        #expect(onB.status == 200)

                        // A pending sign-in is single use across instances: B used it, A cannot.
                        let (authorizeURL, binding) = try await a.start()
                        let fields = try await world.consent(authorizeURL, user: Site.ada)
                        #expect(try await b.callback(fields, binding: binding).status == 303)
                        #expect(try await a.callback(fields, binding: binding).status == 400)

                        // Sign-out on B ends the session on A, which has it cached: B's NOTIFY reaches A as B's
                        // transaction commits (delivered asynchronously, so within a moment, not within the cache's 600 s).
                        let csrf = try #require(onB.csrfToken)
                        let out = try await b.post("/auth/signout", form: [("csrf_token", csrf)], cookies: [Site.sessionCookie: session])
                        #expect(out.status == 303)
                        #expect(try await Support.eventually(timeout: .seconds(10)) { try await a.sessionPage(session).status == 401 })

                        // Sessions served by B; Apple's consent-revoked reaches A only.
                        let first = try await b.signIn(Site.lilei)
                        let second = try await a.signIn(Site.lilei, finishOn: b)
                        let bystander = try await b.signIn(Site.grace)
                        #expect(try await b.sessionPage(first).status == 200)
                        let delivery = try await world.notify("consent-revoked", sub: Site.lilei, to: a.baseURL + "/auth/apple/notifications")
                        #expect(delivery.statuses == [200])
                        #expect(try await Support.eventually(timeout: .seconds(10)) { try await b.sessionPage(first).status == 401 })
                        #expect(try await b.sessionPage(second).status == 401)
                        #expect(try await b.sessionPage(bystander).status == 200)
                        #expect(try await sql.count("refresh_tokens", sub: Site.lilei) == 0)
                        #expect(try await sql.count("users", where: "sub = \(Support.literal(Site.lilei)) AND link_revoked_at IS NOT NULL") == 1)
                        #expect(try await sql.count("notifications", where: "jti = \(Support.literal(delivery.jti))") == 1)

                        // One notification delivered to A and again to B is applied once.
                        let signed = try await world.emulator.signNotification(type: "email-disabled", subject: Site.grace, clientID: EmulatorConfiguration.testServicesID)
                        let payload = String(decoding: try JSONSerialization.data(withJSONObject: ["payload": signed.jws]), as: UTF8.self)
                        let toA = try await world.send(.POST, a.baseURL + "/auth/apple/notifications", body: payload, contentType: "application/json")
                        let toB = try await world.send(.POST, b.baseURL + "/auth/apple/notifications", body: payload, contentType: "application/json")
                        #expect(toA.status == 200 && toA.body.hasPrefix("applied"))
                        #expect(toB.status == 200 && toB.body.hasPrefix("duplicate"))
                        #expect(try await a.sessionPage(bystander).capture(#"id="(forwarding-disabled)""#) != nil)
                    }
                }
            }
        }
    }

    @Test("instances starting at the same time migrate one database safely")
    func concurrentMigrations() async throws {
        try await TestPostgres.withFreshDatabase { url, client, runner in
            let stores = try (0..<4).map { _ in
                try PostgresStore(url: url, cipher: try TokenCipher(base64Keys: [TokenCipher.generateKey()]), logger: Support.logger("test.store"))
            }
            for store in stores { runner.run(store.client) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for store in stores { group.addTask { try await store.migrate() } }
                try await group.waitForAll()
            }
            // Each schema version (v1; v2, keys; v3, the provider; v4, groups; v5, back-channel logout; v6, session details;
            // v7 to v9, issue 35's clients and device grants; v10, the edge's certificates; v11 to v13, issue 47's invitations,
            // account events and Apple's authentication time) applied once.
            // As a set: text orders v10 before v2.
            #expect(Set(try await PostgresSQL(client: client).texts("SELECT version FROM schema_migrations")) == Set(PostgresSchema.migrations.map { Optional($0.0) }))
            #expect(try await PostgresSQL(client: client).integer("SELECT count(*) FROM schema_migrations") == PostgresSchema.migrations.count)
            #expect(PostgresSchema.migrations.map(\.0) == (1...13).map { "v\($0)" })
            #expect(SQLiteSchema.migrations.map(\.0) == PostgresSchema.migrations.map(\.0), "the two stores' schemas have the same versions")
            try await stores[0].ping()
        }
    }
}
