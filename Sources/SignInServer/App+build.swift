import AppleSignIn
import AsyncHTTPClient
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import ServiceLifecycle

/// Everything `buildApplication` wires together, exposed for tests and for the CLI.
public struct ServerComponents: Sendable {
    /// The store.
    public let store: any SignInStore
    /// Apple's key set cache.
    public let keySet: AppleKeySet
    /// The client secret cache.
    public let secrets: ClientSecretSigner
    /// The sign-in flow.
    public let flow: SignInFlow
    /// Native apps' sign-in.
    public let native: NativeSignIn
    /// Notification verification.
    public let notifications: NotificationVerifier
    /// Deletion, refresh checks, revocation queue.
    public let lifecycle: AccountLifecycle
    /// Metrics served at `/metrics`.
    public let metrics: ServerMetrics
    /// The signed identity the front hands on (`X-Siwa-Assertion`).
    public let assertions: IdentityAssertions
    /// The keys of the OpenID Provider's id_tokens.
    public let providerKeys: ProviderKeys
    /// Sign-ins, sign-outs, denied decisions and changes, as `siwa.audit` log lines and `audit_log`.
    public let audit: AuditTrail
}

/// Opens the store `settings.database` names: a PostgreSQL URL or a SQLite path.
/// `operationTimeout`: how long one PostgreSQL operation may take (serve's requests get a 503 past it).
public func makeStore(settings: ServerSettings, logger: Logger, operationTimeout: Duration = .seconds(5)) throws -> any SignInStore {
    let cipher = try TokenCipher(base64Keys: settings.dataKeys)
    // Either backend gets the same session cache in front (`SessionCachedStore`).
    // Either writes, with each change it reports, a delivery to every app of `event_webhooks` that wants it.
    if settings.database.hasPrefix("postgres://") || settings.database.hasPrefix("postgresql://") {
        let store = try PostgresStore(url: settings.database, cipher: cipher, logger: logger, operationTimeout: operationTimeout)
        store.events.set(settings.eventWebhooks)
        return SessionCachedStore(store, cacheSeconds: settings.checkCacheSeconds)
    }
    let store = try SQLiteStore(path: settings.database, cipher: cipher)
    store.events.set(settings.eventWebhooks)
    return SessionCachedStore(store, cacheSeconds: settings.checkCacheSeconds, logger: logger)
}

/// Builds the store, the Apple clients and the flow from settings. A SQLite store is migrated here; a
/// PostgreSQL store needs its client running first, so `buildApplication` migrates it before serving.
public func buildComponents(settings: ServerSettings, httpClient: HTTPClient, store: (any SignInStore)? = nil, logger: Logger) async throws -> ServerComponents {
    let store = try store ?? makeStore(settings: settings, logger: logger)
    if store.services.isEmpty { try await store.migrate() }
    let timeout = TimeAmount.milliseconds(Int64(settings.appleTimeoutMS))
    // The Apple library logs under its own label (at debug: what it sees reaches the operator as this
    // server's failures, metrics and readiness), through the same handler.
    let appleLogger = logger.module("siwa.apple")
    let keySet = AppleKeySet(source: .remote(settings.apple.endpoint("/auth/keys"), httpClient, timeout: timeout), logger: appleLogger)
    // The web flow accepts the Services ID only; native apps their bundle IDs only; notifications any of ours.
    let verifier = IdentityTokenVerifier(keySet: keySet, audiences: [settings.apple.servicesID], issuers: settings.apple.acceptedIssuers)
    let nativeVerifier = IdentityTokenVerifier(keySet: keySet, audiences: settings.apple.extraAudiences, issuers: settings.apple.acceptedIssuers)
    let notifications = NotificationVerifier(keySet: keySet, audiences: settings.apple.audiences, issuers: settings.apple.acceptedIssuers)
    let secrets = ClientSecretSigner(configuration: settings.apple)
    let metrics = ServerMetrics()
    let client = AppleIDClient(configuration: settings.apple, httpClient: httpClient, secrets: secrets, timeout: timeout, logger: appleLogger) { path, outcome, duration in
        metrics.appleCall(path: path, outcome: outcome, duration: duration)
    }
    let flow = SignInFlow(configuration: settings.apple, returnURL: settings.returnURL, store: store, verifier: verifier, client: client, sessionLifetime: settings.sessionLifetime)
    let native = NativeSignIn(store: store, verifier: nativeVerifier, client: client, sessionLifetime: settings.sessionLifetime)
    let audit = AuditTrail(path: settings.auditLogPath, metrics: metrics, logger: logger.module("siwa.audit"))
    let lifecycle = AccountLifecycle(store: store, client: client, audit: audit)
    settings.front.access.onReload { previous, current in
        let changes = AccessConfiguration.changes(from: previous, to: current)
        if !changes.isEmpty { audit.record(AuditEvent("access-reloaded", reason: changes.joined(separator: "; "), actor: "configuration")) }
    }
    let assertions = IdentityAssertions(store: store, issuer: settings.front.publicOrigin, logger: logger)
    return ServerComponents(
        store: store, keySet: keySet, secrets: secrets, flow: flow, native: native, notifications: notifications, lifecycle: lifecycle, metrics: metrics,
        assertions: assertions, providerKeys: ProviderKeys(store: store, logger: logger.module("siwa.provider")), audit: audit
    )
}

