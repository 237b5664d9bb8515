import AsyncHTTPClient
import Foundation
import NIOHTTP1
import Synchronization

/// A test user one client owns: no other client signs it in or sends notifications about it, so what the
/// site must show for it follows from this client's own history.
struct OwnedUser {
    var user: EmulatorUsers.User
    /// At least one sign-in completed: the user must be in the database at the end.
    var signedIn = false
    /// A completed sign-in carried Apple's first-time `user` field: the site must keep showing the name.
    var nameGiven = false
    /// The email-forwarding flag set by the last accepted email notification, if any.
    var forwardingDisabled: Bool?
    /// Deleted by an `account-delete` notification: never signed in again, must be gone at the end.
    var deleted = false
}

/// A session cookie the client holds.
struct HeldSession {
    var cookie: String
    var userIndex: Int
}

/// One simulated browser (plus the share of Apple's notifications about its users).
struct SoakClient {
    let options: Options
    let web: Web
    let deadline: Double
    let progress: Progress
    var users: [OwnedUser]
    var tally = Tally()
    var held: [HeldSession] = []
    /// Sessions ended on purpose by a consent-revoked or account-delete notification: must be refused at the end.
    var ended: [HeldSession] = []
    var sessionCookieName = "siwa_session"

    init(options: Options, web: Web, deadline: Double, progress: Progress, users: [EmulatorUsers.User]) {
        self.options = options
        self.web = web
        self.deadline = deadline
        self.progress = progress
        self.users = users.map { OwnedUser(user: $0) }
    }

    mutating func run() async {
        while epochNow() < deadline {
            guard let index = pickUser() else { break }
            await signIn(userIndex: index)
        }
    }

    /// A new user now and then while some are unused, else one that has signed in before.
    private func pickUser() -> Int? {
        let unused = users.indices.filter { !users[$0].signedIn && !users[$0].deleted }
        let returning = users.indices.filter { users[$0].signedIn && !users[$0].deleted }
        if let fresh = unused.first, returning.isEmpty || Double.random(in: 0..<1) < options.newUserShare { return fresh }
        return returning.randomElement() ?? unused.first
    }

    private mutating func fail(_ kind: String, _ answer: Answer) {
        let label = "\(answer.status) \(answer.errorHeading ?? "(no page)")"
        if answer.status == 503 { tally.unavailableAnswers.append(epochNow()) }
        if answer.status >= 400, answer.errorHeading != nil {
            tally.failedCleanly["\(kind): \(label)", default: 0] += 1
            progress.failed.add(1, ordering: .relaxed)
        } else {
            defect("\(kind) answered \(label)")
        }
    }

    private mutating func defect(_ description: String, error: (any Error)? = nil) {
        if let failure = error as? SendFailure {
            tally.defect(description, sentAt: failure.startedAt, waited: failure.milliseconds / 1000)
        } else {
            tally.defect(description)
        }
        progress.defects.add(1, ordering: .relaxed)
    }

    /// Pauses briefly after a failure, as a person would before trying again (and so an outage is not a spin).
    /// Sends a request to the site and counts it under `kind`; nil, with a defect recorded, when no answer came
    /// (a reset or a timeout from the site is never an acceptable answer).
    private mutating func siteRequest(_ kind: String, _ method: HTTPMethod, _ url: String, headers: [(String, String)] = [], body: String? = nil) async -> Answer? {
        do {
            let answer = try await web.send(method, url, headers: headers, body: body)
            tally.request(kind, "\(answer.status)", milliseconds: answer.milliseconds)
            return answer
        } catch {
            tally.request(kind, "error", milliseconds: nil)
            defect("\(kind): \(describe(error))", error: error)
            return nil
        }
    }

    private func pause() async {
        try? await Task.sleep(for: .milliseconds(Int.random(in: 200...600)))
    }

    // MARK: one sign-in

