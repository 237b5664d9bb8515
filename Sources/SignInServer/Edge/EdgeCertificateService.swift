import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import ServiceLifecycle
import UnixSignals

/// HTTP-01's answers while an order waits (`/.well-known/acme-challenge/<token>` on `port`).
final class HTTP01Answers: Sendable {
    private let answers = NIOLockedValueBox([String: String]())

    func answer(token: String) -> String? { answers.withLockedValue { $0[token] } }
    func set(token: String, keyAuthorization: String) { answers.withLockedValue { $0[token] = keyAuthorization } }
    func clear(token: String) { answers.withLockedValue { _ = $0.removeValue(forKey: token) } }
}

/// Keeps the edge's certificate in service (issue 36). With the operator's files: loads them before the server
/// starts, and again when they change (looked at every few seconds) or on SIGHUP; a pair that does not load leaves
/// the one served in place. With ACME: serves the stored certificate, and orders one when there is none or two thirds
/// of its life have passed, or sooner when the CA's renewal information (RFC 9773) suggests it, one instance at a time
/// (`EdgeStore.whileOrdering`); a failed order is tried again after a backoff that doubles (with jitter), while the
/// certificate in service stays until it is replaced.
final class EdgeCertificateService: Service, Sendable {
    let settings: EdgeSettings
    let certificates: EdgeCertificates
    let http01: HTTP01Answers
    let store: any EdgeStore
    let metrics: ServerMetrics
    let logger: Logger
    /// Finished once `prepare` has run: the store is migrated then (PostgreSQL's only once the server's services
    /// run), so nothing is ordered or stored before.
    private let prepared = AsyncStream<Void>.makeStream()

    init(settings: EdgeSettings, certificates: EdgeCertificates, http01: HTTP01Answers, store: any EdgeStore, metrics: ServerMetrics, logger: Logger) {
        self.settings = settings
        self.certificates = certificates
        self.http01 = http01
        self.store = store
        self.metrics = metrics
        self.logger = logger
    }

    /// The store's name of the certificate for `domains` from this ACME directory (`EdgeRecordNames`).
    var certificateName: String {
        var directory: String?
        if case .acme(let acme) = settings.source { directory = acme.directory }
        return EdgeRecordNames.certificate(directory: directory, domains: settings.domains)
    }

    /// Before the server listens: the operator's files must load (a start that cannot serve HTTPS stops here), or the
    /// stored certificate, if any, is served at once.
    func prepare() async throws {
        defer { prepared.continuation.finish() }
        switch settings.source {
        case .files(let certificate, let key):
            try loadFiles(certificate: certificate, key: key)
        case .acme:
            _ = try? await loadStored()
        }
    }

    func run() async throws {
        for await _ in prepared.stream {}
        guard !Task.isCancelled, !Task.isShuttingDownGracefully else { return }
        switch settings.source {
        case .files(let certificate, let key):
            try await watch(certificate: certificate, key: key)
        case .acme(let acme):
            try await keepOrdered(acme)
        }
    }

    // MARK: The operator's files

    @discardableResult
    func loadFiles(certificate: String, key: String) throws -> EdgeCertificates.Served {
        let (chain, keyPEM) = try Self.readFiles(certificate: certificate, key: key)
        let served = try certificates.install(chainPEM: chain, keyPEM: keyPEM)
        observe(served)
        return served
    }

    /// The operator's certificate chain and key, as PEM.
    private static func readFiles(certificate: String, key: String) throws -> (chain: String, key: String) {
        guard let chain = FileManager.default.contents(atPath: certificate).flatMap({ String(data: $0, encoding: .utf8) }) else {
            throw EdgeError(description: "tls_cert_file: cannot read \(certificate)")
        }
        guard let keyPEM = FileManager.default.contents(atPath: key).flatMap({ String(data: $0, encoding: .utf8) }) else {
            throw EdgeError(description: "tls_key_file: cannot read \(key)")
        }
        return (chain, keyPEM)
    }

