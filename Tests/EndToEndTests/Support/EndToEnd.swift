import Testing

/// What the suite's tests share: the site running in local mode and one headless Chromium driving it.
/// Started once for the suite by the `.localSiteInChromium` trait; a test reads it with `try EndToEnd.current()`.
struct EndToEnd: Sendable {
    @TaskLocal static var shared: EndToEnd?

    /// The site under test.
    let site: LocalSite
    /// The browser the tests share (English).
    let browser: Browser
    /// Opens further browsers (other languages).
    let sessions: ChromiumSessions

    /// The running environment; fails the test when the suite trait is missing.
    static func current(sourceLocation: SourceLocation = #_sourceLocation) throws -> EndToEnd {
        try #require(shared, "run inside @Suite(.localSiteInChromium)", sourceLocation: sourceLocation)
    }

    /// Starts chromedriver, the site and a browser; runs `body`; then quits the browser and stops everything.
    static func run(_ body: (EndToEnd) async throws -> Void) async throws {
        let driver = try await ChromeDriver.start(log: Artifacts.chromedriverLog)
        do {
            try await LocalSite.run { site in
                try await driver.sessions.with(language: "en-US") { browser in
                    try await body(EndToEnd(site: site, browser: browser, sessions: driver.sessions))
                }
            }
        } catch {
            await driver.stop()
            throw error
        }
        await driver.stop()
    }

    /// Leaves the shared browser on the sign-in page with no cookies and an empty log, whatever the last test did.
    func startClean() async throws {
        try await browser.open(site.url("/"))
        try await browser.deleteAllCookies()
        try await browser.open(site.url("/"))
        _ = try await browser.browserLog()
    }
}

/// Runs a suite inside one `EndToEnd` environment, started before its first test and stopped after its last.
struct LocalSiteInChromium: SuiteTrait, TestScoping {
    var isRecursive: Bool { false }

    func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        try await EndToEnd.run { environment in
            try await EndToEnd.$shared.withValue(environment) {
                try await function()
            }
        }
    }
}

extension Trait where Self == LocalSiteInChromium {
    /// The site in local mode and a headless Chromium, shared by the suite's tests.
    static var localSiteInChromium: Self { LocalSiteInChromium() }
}
