// Soak driver (issue 9): N concurrent clients sign in through the emulator's headless consent, view their
// session page and now and then have Apple send a notification about one of their users, for D seconds,
// while the emulator fails a share of its calls. Then every session cookie held is checked again. Prints
// Markdown tables on stdout, progress on stderr; exits 1 on any defect or lost session.
// Run it with Benchmarks/run-soak.sh, which starts PostgreSQL, the emulator and siwa, restarts PostgreSQL
// in the middle and counts users in the database at the end.

import AsyncHTTPClient
import Foundation
import NIOHTTP1
import Synchronization

func stderr(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

/// The kinds of failure the emulator is told to inject, changed every `faultPeriod` seconds.
/// Token: an error status, a dropped connection, an answer that is not JSON, and a delay longer than siwa's
/// 10-second Apple timeout. Authorize (the person's side) and keys: error statuses and dropped connections.
func faultSchedule(rate: Double) -> [(name: String, token: String, authorize: String, keys: String)] {
    let p = "\"probability\":\(rate)"
    return [
        ("500", "{\"status\":500,\(p)}", "{\"status\":500,\(p)}", "{\"status\":500,\(p)}"),
        ("drop", "{\"drop\":true,\(p)}", "{\"drop\":true,\(p)}", "{\"drop\":true,\(p)}"),
        ("503", "{\"status\":503,\(p)}", "{\"status\":503,\(p)}", "{\"status\":503,\(p)}"),
        ("malformed", "{\"malformed\":true,\(p)}", "{\"status\":500,\(p)}", "{\"malformed\":true,\(p)}"),
        ("slow 12 s", "{\"latency_ms\":12000,\(p)}", "{\"drop\":true,\(p)}", "{\"status\":503,\(p)}"),
    ]
}

func setFault(_ web: Web, emulator: String, endpoint: String, json: String) async -> Bool {
    let answer = try? await web.send(.PUT, emulator + "/emulator/admin/faults/" + endpoint, headers: [("Content-Type", "application/json")], body: json)
    return answer?.status == 200
}

func run() async -> Int32 {
    let options: Options
    let users: [EmulatorUsers.User]
    do {
        options = try Options(arguments: CommandLine.arguments)
        users = try EmulatorUsers.load(options.emulatorConfig)
    } catch let error as UsageError {
        stderr("Soak: \(error.message)\n\(Options.usage)")
        return 2
    } catch {
        stderr("Soak: \(error)")
        return 2
    }
    let perClient = users.count / options.clients
    guard perClient >= 3 else {
        stderr("Soak: the emulator configuration has \(users.count) users, fewer than 3 per client for \(options.clients) clients")
        return 2
    }

    let web = Web(connectionsPerHost: options.clients + 16, timeoutSeconds: options.requestTimeout)
    let progress = Progress()
    let started = epochNow()
    let deadline = started + options.seconds
    stderr("Soak: \(options.clients) clients, \(Int(options.seconds)) s, \(perClient) users each, emulator faults \(options.faultRate * 100) % of calls")

    // Faults: every period the next kind, on authorize, token, keys and revoke at the same rate.
    let schedule = faultSchedule(rate: options.faultRate)
    let faultsUsed = Mutex<[String]>([])
    let faultTask = Task {
        guard options.faultRate > 0 else { return }
        var index = 0
        while epochNow() < deadline, !Task.isCancelled {
            let kind = schedule[index % schedule.count]
            var ok = await setFault(web, emulator: options.emulator, endpoint: "token", json: kind.token)
            ok = await setFault(web, emulator: options.emulator, endpoint: "authorize", json: kind.authorize) && ok
            ok = await setFault(web, emulator: options.emulator, endpoint: "keys", json: kind.keys) && ok
            ok = await setFault(web, emulator: options.emulator, endpoint: "revoke", json: "{\"status\":500,\"probability\":\(options.faultRate)}") && ok
            if !ok { stderr("Soak: the emulator refused a fault (admin API)") }
            faultsUsed.withLock { if !$0.contains(kind.name) { $0.append(kind.name) } }
            index += 1
            try? await Task.sleep(for: .seconds(options.faultPeriod))
        }
    }
    let progressTask = Task {
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(10))
            if Task.isCancelled { break }
            stderr(String(format: "  t=%3.0f s  sign-ins %d  failed cleanly %d  notifications %d  defects %d",
                          epochNow() - started, progress.completed.load(ordering: .relaxed), progress.failed.load(ordering: .relaxed),
                          progress.notifications.load(ordering: .relaxed), progress.defects.load(ordering: .relaxed)))
        }
    }

    // Load, then (faults cleared) the final count, each client checking its own sessions.
    let clients = await withTaskGroup(of: SoakClient.self) { group in
        for number in 0..<options.clients {
            let mine = Array(users[(number * perClient)..<((number + 1) * perClient)])
            group.addTask {
                var client = SoakClient(options: options, web: web, deadline: deadline, progress: progress, users: mine)
                await client.run()
                return client
            }
        }
        var done: [SoakClient] = []
        for await client in group { done.append(client) }
        return done
    }
    let loadEnded = epochNow()
    faultTask.cancel()
    _ = await faultTask.value
    _ = try? await web.send(.DELETE, options.emulator + "/emulator/admin/faults")
    stderr("Soak: load ended after \(Int(loadEnded - started)) s; checking every session held")
    let verified = await withTaskGroup(of: SoakClient.self) { group in
        for client in clients {
            group.addTask {
                var client = client
                await client.verify()
                return client
            }
        }
        var done: [SoakClient] = []
        for await client in group { done.append(client) }
        return done
    }
    progressTask.cancel()
    let verifyEnded = epochNow()

    var tally = Tally()
    for client in verified { tally.merge(client.tally) }
    let expectedUsers = verified.flatMap { $0.users.filter { $0.signedIn && !$0.deleted }.map(\.user.sub) }
    let deletedUsers = verified.flatMap { $0.users.filter(\.deleted).map(\.user.sub) }
    if let path = options.expectedUsersFile {
        _ = FileManager.default.createFile(atPath: path, contents: Data(expectedUsers.map { $0 + "\n" }.joined().utf8))
    }
    if let path = options.deletedUsersFile {
        _ = FileManager.default.createFile(atPath: path, contents: Data(deletedUsers.map { $0 + "\n" }.joined().utf8))
    }
    let counters = (try? await web.send(.GET, options.emulator + "/emulator/admin/counters"))?.body ?? "(unavailable)"
    try? await web.shutdown()

    report(tally, options: options, started: started, loadSeconds: loadEnded - started, verifySeconds: verifyEnded - loadEnded,
           faults: faultsUsed.withLock { $0 }, expectedUsers: expectedUsers.count, deletedUsers: deletedUsers.count, counters: counters)
    let lost = tally.sessionsExpected - tally.sessionsValid
    let stillValid = tally.sessionsEndedExpected - tally.sessionsEndedConfirmed
    // A session page asks only the store: on a healthy store it is never the outage page.
    let outagesOutsideRestart = outsideRestart(tally.sessionOutages, options: options)
    return tally.defectCount == 0 && lost == 0 && stillValid == 0 && outagesOutsideRestart == 0 ? 0 : 1
}