/// Builds the router of the web front.
public func buildRouter(settings: ServerSettings, components: ServerComponents, renderer: PageRenderer, logger: Logger = Logger(label: "siwa")) -> Router<ServerContext> {
    buildRouter(
        settings: settings, components: components, renderer: renderer, pages: buildSitePages(settings: settings, components: components, renderer: renderer, logger: logger),
        logger: logger
    )
}

/// The sign-in, session and invitation pages, for the router and the byte path alike.
func buildSitePages(settings: ServerSettings, components: ServerComponents, renderer: PageRenderer, logger: Logger) -> SitePages {
    let cookies = CookiePolicy(secure: settings.secureCookies, domain: settings.cookieDomain)
    let invitations = Invitations(store: components.store, access: settings.front.access, audit: components.audit, logger: logger)
    return SitePages(
        signIn: SignInController(
            flow: components.flow, renderer: renderer, cookies: cookies, settings: settings, metrics: components.metrics,
            proxy: settings.addressResolver
        ),
        session: SessionController(store: components.store, renderer: renderer, cookies: cookies, redirects: settings.front.redirects, audit: components.audit),
        invitation: InvitationController(
            invitations: invitations, store: components.store, renderer: renderer, proxy: settings.addressResolver, home: settings.upstream == nil ? "/session" : "/"
        ),
        store: components.store, cookies: cookies, siteAtRoot: settings.upstream == nil
    )
}

/// Builds the router of the web front, with `pages` (which the byte path answers too).
func buildRouter(settings: ServerSettings, components: ServerComponents, renderer: PageRenderer, pages: SitePages, logger: Logger) -> Router<ServerContext> {
    let router = Router(context: ServerContext.self)
    router.add(middleware: SecurityHeadersMiddleware(settings: settings))
    router.add(middleware: ErrorPageMiddleware(renderer: renderer))
    let proxy = settings.addressResolver
    if settings.rateLimitPerMinute > 0 {
        router.add(middleware: RateLimitMiddleware(
            perMinute: settings.rateLimitPerMinute,
            // Each of these starts something a flood could pile up (a pending sign-in, a session, a device grant).
            paths: ["/auth/apple", "/auth/apple/callback", "/auth/apple/popup", "/api/apple/native", "/auth/api/apple/native", "/oauth2/device_authorization"],
            resolver: proxy, renderer: renderer
        ))
    }
    router.add(middleware: FileMiddleware(URL(fileURLWithPath: settings.publicDirectory).resolvingSymlinksInPath().path, cacheControl: .init([(MediaType(type: .any), [.maxAge(3600)])]), logger: logger))
    let cookies = CookiePolicy(secure: settings.secureCookies, domain: settings.cookieDomain)
    // The routes that need to know who is asking: the session is looked up once, by this middleware.
    let lookup = SessionMiddleware(store: components.store, cookies: cookies, resolver: proxy)
    let sessions = router.group().add(middleware: lookup)
    pages.signIn.addRoutes(to: router, sessions: sessions)
    let invitations = pages.invitation.invitations
    let completion = SignInCompletion(
        flow: components.flow, renderer: renderer, cookies: cookies, settings: settings, metrics: components.metrics, audit: components.audit, proxy: proxy,
        invitations: invitations
    )
    pages.invitation.addRoutes(to: sessions)
    ReturnController(completion: completion).addRoutes(to: router)
    PopupController(completion: completion).addRoutes(to: router)
    pages.session.addRoutes(to: sessions)
    SessionsController(store: components.store, renderer: renderer, cookies: cookies, audit: components.audit, proxy: proxy)
        .addRoutes(to: router, sessions: sessions)
    ConsoleController(
        store: components.store, renderer: renderer, access: settings.front.access, adminGroups: settings.adminGroups, audit: components.audit,
        configuredClients: settings.provider.clients, invitations: invitations, publicOrigin: settings.front.publicOrigin, logger: logger
    ).addRoutes(to: router, sessions: lookup)
    let forwardAuth = ForwardAuthController(
        policy: buildDoorPolicy(settings: settings, components: components, renderer: renderer), proxy: proxy, assertions: components.assertions,
        sessions: lookup
    )
    forwardAuth.addRoutes(to: sessions)
    let extAuthz = ExtAuthzController(
        policy: buildDoorPolicy(settings: settings, components: components, renderer: renderer), proxy: proxy, assertions: components.assertions,
        sessions: lookup, metrics: components.metrics
    )
    extAuthz.addRoutes(to: router)
    extAuthz.addGRPCRoute(to: router)
    forwardAuth.addKeySetRoute(to: router)
    // The OpenID Provider (issue 18).
    let provider = settings.provider
    let providerClients = ProviderClients(configured: provider.clients, store: components.store)
    AuthorizationController(
        settings: provider, clients: providerClients, store: components.store, keys: components.providerKeys, renderer: renderer, cookies: cookies, front: settings.front,
        audit: components.audit
    ).addRoutes(to: router, sessions: sessions)
    TokenController(
        settings: provider, clients: providerClients, store: components.store, keys: components.providerKeys, access: settings.front.access, audit: components.audit
    ).addRoutes(to: router)
    DeviceController(
        settings: provider, clients: providerClients, store: components.store, renderer: renderer, front: settings.front, audit: components.audit, proxy: proxy,
        guesses: DeviceGuesses()
    ).addRoutes(to: router, sessions: sessions)
    LifecycleController(
        store: components.store, notifications: components.notifications, lifecycle: components.lifecycle, renderer: renderer, cookies: cookies, metrics: components.metrics,
        audit: components.audit
    )
        .addRoutes(to: router, sessions: sessions)
    APIController(native: components.native, store: components.store, proxy: proxy)
        .addRoutes(to: router)
    OperationsController(components: components)
        .addRoutes(to: router)
    return router
}

