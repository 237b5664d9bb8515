import AppleIDEmulator
import Foundation
import PostgresNIO
@testable import SignInServer
import Testing

/// The database restarted under load: clear 503s meanwhile, service back by itself, nothing committed lost.
@Suite("PostgreSQL restart")
struct PostgresRestartTests {
    /// One request the loop made.
    struct Attempt: Sendable {
        /// When it was sent.
        var at: ContinuousClock.Instant
        /// How long the answer took.
        var took: Duration
        /// `session`, `start`, `callback`, with `transport` for a request that got no answer at all.
        var step: String
        var status: Int?
        /// The page's heading, or the transport error.
        var detail: String
        /// The session, when a sign-in completed.
        var session: String?
    }

    actor Recorder {
        private(set) var attempts: [Attempt] = []
        private(set) var stopped = false
        func record(_ attempt: Attempt) { attempts.append(attempt) }
        func stop() { stopped = true }
    }

    /// How long the store waits for PostgreSQL (`PostgresStore.operationTimeout`'s default), and the margin a
    /// busy test machine needs on top of it.
    static let storeBound = Duration.seconds(5)
    static let margin = Duration.seconds(1.5)

    @Test("sign-ins during a PostgreSQL outage get 503 pages in bounded time, then succeed again without restarting the app")
    func restartWhileSigningIn() async throws {
        try await TestPostgres.withFreshDatabase(exclusive: true) { url, client, _ in
            let sql = PostgresSQL(client: client)
            try await withWorld { world in
                let settings = try world.settings(database: url, dataKeys: [TokenCipher.generateKey()])
                try await withInstance(world, settings: settings) { site in
                    let committed = try await site.signIn(Site.ada)
                    let recorder = Recorder()
                    var stoppedAt = ContinuousClock.now
                    var restartedAt = ContinuousClock.now
                    var probe: Attempt?
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask { await Self.signInLoop(site: site, world: world, session: committed, recorder: recorder) }
                        // Stop only once the loop has completed a sign-in (a fixed half second was not always enough
                        // on a busy CI machine).
                        let warm = try await Support.eventually(timeout: .seconds(30)) {
                            await recorder.attempts.contains { $0.session != nil }
                        }
                        #expect(warm, "no sign-in completed within 30 s before the outage")
                        // Down for longer than the store waits for it, so requests must give up rather than wait.
                        stoppedAt = ContinuousClock.now
                        try await TestPostgres.runPgCtl("stop -m fast -w")
                        let downUntil = ContinuousClock.now + Self.storeBound + .seconds(2)
                        // pg_ctl has returned: the database is down, and a sign-in made now meets the outage. (The
                        // loop's requests may all fall around it: in CI's run of 10a4053 a callback whose last write
                        // waited out the store's bound and a session page served from memory spanned the whole outage.)
                        probe = await Self.signInOnce(site: site, world: world) { step, request in
                            let at = ContinuousClock.now
                            let answer = try? await request()
                            return Attempt(at: at, took: ContinuousClock.now - at, step: step, status: answer?.status, detail: answer?.heading ?? "")
                        }
                        try await Task.sleep(until: downUntil)
                        // `restart` of a stopped server starts it with the options it last ran with.
                        try await TestPostgres.runPgCtl("restart -w")
                        restartedAt = ContinuousClock.now
                        let back = try await Support.eventually(timeout: .seconds(15)) {
                            await recorder.attempts.contains { $0.at > restartedAt && $0.session != nil }
                        }
                        await recorder.stop()
                        try await group.waitForAll()
                        #expect(back, "no sign-in succeeded within 15 s of the restart")
                    }
                    let attempts = await recorder.attempts
                    let summary = attempts.map { "\($0.step) \($0.status.map(String.init) ?? "-") \($0.took) \($0.detail)" }.joined(separator: "\n")
                    // Every answer is a working page or a clear 503 error page, in bounded time; never a 500, never
                    // a dropped connection.
                    for attempt in attempts {
                        let fine = attempt.status == 200 || attempt.status == 302 || attempt.status == 303
                        #expect(fine || attempt.status == 503, "\(attempt.step) answered \(attempt.status.map(String.init) ?? "nothing"): \(attempt.detail)")
                        if attempt.status == 503 { #expect(!attempt.detail.isEmpty, "a 503 without an error page") }
                        #expect(attempt.took < Self.storeBound + Self.margin, "\(attempt.step) took \(attempt.took) to answer")
                    }
                    // The sign-in made while the database was surely down: a clear 503 page, in bounded time (at the
                    // start, or at the callback, which must write the session).
                    #expect(probe?.status == 503, "a sign-in during the outage: \(probe.map { "\($0.step) \($0.status.map(String.init) ?? "nothing") \($0.detail)" } ?? "none"); the loop's requests:\n\(summary)")
                    if probe?.status == 503 { #expect(probe?.detail.isEmpty == false, "a 503 without an error page") }
                    #expect(probe.map { $0.took < Self.storeBound + Self.margin } == true, "a sign-in during the outage took \(probe.map { "\($0.took)" } ?? "-")")
                    #expect(attempts.contains { $0.at < stoppedAt && $0.session != nil }, "no sign-in completed before the outage")

                    // Everything committed is still there, and the same app serves it.
                    let sessions = [committed] + attempts.compactMap(\.session)
                    for session in sessions {
                        #expect(try await site.sessionPage(session).status == 200)
                    }
                    // At least these: a request that gave up may still have committed.
                    #expect(try await sql.count("sessions") >= sessions.count)
                    #expect(try await sql.count("users", sub: Site.ada) == 1)
                    _ = try await site.signIn(Site.lilei)
                }
            }
        }
    }

    /// Signs in again and again (reading the session page first) until told to stop, recording each answer.
    static func signInLoop(site: Instance, world: World, session: String, recorder: Recorder) async {
        func timed(_ step: String, _ request: () async throws -> Answer) async -> Answer? {
            let at = ContinuousClock.now
            do {
                let answer = try await request()
                let completed = step == "callback" && answer.status == 303 ? answer.cookie(Site.sessionCookie) : nil
                await recorder.record(Attempt(at: at, took: ContinuousClock.now - at, step: step, status: answer.status, detail: answer.heading ?? "", session: completed))
                return answer
            } catch {
                await recorder.record(Attempt(at: at, took: ContinuousClock.now - at, step: "transport", status: nil, detail: "\(step): \(error)"))
                return nil
            }
        }
        while await !recorder.stopped {
            _ = await timed("session") { try await site.get("/session", session: session) }
            _ = await signInOnce(site: site, world: world) { step, request in await timed(step, request) }
            try? await Task.sleep(for: .milliseconds(50))
        }
    }

    /// One sign-in: the start, Apple's consent, the callback. `step` makes each request and returns what it made of
    /// the answer; the last one made (the start when it does not send to Apple).
    static func signInOnce<Made>(site: Instance, world: World, step: (String, () async throws -> Answer) async -> Made?) async -> Made? {
        var start: Answer?
        let started = await step("start") {
            let answer = try await site.get("/auth/apple")
            start = answer
            return answer
        }
        guard let start, start.status == 302, let location = start.location, let binding = start.cookie(Site.bindingCookie),
            let fields = try? await world.consent(location, user: Site.ada)
        else { return started }
        return await step("callback") { try await site.callback(fields, binding: binding) }
    }
}
