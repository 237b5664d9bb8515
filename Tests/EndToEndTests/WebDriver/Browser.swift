import Foundation

/// One WebDriver session: a headless Chromium window the tests drive as a person would.
struct Browser: Sendable {
    let connection: WebDriverConnection
    /// The WebDriver session id.
    let id: String

    /// How long a step waits for the page to get where it should.
    static let patience: Duration = .seconds(15)

    private var path: String { "/session/\(id)" }

    /// Goes to `url` and waits for it to load.
    func open(_ url: String) async throws {
        try await connection.command(.POST, path + "/url", ["url": .string(url)])
    }

    /// The address of the page shown.
    func currentURL() async throws -> String {
        try await connection.command(.GET, path + "/url").string ?? ""
    }

    /// The page's title.
    func title() async throws -> String {
        try await connection.command(.GET, path + "/title").string ?? ""
    }

    /// The first element matching `selector`, waiting for it to appear.
    func element(_ selector: String) async throws -> Element {
        var found: Element?
        try await waitUntil("an element matching \(selector)") {
            found = try await elements(selector).first
            return found != nil
        }
        return found!
    }

    /// Every element matching `selector` now (no waiting: use it to check that something is absent).
    func elements(_ selector: String) async throws -> [Element] {
        let value = try await connection.command(.POST, path + "/elements", ["using": "css selector", "value": .string(selector)])
        return (value.array ?? []).compactMap { $0[Element.referenceKey]?.string }.map { Element(browser: self, id: $0) }
    }

    /// Runs `script` as a function body in the page and returns what it returns.
    @discardableResult
    func execute(_ script: String, _ arguments: [TestJSON] = []) async throws -> TestJSON {
        try await connection.command(.POST, path + "/execute/sync", ["script": .string(script), "args": .array(arguments)])
    }

    /// A PNG of the viewport.
    func screenshot() async throws -> Data {
        let encoded = try await connection.command(.GET, path + "/screenshot").string ?? ""
        guard let png = Data(base64Encoded: encoded) else { throw EndToEndError("the screenshot was not base64") }
        return png
    }

    /// A line of the browser's console log, security messages (CSP violations) included.
    struct LogEntry: Sendable, CustomStringConvertible {
        var level: String
        var source: String
        var message: String
        var description: String { "[\(level) \(source)] \(message)" }
        /// Whether the browser reports refusing something under the page's Content-Security-Policy.
        var isCSPViolation: Bool { message.contains("Content Security Policy") }
    }

    /// The browser log since the last call (chromedriver's `se/log`, enabled by `goog:loggingPrefs`).
    func browserLog() async throws -> [LogEntry] {
        let value = try await connection.command(.POST, path + "/se/log", ["type": "browser"])
        return (value.array ?? []).map {
            LogEntry(level: $0["level"]?.string ?? "", source: $0["source"]?.string ?? "", message: $0["message"]?.string ?? "")
        }
    }

    /// The handle of the window commands go to now.
    func windowHandle() async throws -> String {
        try await connection.command(.GET, path + "/window").string ?? ""
    }

    /// The handles of every open window of the session (popups included).
    func windowHandles() async throws -> [String] {
        try await connection.command(.GET, path + "/window/handles").array?.compactMap(\.string) ?? []
    }

    /// Sends the following commands to the window `handle`.
    func switchToWindow(_ handle: String) async throws {
        try await connection.command(.POST, path + "/window", ["handle": .string(handle)])
    }

    /// Waits for a window other than `known` to open and returns its handle.
    func waitForNewWindow(besides known: [String]) async throws -> String {
        var found: String?
        try await waitUntil("a new window besides \(known)") {
            found = try await windowHandles().first { !known.contains($0) }
            return found != nil
        }
        return found!
    }

    /// Waits until the window `handle` is closed.
    func waitForWindowToClose(_ handle: String) async throws {
        try await waitUntil("the window \(handle) to close") {
            try await !windowHandles().contains(handle)
        }
    }

    /// The cookies of the current page's site as WebDriver sees them (HttpOnly ones too): name, secure, httpOnly.
    func cookieAttributes() async throws -> [(name: String, secure: Bool, httpOnly: Bool)] {
        let value = try await connection.command(.GET, path + "/cookie")
        return (value.array ?? []).map { cookie in
            (cookie["name"]?.string ?? "", cookie["secure"]?.bool ?? false, cookie["httpOnly"]?.bool ?? false)
        }
    }

    /// Forgets the cookies of the current page's site.
    func deleteAllCookies() async throws {
        try await connection.command(.DELETE, path + "/cookie")
    }

    /// Polls `condition` until it holds; fails naming `what` and where the browser is after `timeout`.
    func waitUntil(_ what: String, timeout: Duration = patience, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        var lastError: (any Error)?
        while true {
            do {
                if try await condition() { return }
            } catch {
                lastError = error
            }
            if ContinuousClock.now >= deadline {
                let url = (try? await currentURL()) ?? "?"
                let text = (try? await execute("return document.body ? document.body.innerText : ''").string) ?? ""
                throw EndToEndError(
                    "waited \(timeout) for \(what); the browser is at \(url), showing: \(text.prefix(300).debugDescription)"
                        + (lastError.map { " (last error: \($0))" } ?? "")
                )
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    /// Waits until the browser shows `url` (query and fragment ignored), fully loaded.
    func waitForPage(_ url: String) async throws {
        try await waitUntil("the page \(url)") {
            let current = try await currentURL()
            let withoutQuery = String(current.prefix { $0 != "?" && $0 != "#" })
            guard withoutQuery == url else { return false }
            return try await execute("return document.readyState").string == "complete"
        }
    }

    /// Ends the session and closes its browser.
    func quit() async throws {
        try await connection.command(.DELETE, path)
    }
}

/// An element of the page, by its WebDriver reference.
struct Element: Sendable {
    /// The key under which W3C WebDriver returns element references.
    static let referenceKey = "element-6066-11e4-a52e-4f735466cecf"

    let browser: Browser
    let id: String

    private var path: String { "/session/\(browser.id)/element/\(id)" }

    /// Clicks it as a person would (scrolled into view, must be interactable).
    func click() async throws {
        try await browser.connection.command(.POST, path + "/click")
    }

    /// Empties a text field.
    func clear() async throws {
        try await browser.connection.command(.POST, path + "/clear")
    }

    /// Types `text` into it.
    func type(_ text: String) async throws {
        try await browser.connection.command(.POST, path + "/value", ["text": .string(text)])
    }

    /// Its rendered text.
    func text() async throws -> String {
        try await browser.connection.command(.GET, path + "/text").string ?? ""
    }

    /// The value of attribute `name`, or nil when it has none.
    func attribute(_ name: String) async throws -> String? {
        try await browser.connection.command(.GET, path + "/attribute/\(name)").string
    }

    /// Whether a checkbox or radio button is checked.
    func isSelected() async throws -> Bool {
        try await browser.connection.command(.GET, path + "/selected").bool ?? false
    }
}