/// Builds the door to the upstream (`--upstream`) that `client` reaches: the sign-in gate and the forwarder, with
/// the router's cookies, sessions and security headers.
func buildUpstreamGate(client: UpstreamClient, settings: ServerSettings, components: ServerComponents, renderer: PageRenderer) -> UpstreamGate {
    let cookies = CookiePolicy(secure: settings.secureCookies, domain: settings.cookieDomain)
    // `skip_auth_routes`: public rules ahead of `access_rules`, for every carrier and the checks alike.
    settings.front.access.install(skipRoutes: client.settings.skipAuthRoutes)
    let forwarder = UpstreamForwarder(
        settings: client.settings, client: client.client, resolver: settings.addressResolver,
        ownCookies: OwnCookieNames(CookiePolicy.allNames), webSocketTLS: client.webSocketTLS, admission: client.admission,
        failures: DoorFailures(settings: client.settings, metrics: components.metrics), http2: client.http2
    )
    return UpstreamGate(
        forwarder: forwarder, sessions: SessionMiddleware(store: components.store, cookies: cookies, resolver: settings.addressResolver),
        policy: buildDoorPolicy(settings: settings, components: components, renderer: renderer), assertions: components.assertions,
        resolver: settings.addressResolver
    )
}

/// The door's one policy (`DoorPolicy`), for the checks and the built-in proxy alike.
func buildDoorPolicy(settings: ServerSettings, components: ServerComponents, renderer: PageRenderer) -> DoorPolicy {
    DoorPolicy(verdicts: DoorVerdicts(front: settings.front, audit: components.audit), renderer: renderer, security: SecurityHeadersMiddleware(settings: settings))
}

/// Both values, when both are there.
private func zip<A, B>(_ a: A?, _ b: B?) -> (A, B)? {
    guard let a, let b else { return nil }
    return (a, b)
}