    mutating func signIn(userIndex: Int) async {
        tally.signInsAttempted += 1
        let wasFresh = !users[userIndex].signedIn

        // 1. Start: pending authorization, binding cookie, 302 to the emulator.
        guard let start = await siteRequest("GET /auth/apple", .GET, options.server + "/auth/apple") else {
            await pause()
            return
        }
        guard start.status == 302 else {
            fail("start", start)
            await pause()
            return
        }
        guard let location = start.headers.first(name: "location"), let binding = start.cookie("siwa_binding") else {
            defect("GET /auth/apple: 302 without Location or binding cookie")
            return
        }
        let bindingName = start.cookieName("siwa_binding")

        // 2. The emulator's headless consent, as the person pressing Continue.
        let user = users[userIndex].user
        let consentURL = location + "&emulator_user=" + Form.component(user.sub) + "&emulator_email=" + (Bool.random() ? "share" : "hide") + "&emulator_respond=json"
        let fields: [String: String]
        do {
            let consent = try await web.send(.GET, consentURL)
            tally.request("emulator authorize", "\(consent.status)", milliseconds: consent.milliseconds)
            guard consent.status == 200 else {
                tally.abandonedAtEmulator["authorize \(consent.status)", default: 0] += 1
                await pause()
                return
            }
            struct Headless: Decodable { var fields: [String: String] }
            guard let decoded = try? JSONDecoder().decode(Headless.self, from: Data(consent.body.utf8)) else {
                tally.abandonedAtEmulator["authorize answer not JSON", default: 0] += 1
                return
            }
            fields = decoded.fields
        } catch {
            tally.request("emulator authorize", "error", milliseconds: nil)
            tally.abandonedAtEmulator["authorize: \(describe(error))", default: 0] += 1
            await pause()
            return
        }

        // 3. Apple's form_post back to the site, with the binding cookie.
        guard let callback = await siteRequest(
            "POST /auth/apple/callback", .POST, options.server + "/auth/apple/callback",
            headers: [("Content-Type", "application/x-www-form-urlencoded"), ("Cookie", "\(bindingName)=\(binding)")],
            body: Form.encode(fields)
        ) else {
            await pause()
            return
        }
        guard callback.status == 303 else {
            fail("callback", callback)
            await pause()
            return
        }
        guard let session = callback.cookie("siwa_session") else {
            defect("callback 303 without a session cookie")
            return
        }
        if callback.headers.first(name: "location") != "/session" {
            defect("callback 303 to an unexpected place")
        }
        sessionCookieName = callback.cookieName("siwa_session")
        tally.signInsCompleted += 1
        tally.completions.append(epochNow())
        progress.completed.add(1, ordering: .relaxed)
        if wasFresh { tally.freshSignIns += 1 } else { tally.returningSignIns += 1 }
        users[userIndex].signedIn = true
        if fields["user"] != nil { users[userIndex].nameGiven = true }
        let heldSession = HeldSession(cookie: session, userIndex: userIndex)
        held.append(heldSession)

        // 4. The session page, a few times.
        for _ in 0..<Int.random(in: 1...3) {
            _ = await view(heldSession, kind: "GET /session")
        }

        // 5. Now and then, a notification from Apple about this user.
        if Double.random(in: 0..<1) < options.notifyShare {
            await notify(userIndex: userIndex, session: heldSession)
        }
    }

    /// Views the session page and checks it shows this client's user as this client knows it. Returns the answer,
    /// or nil when the request itself failed.
    @discardableResult
    private mutating func view(_ session: HeldSession, kind: String) async -> Answer? {
        guard let answer = await siteRequest(kind, .GET, options.server + "/session", headers: [("Cookie", "\(sessionCookieName)=\(session.cookie)")]) else {
            return nil
        }
        tally.sessionViews += 1
        switch answer.status {
        case 200:
            check(answer, for: users[session.userIndex], kind: kind)
        case 503 where answer.errorHeading != nil:
            tally.sessionViewsUnavailable += 1
            tally.unavailableAnswers.append(epochNow())
            tally.sessionOutages.append(epochNow())
        case 401:
            defect("\(kind): a session this client holds was refused (401)")
        default:
            defect("\(kind) answered \(answer.status) \(answer.errorHeading ?? "(no page)")")
        }
        return answer
    }

    private mutating func check(_ page: Answer, for owned: OwnedUser, kind: String) {
        guard page.sessionSubject == owned.user.sub else {
            defect("\(kind): 200 showing another user")
            return
        }
        if owned.nameGiven, !(page.sessionName ?? "").contains(owned.user.firstName) {
            defect("\(kind): the name given at the first sign-in is gone")
        }
        if let disabled = owned.forwardingDisabled, page.showsForwardingDisabled != disabled {
            defect("\(kind): email forwarding flag differs from the last notification")
        }
    }

    // MARK: notifications

