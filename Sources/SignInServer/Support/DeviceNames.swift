import Foundation

extension SessionDetails {
    /// The details of a session begun by a request with `userAgent` from `address`, come `via` one way.
    public init(userAgent: String?, address: String?, via: String) {
        self.init(device: Self.device(userAgent), network: Self.network(address), via: via)
    }

    /// The browser and system a `User-Agent` names, in words: `Chrome on macOS`, `Safari on iPhone`, `Firefox on
    /// Windows`; `an app` or `unknown browser` when it names neither. Read once, at sign-in.
    static func device(_ userAgent: String?) -> String {
        guard let agent = userAgent, !agent.isEmpty else { return "unknown browser" }
        // The order matters: Edge and Opera say Chrome too, Chrome says Safari too.
        let browsers: [(String, String)] = [
            ("Edg/", "Edge"), ("OPR/", "Opera"), ("Firefox/", "Firefox"), ("FxiOS/", "Firefox"), ("CriOS/", "Chrome"), ("HeadlessChrome/", "Chrome"),
            ("Chromium/", "Chromium"), ("Chrome/", "Chrome"), ("Safari/", "Safari"), ("curl/", "curl"), ("python-requests/", "Python"),
        ]
        let systems: [(String, String)] = [
            ("iPhone", "iPhone"), ("iPad", "iPad"), ("Android", "Android"), ("CrOS", "ChromeOS"), ("Windows", "Windows"), ("Mac OS X", "macOS"),
            ("Macintosh", "macOS"), ("Linux", "Linux"),
        ]
        let browser = browsers.first { agent.contains($0.0) }?.1
        let system = systems.first { agent.contains($0.0) }?.1
        switch (browser, system) {
        case (let browser?, let system?): return "\(browser) on \(system)"
        case (let browser?, nil): return browser
        case (nil, let system?): return "a browser on \(system)"
        case (nil, nil): return agent.hasPrefix("Mozilla/") ? "unknown browser" : "an app"
        }
    }

    /// The address with its last part masked (`203.0.113.x`, `2001:db8:1:2:3:4:5:x`), `unknown` without one.
    static func network(_ address: String?) -> String {
        guard let address, !address.isEmpty, address != "unknown" else { return "unknown" }
        if address.contains(":"), let last = address.lastIndex(of: ":") { return String(address[...last]) + "x" }
        if let last = address.lastIndex(of: ".") { return String(address[...last]) + "x" }
        return address
    }
}