/// Builds the whole application: store, clients, router, listening on `settings.host:settings.port`.
public func buildApplication(
    settings: ServerSettings,
    httpClient: HTTPClient,
    store: (any SignInStore)? = nil,
    services: [any Service] = [],
    logger: Logger,
    onRunning: (@Sendable (Int) async -> Void)? = nil
) async throws -> some ApplicationProtocol {
    let components = try await buildComponents(settings: settings, httpClient: httpClient, store: store, logger: logger)
    let renderer = try await PageRenderer(directory: settings.templatesDirectory, localMode: settings.mode == .local)
    let pages = buildSitePages(settings: settings, components: components, renderer: renderer, logger: logger)
    let router = buildRouter(settings: settings, components: components, renderer: renderer, pages: pages, logger: logger)
    let upstreamClient = settings.upstream.map(UpstreamClient.init)
    let gate = upstreamClient.map { buildUpstreamGate(client: $0, settings: settings, components: components, renderer: renderer) }
    let owned = SiwaPaths(publicDirectory: URL(fileURLWithPath: settings.publicDirectory).resolvingSymlinksInPath().path)
    let front = FrontDoor(router: router, gate: gate, owned: owned)
    let lifecycle = LifecycleService(lifecycle: components.lifecycle, maintenance: components.store, interval: .seconds(settings.lifecycleIntervalSeconds), logger: logger)
    let groups = GroupsRefresher(
        store: components.store, access: settings.front.access, interval: .seconds(max(1, settings.checkCacheSeconds)), logger: logger
    )
    let logouts = BackchannelLogout(
        queue: components.store, clients: ProviderClients(configured: settings.provider.clients, store: components.store), keys: components.providerKeys,
        issuer: settings.provider.issuer, httpClient: httpClient, audit: components.audit, metrics: components.metrics, logger: logger.module("siwa.provider")
    )
    let events = AccountEvents(
        outbox: components.store, webhooks: settings.eventWebhooks, httpClient: httpClient, metrics: components.metrics, logger: logger.module("siwa.events")
    )
    let touches = SessionTouchWriter(store: components.store, logger: logger)
    let allServices = components.store.services + services + (upstreamClient.map { [$0] } ?? []) + [groups, components.audit, logouts, events, touches]
    // The hot paths (`/auth/check`, and requests passed to the upstream) for sessions in memory are answered on the
    // event loop, below NIO's codecs (`RawFrontPath`), everything else by the router and the gate. In front of an
    // upstream, WebSocket upgrades are passed through too; otherwise Hummingbird's plain HTTP/1 (`FrontHTTP1Channel`).
    let fastPath = BytePathAnswers(
        store: components.store, sessionCookie: CookiePolicy(secure: settings.secureCookies, domain: settings.cookieDomain).sessionName,
        front: settings.front, resolver: settings.addressResolver, assertions: components.assertions,
        security: SecurityHeadersMiddleware(settings: settings), dates: HTTPDateCache(), metrics: components.metrics,
        // Over HTTP/2 to the upstream (`upstream_http2`) every request goes through the handlers: the byte path
        // speaks HTTP/1.1 to it.
        upstream: zip(gate, upstreamClient).flatMap { $1.http2 == nil ? BytePathAnswers.Upstream(gate: $0, owned: owned, rawPool: $1.rawPool) : nil },
        // In front of an upstream, `/` and `/session` are the upstream's (`SitePages.siteAtRoot`).
        pages: pages, policy: buildDoorPolicy(settings: settings, components: components, renderer: renderer), logger: logger
    )
    // siwa alone at the edge (issue 36): HTTPS on `https_port`, HTTP/1.1 or HTTP/2 by ALPN, the same door beneath;
    // `port` then serves only the redirect to HTTPS, ACME's HTTP-01 and the health checks.
    let edge = settings.edge.map { edge in
        let certificates = EdgeCertificates(domains: edge.domains)
        let http01 = HTTP01Answers()
        let service = EdgeCertificateService(
            settings: edge, certificates: certificates, http01: http01, store: components.store, metrics: components.metrics, logger: logger.module("siwa.edge")
        )
        return (settings: edge, service: service)
    }
    let metrics = components.metrics
    let idle = TimeAmount.milliseconds(Int64(settings.clientLimits.idleTimeoutMS))
    let body = TimeAmount.milliseconds(Int64(settings.clientLimits.bodyTimeoutMS))
    let handshake = TimeAmount.milliseconds(Int64(settings.clientLimits.headerTimeoutMS))
    let shutdown = TimeAmount.milliseconds(Int64(settings.clientLimits.shutdownTimeoutMS))
    let server: HTTPServerBuilder = gate.map { gate in
        HTTPServerBuilder { responder in
            let http1 = UpstreamWebSocketChannel(responder: responder, gate: gate, owned: owned, fastPath: fastPath, limits: settings.clientLimits, metrics: metrics)
            guard let edge else {
                let http2 = ClientHTTP2(responder: responder, limits: HTTP2Limits(), idleTimeout: idle, bodyTimeout: body, shutdownTimeout: shutdown, metrics: metrics, fastPath: fastPath, webSockets: http1)
                return PlainChannel(http1: http1, http2: http2, firstBytesTimeout: handshake)
            }
            return EdgeChannel(
                http1: http1,
                http2: ClientHTTP2(responder: responder, limits: edge.settings.http2, idleTimeout: idle, bodyTimeout: body, shutdownTimeout: shutdown, metrics: metrics, fastPath: fastPath, webSockets: http1),
                certificates: edge.service.certificates, handshakeTimeout: handshake, metrics: metrics,
                challengeLookup: { [service = edge.service] in await service.challengeAnswer(.tlsALPN01, domain: $0) }
            )
        }
    } ?? HTTPServerBuilder { responder in
        let http1 = FrontHTTP1Channel(inner: HTTP1Channel(responder: responder), fastPath: fastPath, limits: settings.clientLimits, metrics: metrics)
        guard let edge else {
            // The plain port: HTTP/1.1, or h2c with prior knowledge (Envoy's gRPC ext_authz, gRPC clients in a cluster).
            let http2 = ClientHTTP2(responder: responder, limits: HTTP2Limits(), idleTimeout: idle, bodyTimeout: body, shutdownTimeout: shutdown, metrics: metrics, fastPath: fastPath)
            return PlainChannel(http1: http1, http2: http2, firstBytesTimeout: handshake)
        }
        return EdgeChannel(
            http1: http1, http2: ClientHTTP2(responder: responder, limits: edge.settings.http2, idleTimeout: idle, bodyTimeout: body, shutdownTimeout: shutdown, metrics: metrics, fastPath: fastPath),
            certificates: edge.service.certificates, handshakeTimeout: handshake, metrics: metrics,
            challengeLookup: { [service = edge.service] in await service.challengeAnswer(.tlsALPN01, domain: $0) }
        )
    }
    var edgeServices: [any Service] = []
    if let edge {
        // The same limits on a client's time as the HTTPS port's: without them a connection that sends half a head,
        // or nothing after an answer, was held for ever.
        let limits = settings.clientLimits
        let redirects = Application(
            router: buildRedirectRouter(
                edge: edge.settings, service: edge.service, publicOrigin: settings.front.publicOrigin, ready: OperationsController(components: components).ready
            ),
            server: HTTPServerBuilder { responder in FrontHTTP1Channel(inner: HTTP1Channel(responder: responder), fastPath: nil, limits: limits, metrics: metrics) },
            configuration: .init(address: .hostname(settings.host, port: settings.port), serverName: "siwa"), logger: logger
        )
        edgeServices = [edge.service, redirects]
    }
    let address: BindAddress = edge.map { .hostname($0.settings.host, port: $0.settings.httpsPort) }
        ?? settings.socketPath.map { .unixDomainSocket(path: $0) } ?? .hostname(settings.host, port: settings.port)
    var app = Application(
        router: front,
        server: server,
        configuration: .init(address: address, serverName: "siwa"),
        services: allServices + edgeServices + [lifecycle],
        onServerRunning: { channel in
            if let path = settings.socketPath {
                // Owner and group may connect (the proxy's user joins siwa's group), nobody else: every peer of the
                // socket is trusted as a proxy.
                if chmod(path, 0o660) != 0 { logger.error("could not restrict the socket's permissions", metadata: ["socket": "\(path)", "errno": "\(errno)"]) }
            }
            await onRunning?(channel.localAddress?.port ?? settings.port)
        },
        logger: logger
    )
    let storeNeedsServices = !components.store.services.isEmpty
    app.beforeServerStarts {
        // The store needed its services running first (a PostgreSQL pool): migrate once they are.
        if storeNeedsServices { try await components.store.migrate() }
        // The operator's certificate files must load before HTTPS listens; a stored ACME certificate is served at once.
        try await edge?.service.prepare()
        // The store's groups are in force from the first request.
        await groups.refresh()
        // The first signing keys of the identity assertion and, when the provider has clients, of id_tokens, on the
        // first start. (An RSA key takes a while to make; a site without clients never needs one. A client registered
        // later gets one at its first token, and the key set is read from the store each time it is asked for.)
        try await components.assertions.prepare()
        let storedClients = settings.provider.clients.isEmpty ? try await components.store.providerClients() : []
        if !settings.provider.clients.isEmpty || !storedClients.isEmpty {
            try await components.providerKeys.prepare()
        }
    }
    return app
}

extension Logger {
    /// This logger's handler (so its level and destination) under the label of another module. The label is written by
    /// the handler, so an `EscapingLogHandler` (`siwa serve`'s) is made again for it; any other is shared as it is.
    public func module(_ label: String) -> Logger {
        let handler: any LogHandler = (handler as? EscapingLogHandler)?.relabelled(label) ?? handler
        return Logger(label: label, factory: { _ in handler })
    }
}