    private mutating func notify(userIndex: Int, session: HeldSession) async {
        let activeUsers = users.filter { $0.signedIn && !$0.deleted }.count
        let roll = Double.random(in: 0..<1)
        let type: String
        if roll < 0.7 {
            type = users[userIndex].forwardingDisabled == true ? "email-enabled" : "email-disabled"
        } else if roll < 0.9 || activeUsers <= 2 {
            type = "consent-revoked"
        } else {
            type = "account-delete"
        }
        guard await deliver(type, sub: users[userIndex].user.sub) else { return }
        progress.notifications.add(1, ordering: .relaxed)
        switch type {
        case "email-disabled", "email-enabled":
            users[userIndex].forwardingDisabled = type == "email-disabled"
            for _ in 0..<10 {
                let answer = await view(session, kind: "GET /session (after notification)")
                if answer?.status == 200 {
                    tally.notificationsSeenApplied[type, default: 0] += 1
                    return
                }
                guard answer?.status == 503 else { return }
                try? await Task.sleep(for: .seconds(1))
            }
        default:
            if type == "account-delete" { users[userIndex].deleted = true }
            let ending = held.filter { $0.userIndex == userIndex }
            held.removeAll { $0.userIndex == userIndex }
            ended.append(contentsOf: ending)
            if await refused(session, kind: "GET /session (after notification)") {
                tally.notificationsSeenApplied[type, default: 0] += 1
            }
        }
    }

    /// Posts a notification through the emulator until the site accepts it (200), as Apple retries; false when it
    /// never did within a minute.
    private mutating func deliver(_ type: String, sub: String) async -> Bool {
        struct Delivery: Decodable {
            var status: Int?
            var error: String?
        }
        let body = "{\"type\":\"\(type)\",\"sub\":\"\(sub)\"}"
        let giveUp = epochNow() + 60
        while epochNow() < giveUp {
            tally.notificationsSent[type, default: 0] += 1
            do {
                let answer = try await web.send(.POST, options.emulator + "/emulator/admin/notify", headers: [("Content-Type", "application/json")], body: body)
                tally.request("emulator notify (admin)", "\(answer.status)", milliseconds: answer.milliseconds)
                if answer.status == 200, let deliveries = try? JSONDecoder().decode([Delivery].self, from: Data(answer.body.utf8)), let delivery = deliveries.first {
                    if let status = delivery.status {
                        tally.request("POST /auth/apple/notifications", "\(status)", milliseconds: nil)
                        if status == 200 {
                            tally.notificationsAccepted[type, default: 0] += 1
                            return true
                        }
                        tally.notificationRetries["\(type) \(status)", default: 0] += 1
                        if status == 503 { tally.unavailableAnswers.append(epochNow()) } else { defect("notification \(type) answered \(status)") }
                    } else {
                        tally.request("POST /auth/apple/notifications", "error", milliseconds: nil)
                        defect("notification delivery failed: \(String((delivery.error ?? "?").prefix(100)))")
                    }
                }
            } catch {
                tally.request("emulator notify (admin)", "error", milliseconds: nil)
            }
            try? await Task.sleep(for: .seconds(1))
        }
        defect("notification \(type) not accepted within a minute")
        return false
    }

    /// Whether the site refuses the session (401 page), retrying through an outage.
    private mutating func refused(_ session: HeldSession, kind: String) async -> Bool {
        for _ in 0..<10 {
            guard let answer = await siteRequest(kind, .GET, options.server + "/session", headers: [("Cookie", "\(sessionCookieName)=\(session.cookie)")]) else {
                return false
            }
            switch answer.status {
            case 401 where answer.errorHeading != nil:
                return true
            case 503 where answer.errorHeading != nil:
                tally.sessionOutages.append(epochNow())
                try? await Task.sleep(for: .seconds(1))
            case 200:
                defect("\(kind): a session ended by a notification is still valid")
                return false
            default:
                defect("\(kind) answered \(answer.status) \(answer.errorHeading ?? "(no page)")")
                return false
            }
        }
        return false
    }

    // MARK: the final count

    /// Every session held must still open the session page of its user; every ended one must be refused.
    mutating func verify() async {
        tally.sessionsExpected = held.count
        for session in held {
            for attempt in 0..<5 {
                let answer = await view(session, kind: "GET /session (final count)")
                if answer?.status == 200 {
                    if answer?.sessionSubject == users[session.userIndex].user.sub { tally.sessionsValid += 1 }
                    break
                }
                // Only an outage page is worth another try; a refusal or a broken answer is already a defect.
                guard answer?.status == 503, attempt < 4 else { break }
                try? await Task.sleep(for: .seconds(1))
            }
        }
        tally.sessionsEndedExpected = ended.count
        for session in ended where await refused(session, kind: "GET /session (final count, ended)") {
            tally.sessionsEndedConfirmed += 1
        }
    }
}