/// PostgreSQL's stop and start (Unix epoch seconds), from the outage file `run-soak.sh` writes.
func restartWindow(_ options: Options) -> (stop: Double, start: Double)? {
    guard let path = options.outageFile, let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
    let parts = text.split(whereSeparator: { $0 == " " || $0 == "\n" }).compactMap { Double($0) }
    guard parts.count >= 2 else { return nil }
    return (parts[0] / 1000, parts[1] / 1000)
}

/// How many of `times` fall outside PostgreSQL's restart (from its stop to 30 s after its start); all of them when
/// there was no restart.
func outsideRestart(_ times: [Double], options: Options) -> Int {
    guard let (stop, start) = restartWindow(options) else { return times.count }
    return times.filter { $0 < stop || $0 > start + 30 }.count
}

func report(_ tally: Tally, options: Options, started: Double, loadSeconds: Double, verifySeconds: Double, faults: [String], expectedUsers: Int, deletedUsers: Int, counters: String) {
    let sum = { (counts: [String: Int]) in counts.values.reduce(0, +) }
    print("### Requests (driver's view)\n")
    print("| kind | requests | by status | p50 | p99 | max |")
    print("|---|---:|---|---:|---:|---:|")
    for (kind, outcomes) in tally.requests.sorted(by: { $0.key < $1.key }) {
        let latencies = tally.latencies[kind] ?? []
        print("| \(kind) | \(grouped(sum(outcomes))) | \(breakdown(outcomes)) | \(milliseconds(percentile(latencies, 50))) | \(milliseconds(percentile(latencies, 99))) | \(milliseconds(latencies.max())) |")
    }
    let failed = sum(tally.failedCleanly)
    let abandoned = sum(tally.abandonedAtEmulator)
    print("\n### Sign-ins, notifications, sessions\n")
    print("| measure | value |")
    print("|---|---|")
    print("| load | \(options.clients) clients for \(String(format: "%.0f", loadSeconds)) s; emulator faults \(String(format: "%g", options.faultRate * 100)) % on authorize, token, keys, revoke, kind changed every \(Int(options.faultPeriod)) s: \(faults.joined(separator: ", ")) |")
    print("| sign-ins started | \(grouped(tally.signInsAttempted)) |")
    print("| sign-ins completed | \(grouped(tally.signInsCompleted)) (\(grouped(tally.freshSignIns)) first sign-ins of a user, \(grouped(tally.returningSignIns)) returning); \(String(format: "%.1f", Double(tally.signInsCompleted) / max(loadSeconds, 1)))/s |")
    print("| sign-ins failed cleanly (error page) | \(grouped(failed)): \(breakdown(tally.failedCleanly)) |")
    print("| sign-ins stopped at the emulator's authorize (injected fault, never reached siwa) | \(grouped(abandoned)): \(breakdown(tally.abandonedAtEmulator)) |")
    print("| session page views (during load) | \(grouped(tally.sessionViews)), of which \(grouped(tally.sessionViewsUnavailable)) outage pages (503) |")
    print("| session pages answered with the outage page (503) outside PostgreSQL's restart (its stop to 30 s after its start), the final count included | \(grouped(outsideRestart(tally.sessionOutages, options: options))) of \(grouped(tally.sessionOutages.count)) |")
    print("| notifications accepted (200) / delivery attempts | \(grouped(sum(tally.notificationsAccepted))) / \(grouped(sum(tally.notificationsSent))): \(breakdown(tally.notificationsAccepted)) |")
    print("| notification deliveries refused then retried | \(breakdown(tally.notificationRetries)) |")
    print("| notifications whose effect was seen on the session page | \(grouped(sum(tally.notificationsSeenApplied))): \(breakdown(tally.notificationsSeenApplied)) |")
    print("| users the clients signed in (must exist) / deleted by account-delete (must be gone) | \(grouped(expectedUsers)) / \(grouped(deletedUsers)) |")
    print("| sessions held at the end: valid / expected | \(grouped(tally.sessionsValid)) / \(grouped(tally.sessionsExpected)) (checked in \(String(format: "%.0f", verifySeconds)) s) |")
    print("| sessions ended by consent-revoked/account-delete: refused / expected | \(grouped(tally.sessionsEndedConfirmed)) / \(grouped(tally.sessionsEndedExpected)) |")
    print("| defects | \(grouped(tally.defectCount)): \(breakdown(tally.defects)) |")
    print("| emulator counters | `\(counters.trimmingCharacters(in: .whitespacesAndNewlines))` |")
    if !tally.defectLog.isEmpty {
        print("\nDefects in time order (t = when the request was sent, seconds into the run; first 30):\n")
        for entry in tally.defectLog.sorted(by: { $0.sentAt < $1.sentAt }).prefix(30) {
            print(String(format: "- t=%.1f s, waited %.1f s: ", entry.sentAt - started, entry.waited) + entry.description)
        }
    }

    guard let (stop, start) = restartWindow(options) else { return }
    let during = tally.completions.filter { $0 > stop + 1 && $0 < start }.count
    let firstAfter = tally.completions.filter { $0 >= start }.min()
    let lastBefore = tally.completions.filter { $0 <= stop }.max()
    let outagePages = tally.unavailableAnswers.filter { $0 >= stop && $0 <= start + 30 }.count
    let afterwards = tally.unavailableAnswers.filter { $0 > start + 30 }.count
    print("\n### PostgreSQL restart (driver's view)\n")
    print("| measure | value |")
    print("|---|---|")
    print("| down (pg_ctl stop -m fast → pg_ctl start returned) | \(String(format: "%.1f", start - stop)) s, from t=\(String(format: "%.0f", stop - started)) s |")
    print("| last sign-in completed before the stop | \(lastBefore.map { String(format: "%.2f s before", stop - $0) } ?? "none") |")
    print("| sign-ins completed while down (more than 1 s after the stop) | \(during) |")
    print("| 503 pages from the stop to 30 s after the start | \(grouped(outagePages)); 503 answers later in the run: \(grouped(afterwards)) (Apple faults) |")
    print("| first sign-in completed after the start | \(firstAfter.map { String(format: "%.2f s after", $0 - start) } ?? "none") |")
}

exit(await run())