    private func watch(certificate: String, key: String) async throws {
        let signals = await UnixSignalsSequence(trapping: .sighup)
        // Of the files the paths lead to, through symbolic links (a Kubernetes secret's files are links into a
        // directory it swaps whole, which leaves the links themselves unchanged), and which files those are.
        @Sendable func stamp() -> String {
            [certificate, key].map { path in
                let target = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
                let attributes = try? FileManager.default.attributesOfItem(atPath: target)
                return "\(target)/\((attributes?[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0)/\(attributes?[.size] as? Int ?? 0)"
            }.joined(separator: "|")
        }
        let first = stamp()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for await _ in signals { self.reload(certificate: certificate, key: key, why: "SIGHUP") }
            }
            group.addTask {
                var last = first
                while !Task.isCancelled {
                    try await Task.sleep(for: .seconds(2))
                    let now = stamp()
                    if now != last {
                        last = now
                        self.reload(certificate: certificate, key: key, why: "the files changed")
                    }
                }
            }
            try await gracefulShutdown()
            group.cancelAll()
        }
    }

    private func reload(certificate: String, key: String, why: String) {
        do {
            let (chain, keyPEM) = try Self.readFiles(certificate: certificate, key: key)
            if certificates.inService(chainPEM: chain, keyPEM: keyPEM) != nil {
                // The same pair: its TLS context stays, and the sessions it issued resume.
                return logger.info("TLS certificate files unchanged; the certificate in service stays", metadata: ["why": "\(why)"])
            }
            let served = try certificates.install(chainPEM: chain, keyPEM: keyPEM)
            observe(served)
            logger.info("TLS certificate reloaded", metadata: ["why": "\(why)", "names": "\(served.names.joined(separator: ","))", "not_after": "\(served.notAfter)"])
        } catch {
            // A half-written pair (the certificate copied, not yet the key) fails here and loads at the next look.
            logger.error("TLS certificate files not reloaded; the one in service stays", metadata: ["why": "\(why)", "reason": "\(error)"])
        }
    }

    // MARK: ACME

    /// The stored certificate, served; nil when there is none. A certificate in service that the store lacks, or
    /// holds an older one of (its save failed once it was issued), stays in service and is stored again: neither
    /// ordered anew nor replaced by the older one.
    func loadStored() async throws -> EdgeCertificates.Served? {
        let record = try await store.edgeRecord(name: certificateName)
        let current = certificates.served(settings.domains[0])
        if let current, record.map({ ($0.notAfter ?? .distantPast) < current.notAfter }) ?? true {
            try? await store.saveEdgeRecord(certificateRecord(current))
            return current
        }
        guard let record else { return nil }
        let (keyPEM, chainPEM) = Self.split(record.value)
        if let current, current.chainPEM == chainPEM { return current }
        let served = try certificates.install(chainPEM: chainPEM, keyPEM: keyPEM)
        observe(served)
        return served
    }

    /// The store's record of `served`: its key, then its chain (`split` reads them back).
    func certificateRecord(_ served: EdgeCertificates.Served) -> EdgeRecord {
        EdgeRecord(name: certificateName, value: served.keyPEM + "\n" + served.chainPEM, notAfter: served.notAfter, updatedAt: Date())
    }

    /// When the certificate in service should be renewed: `renewAt` of its life, less up to 2 % of it so that
    /// instances and sites do not all order at once. That jitter is the certificate's own (from its chain's
    /// SHA-256), the same at every look and on every instance: drawn anew at each look, the earliest draw won, and
    /// renewals bunched at the early end.
    func renewalDate(_ served: EdgeCertificates.Served, acme: ACMESettings) -> Date {
        let life = max(0, served.notAfter.timeIntervalSince(served.notBefore))
        let digest = SHA256.hash(data: Data(served.chainPEM.utf8))
        let fraction = Double(digest.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }) / Double(UInt64.max)
        return served.notBefore + life * acme.renewAt - life * 0.02 * fraction
    }

    private func keepOrdered(_ acme: ACMESettings) async throws {
        var backoff = acme.firstBackoff
        // No order before this (a backoff after a failure); the store is still looked at meanwhile, so a certificate
        // another instance stored is served within `storeLook`.
        var nextAttempt = Date.distantPast
        let storeLook: Int64 = 10
        while !Task.isShuttingDownGracefully, !Task.isCancelled {
            let served = try? await loadStored()
            var due = served.map { renewalDate($0, acme: acme) } ?? .distantPast
            // The CA may suggest an earlier renewal (RFC 9773): a certificate it will revoke, say. Never a later one.
            if let served, let suggested = await suggestedRenewal(served, acme: acme), suggested < due { due = suggested }
            var wait: Duration
            if due > Date() {
                // Until it is due, at most an hour (another instance may have renewed it in the store), or until the
                // CA is to be asked again for its renewal information.
                let nextAsk = renewalAdvice.withLockedValue { advice in advice?.certID == served?.certID ? advice?.nextAsk : nil }
                wait = Self.pause(until: min(due, nextAsk ?? due), atMost: 3600)
            } else if nextAttempt > Date() {
                wait = Self.pause(until: nextAttempt, atMost: storeLook)
            } else {
                do {
                    if try await order(acme, replacing: served, backoff: backoff) {
                        backoff = acme.firstBackoff
                        wait = .seconds(1)
                    } else {
                        // Another instance orders: look again soon for what it stored.
                        wait = .seconds(storeLook)
                    }
                } catch where Task.isCancelled || Task.isShuttingDownGracefully {
                    return
                } catch let waiting as OrderWaiting {
                    // A failed order's wait, in the store (this instance's before a restart, or another's): no order
                    // before it ends, and no new failure to count.
                    nextAttempt = waiting.until
                    wait = Self.pause(until: waiting.until, atMost: storeLook)
                } catch {
                    let remaining = served.map { $0.notAfter.timeIntervalSinceNow }
                    // The wait `order` stored, so that this instance and the others wait alike; worked out here when
                    // the order failed before it could store one.
                    let failed = error as? OrderFailed
                    let until = failed?.until ?? Date() + Self.retryDelay(after: error, backoff: backoff, remaining: remaining).timeInterval
                    logger.error(
                        "ACME order failed; tried again later, the certificate in service stays",
                        metadata: [
                            "reason": "\(failed?.underlying ?? error)", "retry_in_seconds": "\(Int(until.timeIntervalSinceNow.rounded(.up)))",
                            "served_expires_in_seconds": "\(remaining.map { String(Int($0)) } ?? "none")",
                        ]
                    )
                    nextAttempt = until
                    backoff = min(backoff * 2, acme.maximumBackoff)
                    wait = Self.pause(until: until, atMost: storeLook)
                }
            }
            // A shutdown ends the wait (an hour at most) at once.
            let pause = wait
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: pause) }
            } catch {
                return
            }
        }
    }

    /// The loop's pause before `until`: at least a second, at most `atMost` seconds (the loop looks at the store again
    /// then).
    static func pause(until: Date, atMost: Int64) -> Duration {
        .seconds(min(atMost, max(1, Int64(until.timeIntervalSinceNow.rounded(.up)))))
    }

    // MARK: The CA's renewal information (RFC 9773)

    /// What the CA said of the served certificate's renewal: its window, the time this instance picked in it, and when
    /// to ask again. Each instance asks for itself (a GET, a few a day); the one that finds the certificate due orders,
    /// under the ordering lock, and the others serve what it stores.
    struct RenewalAdvice: Sendable {
        let certID: String
        var window: RenewalInfo?
        var picked: Date?
        var nextAsk: Date
        var failures = 0
    }

    let renewalAdvice = NIOLockedValueBox<RenewalAdvice?>(nil)

    /// The time picked in the CA's suggested window for renewing `served`, asking the CA when due: at once for a
    /// certificate newly served, then when it said to ask again (`RenewalInfo.nextAsk`); after a failure, from a
    /// minute on, doubling, at most six hours. Nil when the CA serves no renewal information (asked again daily), has
    /// not answered, or the certificate has expired.
    func suggestedRenewal(_ served: EdgeCertificates.Served, acme: ACMESettings, now: Date = Date()) async -> Date? {
        guard let certID = served.certID, served.notAfter > now else { return nil }
        var advice = renewalAdvice.withLockedValue { $0 }.flatMap { $0.certID == certID ? $0 : nil } ?? RenewalAdvice(certID: certID, nextAsk: now)
        if advice.nextAsk <= now {
            await ask(&advice, acme: acme, now: now)
            renewalAdvice.withLockedValue { $0 = advice }
        }
        return advice.picked
    }

    private func ask(_ advice: inout RenewalAdvice, acme: ACMESettings, now: Date) async {
        let http: HTTPClient
        do {
            http = try Self.httpClient(caFile: acme.caFile)
        } catch {
            advice.nextAsk = now + 6 * 3600
            return
        }
        do {
            // Renewal information is asked for without an account (a plain GET): a key of no account, not the stored
            // one, which this must neither make nor change outside the ordering lock.
            let client = ACMEClient(directoryURL: acme.directory, http: http, key: P256.Signing.PrivateKey(), accountURL: nil, logger: logger)
            let directory = try await client.directory()
            if directory.renewalInfo == nil {
                advice.window = nil
                advice.picked = nil
                advice.nextAsk = now + 24 * 3600
            } else {
                let info = try await client.renewalInfo(directory, certID: advice.certID)
                if info.start != advice.window?.start || info.end != advice.window?.end {
                    let picked = info.pickedTime()
                    advice.picked = picked
                    logger.info(
                        "the CA suggests when to renew the certificate",
                        metadata: [
                            "window_start": "\(info.start)", "window_end": "\(info.end)", "renew_at": "\(picked)",
                            "explanation": "\(info.explanationURL ?? "none")",
                        ]
                    )
                }
                advice.window = info
                advice.failures = 0
                advice.nextAsk = now + info.nextAsk.timeInterval
            }
        } catch {
            advice.failures += 1
            let backoff = min(60 * pow(2, Double(min(advice.failures - 1, 10))), 6 * 3600)
            let asked = (error as? ACMEClient.Failure)?.retryAfter.map { RenewalInfo.askAgain(after: $0).timeInterval }
            advice.nextAsk = now + max(backoff, asked ?? 0)
            logger.warning("the CA's renewal information not read; renewal keeps its own schedule", metadata: ["reason": "\(error)"])
        }
        try? await http.shutdown()
    }

    /// No order is asked for before `until`: an earlier one failed (`orderWaitName`).
    struct OrderWaiting: Error, CustomStringConvertible {
        let until: Date
        var description: String { "not asked: after a failed order, no new one before \(until)" }
    }

    /// An order failed, and no other is asked for before `until` (stored as `orderWaitName`).
    struct OrderFailed: Error, CustomStringConvertible {
        let underlying: any Error
        let until: Date
        var description: String { "\(underlying)" }
    }

    /// The wait a CA asked for (a rate limit's `Retry-After`), within its limits: at most a week (Let's Encrypt's
    /// longest limit), and, while a certificate is served with `remaining` seconds left, at most a quarter of them, so
    /// that a wait the CA asks for does not let it lapse. Nil when the CA asked for none.
    static func askedWait(after error: any Error, remaining: TimeInterval?) -> Duration? {
        guard let asked = (error as? ACMEClient.Failure)?.retryAfter else { return nil }
        var limit = Duration.seconds(7 * 24 * 3600)
        if let remaining { limit = min(limit, .seconds(Int64(max(0, remaining) / 4))) }
        return min(asked, limit)
    }

    /// How long after a failed order the next is tried: `backoff` and up to a tenth more (jitter), or the wait the CA
    /// asked for (`askedWait`) when that is longer: a CA is not asked sooner than it said.
    static func retryDelay(after error: any Error, backoff: Duration, remaining: TimeInterval? = nil) -> Duration {
        let delay = backoff + .milliseconds(Int64.random(in: 0...(backoff.components.seconds * 100)))
        guard let asked = askedWait(after: error, remaining: remaining), asked > delay else { return delay }
        return asked
    }

    /// The store's name of the time before which no new order is asked for `domains` from this directory, after a
    /// failed one: the backoff, or the wait the CA asked for (`askedWait`) when longer. Kept in the store, so that
    /// neither another instance nor this one after a restart asks sooner.
    var orderWaitName: String { "order-wait " + certificateName }

    /// One order for `domains`, challenges tried in the configured order (a new order for the next when one fails);
    /// false when another instance holds the ordering lock. `replacing`: the certificate found due (by its age or by
    /// the CA's renewal information), named to the CA as the one replaced. After a failure no instance orders again
    /// before `backoff` (with jitter) or the wait the CA asked for has passed (`orderWaitName`).
    func order(_ acme: ACMESettings, replacing: EdgeCertificates.Served? = nil, backoff: Duration? = nil) async throws -> Bool {
        let done: Bool? = try await store.whileOrdering { [self] in
            // Another instance may have stored a fresh one while this one waited.
            let served = try? await loadStored()
            if let served, served.chainPEM != replacing?.chainPEM, renewalDate(served, acme: acme) > Date() { return true }
            // An order failed (here, on another instance, or here before a restart), or the CA asked to wait.
            if let until = try? await store.edgeRecordExpiry(name: orderWaitName), until > Date() { throw OrderWaiting(until: until) }
            let http = try Self.httpClient(caFile: acme.caFile)
            do {
                try await orderCertificate(acme, http: http, replaces: served?.certID)
                try await http.shutdown()
            } catch {
                try? await http.shutdown()
                let remaining = served?.notAfter.timeIntervalSinceNow
                // Only a refusal of the CA's (a status it answered with) holds every instance back. One that never
                // reached the CA, or whose validation failed, may be this instance's own (its network, its trust of the
                // CA): another instance may well succeed, so this one alone waits.
                guard (error as? ACMEClient.Failure)?.status != nil else { throw error }
                let wait = backoff.map { Self.retryDelay(after: error, backoff: $0, remaining: remaining) } ?? Self.askedWait(after: error, remaining: remaining)
                guard let wait, wait > .zero else { throw error }
                let until = Date() + wait.timeInterval
                try? await store.saveEdgeRecord(EdgeRecord(name: orderWaitName, value: "\(error)", notAfter: until, updatedAt: Date()))
                throw OrderFailed(underlying: error, until: until)
            }
            try? await store.deleteEdgeRecord(name: orderWaitName)
            return true
        }
        return done ?? false
    }

    /// A client for the ACME server, trusting `caFile` (`acme_ca_file`) when given, else the system's roots.
    static func httpClient(caFile: String?) throws -> HTTPClient {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let caFile {
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(caFile))
        }
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: HTTPClient.Configuration(tlsConfiguration: tls))
    }

    private func accountKey(_ acme: ACMESettings) async throws -> (P256.Signing.PrivateKey, String?) {
        let name = "acme-account " + acme.directory
        if let record = try await store.edgeRecord(name: name), let data = record.value.data(using: .utf8),
            let json = try JSONSerialization.jsonObject(with: data) as? [String: String], let pem = json["key"]
        {
            return (try P256.Signing.PrivateKey(pemRepresentation: pem), json["url"])
        }
        let key = P256.Signing.PrivateKey()
        try await saveAccount(acme, key: key, url: nil)
        return (key, nil)
    }

    private func saveAccount(_ acme: ACMESettings, key: P256.Signing.PrivateKey, url: String?) async throws {
        var json = ["key": key.pemRepresentation]
        if let url { json["url"] = url }
        let value = String(decoding: try JSONSerialization.data(withJSONObject: json, options: [.sortedKeys]), as: UTF8.self)
        try await store.saveEdgeRecord(EdgeRecord(name: "acme-account " + acme.directory, value: value, notAfter: nil, updatedAt: Date()))
    }

    private func orderCertificate(_ acme: ACMESettings, http: HTTPClient, replaces: String?) async throws {
        let client: ACMEClient
        let directory: ACMEClient.Directory
        let accountKey: P256.Signing.PrivateKey
        do {
            let accountURL: String?
            (accountKey, accountURL) = try await self.accountKey(acme)
            client = ACMEClient(directoryURL: acme.directory, http: http, key: accountKey, accountURL: accountURL, logger: logger)
            directory = try await client.directory()
            let account = try await client.account(directory, email: acme.email, externalAccount: acme.externalAccount)
            if account != accountURL { try await saveAccount(acme, key: accountKey, url: account) }
        } catch {
            // The ACME server unreachable, or the account refused: before any challenge.
            metrics.acmeOrder(outcome: "failed", challenge: "none")
            throw error
        }
        var failures: [String] = []
        // The longest wait a CA asked for in any of the tries, and a status it refused one with.
        var asked: Duration?
        var refusedWith: Int?
        var registeredAgain = false
        var challenges = acme.challenges[...]
        while let challenge = challenges.first {
            do {
                try await orderCertificate(client: client, directory: directory, challenge: challenge, acme: acme, replaces: replaces)
                metrics.acmeOrder(outcome: "issued", challenge: challenge.rawValue)
                return
            } catch let failure as ACMEClient.Failure where failure.accountRefused && !registeredAgain {
                // The stored account URL is one the CA no longer knows: the key is registered again (RFC 8555 7.3.1
                // finds an account it knows by its key), the new URL stored, and the same challenge tried again, once.
                registeredAgain = true
                logger.warning("the ACME server refused siwa's account; registering it again", metadata: ["reason": "\(failure)"])
                client.forgetAccount()
                let account = try await client.account(directory, email: acme.email, externalAccount: acme.externalAccount)
                try await saveAccount(acme, key: accountKey, url: account)
                continue
            } catch let after as AfterValidation {
                // Validated: what failed then (finalizing, the download, the store) is no matter of the challenge, and
                // an order with another would be validated at once and issued again, against the CA's limit on
                // duplicate certificates.
                metrics.acmeOrder(outcome: "failed", challenge: challenge.rawValue)
                throw after.underlying
            } catch {
                metrics.acmeOrder(outcome: "failed", challenge: challenge.rawValue)
                logger.warning("ACME order with \(challenge.rawValue) failed", metadata: ["reason": "\(error)"])
                if let failure = error as? ACMEClient.Failure {
                    // Refused for the CA's rate limits: an order with another challenge would be refused too, and count.
                    if failure.rateLimited { throw failure }
                    if let wait = failure.retryAfter { asked = max(asked ?? wait, wait) }
                    refusedWith = refusedWith ?? failure.status
                }
                failures.append("\(challenge.rawValue): \(error)")
                challenges.removeFirst()
            }
        }
        throw ACMEClient.Failure(step: "order", detail: failures.joined(separator: "; "), status: refusedWith, retryAfter: asked)
    }

    private func orderCertificate(
        client: ACMEClient, directory: ACMEClient.Directory, challenge: ACMESettings.Challenge, acme: ACMESettings, replaces: String?
    ) async throws {
        let order = try await client.newOrder(directory, domains: settings.domains, replaces: replaces)
        var cleanups: [@Sendable () -> Void] = []
        defer { for cleanup in cleanups { cleanup() } }
        for url in order.authorizations {
            let authorization = try await client.authorization(url, directory: directory)
            if authorization.status == "valid" { continue }
            guard let offered = authorization.challenges[challenge.rawValue] else {
                throw ACMEClient.Failure(step: "authorization", detail: "\(authorization.domain) offers no \(challenge.rawValue) challenge")
            }
            let keyAuthorization = client.keyAuthorization(token: offered.token)
            // In the store too: behind a load balancer the CA's validation may reach another instance, which looks
            // there for what it does not hold (`challengeAnswer`).
            let shared = Self.challengeName(challenge, domain: authorization.domain, token: offered.token)
            try await store.saveEdgeRecord(EdgeRecord(name: shared, value: keyAuthorization, notAfter: Date() + 3600, updatedAt: Date()))
            let store = store
            cleanups.append { Task { try? await store.deleteEdgeRecord(name: shared) } }
            switch challenge {
            case .http01:
                http01.set(token: offered.token, keyAuthorization: keyAuthorization)
                let answers = http01
                cleanups.append { answers.clear(token: offered.token) }
            case .tlsALPN01:
                try certificates.setChallenge(domain: authorization.domain, keyAuthorization: keyAuthorization)
                let certificates = certificates
                cleanups.append { certificates.clearChallenge(domain: authorization.domain) }
            }
            try await client.respond(to: offered.url, directory: directory)
            try await poll(acme, what: "authorization of \(authorization.domain)") {
                let now = try await client.authorization(url, directory: directory)
                switch now.status {
                case "valid": return .done
                case "pending", "processing": return .again(asked: now.retryAfter)
                default: throw ACMEClient.Failure(step: "authorization", detail: "\(authorization.domain) is \(now.status): \(now.error ?? "no reason given")")
                }
            }
        }
        do {
            try await finishOrder(order, client: client, directory: directory, challenge: challenge, acme: acme)
        } catch {
            throw AfterValidation(underlying: error)
        }
    }

    /// An order's failure once its names were validated.
    struct AfterValidation: Error {
        let underlying: any Error
    }

    /// An order whose authorizations are valid: finalized, its certificate fetched, served and stored.
    private func finishOrder(
        _ order: ACMEClient.Order, client: ACMEClient, directory: ACMEClient.Directory, challenge: ACMESettings.Challenge, acme: ACMESettings
    ) async throws {
        var order = order
        // Finalize with a new key (P-256): the account key never serves TLS.
        let certificateKey = P256.Signing.PrivateKey()
        let csr = try EdgeTLS.signingRequest(domains: settings.domains, key: certificateKey)
        try await poll(acme, what: "order ready") {
            order = try await client.order(order.url, directory: directory)
            if order.status == "invalid" { throw ACMEClient.Failure(step: "order", detail: "invalid: \(order.error ?? "no reason given")") }
            return order.status == "ready" || order.status == "valid" ? .done : .again(asked: order.retryAfter)
        }
        if order.status == "ready" { order = try await client.finalize(order, csr: csr, directory: directory) }
        // The finalize's answer first (an order `processing`, with its Retry-After), then the order as polled.
        var looked = false
        try await poll(acme, what: "certificate issued") {
            if looked { order = try await client.order(order.url, directory: directory) }
            looked = true
            if order.status == "valid", order.certificate != nil { return .done }
            if order.status == "invalid" { throw ACMEClient.Failure(step: "finalize", detail: "invalid: \(order.error ?? "no reason given")") }
            return .again(asked: order.retryAfter)
        }
        guard let url = order.certificate else { throw ACMEClient.Failure(step: "certificate", detail: "no certificate URL") }
        let chain = try await client.certificateChain(url, directory: directory)
        let keyPEM = certificateKey.pemRepresentation
        // Served only when it loads: a chain that does not is never stored.
        let served = try certificates.install(chainPEM: chain, keyPEM: keyPEM)
        try await store.saveEdgeRecord(certificateRecord(served))
        observe(served)
        logger.info("TLS certificate obtained", metadata: ["names": "\(served.names.joined(separator: ","))", "not_after": "\(served.notAfter)", "challenge": "\(challenge.rawValue)"])
    }

    /// What a poll found: done, or to be asked again (after the server's `Retry-After` when it gave one).
    enum Poll {
        case done
        case again(asked: Duration?)
    }

    /// Asks `check` every half second (then every two), or as often as the server's `Retry-After` says when that is
    /// longer (RFC 8555 7.4, 7.5.1), until it is done, for at most `pollTimeout`.
    private func poll(_ acme: ACMESettings, what: String, _ check: () async throws -> Poll) async throws {
        let deadline = ContinuousClock.now + acme.pollTimeout
        var delay = Duration.milliseconds(500)
        while case .again(let asked) = try await check() {
            let now = ContinuousClock.now
            guard now < deadline else { throw ACMEClient.Failure(step: what, detail: "no answer within \(acme.pollTimeout)") }
            // Not past the deadline: asked there once more.
            try await Task.sleep(for: min(max(delay, asked ?? .zero), deadline - now))
            delay = min(delay * 2, .seconds(2))
        }
    }

    /// The store's name of a challenge's key authorization: by token for HTTP-01, by domain for TLS-ALPN-01.
    static func challengeName(_ challenge: ACMESettings.Challenge, domain: String, token: String) -> String {
        switch challenge {
        case .http01: "challenge http-01 " + token
        case .tlsALPN01: "challenge tls-alpn-01 " + domain
        }
    }

    /// A challenge another instance is answering, from the store (nil: none, or expired).
    func challengeAnswer(_ challenge: ACMESettings.Challenge, domain: String = "", token: String = "") async -> String? {
        guard let record = try? await store.edgeRecord(name: Self.challengeName(challenge, domain: domain, token: token)),
            (record.notAfter ?? .distantPast) > Date()
        else { return nil }
        return record.value
    }

    private func observe(_ served: EdgeCertificates.Served) {
        for name in served.names { metrics.certificateExpiry(domain: name, seconds: served.notAfter.timeIntervalSinceNow) }
    }

    /// A stored value: the key's PEM, then the chain's.
    static func split(_ value: String) -> (key: String, chain: String) {
        guard let start = value.range(of: "-----BEGIN CERTIFICATE-----") else { return (value, "") }
        return (String(value[..<start.lowerBound]), String(value[start.lowerBound...]))
    }
}
