import Foundation
import NIOCore
import NIOPosix
import Testing
import TestSupport

#if canImport(Glibc)
import Glibc
#endif

/// The built `siwa serve` binary as an operator runs it, in a process of its own: what only a whole process shows,
/// such as a signal.
@Suite("siwa serve as a process of its own")
struct ServeProcessTests {
    @Test("SIGHUP puts a changed access policy in force at once, also for sessions answered from memory, on a connection kept open across it; the log says what changed")
    func sighupReloadsThePolicy() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-sighup-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = directory.appendingPathComponent("siwa.json")
        try #"{"allowed_emails": ["ada@example.com"]}"#.write(to: config, atomically: true, encoding: .utf8)

        // Sessions stay in memory for 10 minutes: the checks below must come from memory however slowly the suite's
        // load lets them run (at the default 5 s, the second check of Ada was a store read in CI's run of 4638454),
        // and a reload must be seen there all the same.
        try await LocalSite.runProcess(settings: ["config": config.path, "log_level": "info", "check_cache_seconds": "600"]) { site, siwa in
            try await Visit.withClient { visit in
                let ada = try await visit.signIn(site, user: site.user("Ada")).session
                let grace = try await visit.signIn(site, user: site.user("Grace")).session
                try await KeptAliveConnection.with(site.origin) { connection in
                    #expect(try await connection.check(ada) == 202)
                    #expect(try await connection.check(ada) == 202)
                    #expect(try await connection.check(grace) == 403)
                    // The second check of Ada came from memory, the way that must see a reload too.
                    #expect(try await Self.fastChecks(site, visit) >= 1)

                    try #"{"allowed_emails": ["grace@example.org"]}"#.write(to: config, atomically: true, encoding: .utf8)
                    kill(siwa.pid, SIGHUP)
                    let deadline = ContinuousClock.now + .seconds(10)
                    var adaNow = 202
                    while adaNow == 202, ContinuousClock.now < deadline {
                        try await Task.sleep(for: .milliseconds(50))
                        adaNow = try await connection.check(ada)
                    }
                    #expect(adaNow == 403, "Ada still passes 10 s after SIGHUP; log:\n\(siwa.logText)")
                    #expect(try await connection.check(grace) == 202)
                    #expect(try await connection.check(grace) == 202)
                }
                #expect(siwa.logText.contains("allowed_emails +grace@example.org -ada@example.com"), "\(siwa.logText)")

                // A file that no longer reads keeps the policy in force, and the log says why.
                try "{ not json".write(to: config, atomically: true, encoding: .utf8)
                kill(siwa.pid, SIGHUP)
                let deadline = ContinuousClock.now + .seconds(10)
                while !siwa.logText.contains("configuration not reloaded"), ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(50))
                }
                #expect(siwa.logText.contains("configuration not reloaded"), "\(siwa.logText)")
                #expect(try await visit.send(site.url("/auth/check"), cookies: ["siwa_session": grace]).status == 202)
                #expect(try await visit.send(site.url("/auth/check"), cookies: ["siwa_session": ada]).status == 403)
            }
        }
    }

    @Test("audit events are logged under the label siwa.audit, so an operator filtering the journal for it finds each sign-in and sign-out; siwa's other lines are not among them")
    func auditEventsUnderTheirOwnLabel() async throws {
        try await LocalSite.runProcess(settings: ["log_level": "info"]) { site, siwa in
            try await Visit.withClient { visit in
                let ada = try await visit.signIn(site, user: site.user("Ada")).session
                #expect(try await visit.signOut(site, cookies: ["siwa_session": ada]).status == 303)
            }
            // What `grep ' siwa\.audit:'` (or `journalctl -u siwa -g ' siwa\.audit:'`) keeps of the log: a line reads
            // `<time> info siwa.audit: email=… event=sign-in ip=… sub=… [SignInServer] audit`.
            func audit() -> [Substring] { siwa.logText.split(separator: "\n").filter { $0.contains(" siwa.audit:") } }
            let deadline = ContinuousClock.now + .seconds(10)
            while !audit().contains(where: { $0.contains("event=sign-out") }), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            let lines = audit()
            #expect(lines.contains { $0.contains("event=sign-in ") }, "log:\n\(siwa.logText)")
            #expect(lines.contains { $0.contains("event=sign-out") }, "log:\n\(siwa.logText)")
            #expect(lines.allSatisfy { $0.contains("event=") }, "\(lines)")
        }
    }

    /// `siwa_front_fast_path_total{request="check"}` from `/metrics`.
    static func fastChecks(_ site: LocalSite, _ visit: Visit) async throws -> Int {
        let prefix = "siwa_front_fast_path_total{request=\"check\"} "
        let line = try await visit.send(site.url("/metrics")).text.split(separator: "\n").first { $0.hasPrefix(prefix) }
        return Int(try #require(line).dropFirst(prefix.count)) ?? -1
    }
}

/// One HTTP/1.1 connection kept open for several `/auth/check` requests in turn; a request fails when the server
/// closed it.
struct KeptAliveConnection {
    let origin: String
    var inbound: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator
    let outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>

    static func with<T>(_ origin: String, _ body: (inout KeptAliveConnection) async throws -> T) async throws -> T {
        let port = Int(origin.split(separator: ":").last ?? "") ?? 0
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: port) { channel in
            channel.eventLoop.makeCompletedFuture { try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel) }
        }
        return try await channel.executeThenClose { inbound, outbound in
            var connection = KeptAliveConnection(origin: origin, inbound: inbound.makeAsyncIterator(), outbound: outbound, pending: "")
            return try await body(&connection)
        }
    }

    private var pending: String

    private init(origin: String, inbound: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator, outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>, pending: String) {
        self.origin = origin
        self.inbound = inbound
        self.outbound = outbound
        self.pending = pending
    }

    /// The status of `GET /auth/check` with `session`, whose answer has no body.
    mutating func check(_ session: String) async throws -> Int {
        let host = origin.replacingOccurrences(of: "http://", with: "")
        try await outbound.write(ByteBuffer(string: "GET /auth/check HTTP/1.1\r\nHost: \(host)\r\nCookie: siwa_session=\(session)\r\n\r\n"))
        var iterator = inbound
        defer { inbound = iterator }
        while !pending.contains("\r\n\r\n") {
            guard let buffer = try await iterator.next() else { throw EndToEndError("the server closed the kept-alive connection") }
            pending += String(buffer: buffer)
        }
        let parts = pending.components(separatedBy: "\r\n\r\n")
        let head = parts[0]
        pending = parts.dropFirst().joined(separator: "\r\n\r\n")
        let lines = head.components(separatedBy: "\r\n")
        let length = lines.first { $0.lowercased().hasPrefix("content-length:") }.flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) }
        guard length == 0 else { throw EndToEndError("/auth/check answered with a body: \(head)") }
        return lines.first.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
    }
}
