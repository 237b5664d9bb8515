/// Why the suite could not do a step (start a tool, drive the browser, start the site), saying what to do.
struct EndToEndError: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }

    /// The W3C error answer of a command (`{"value": {"error": …, "message": …}}`).
    static func command(_ method: String, _ path: String, status: UInt, value: TestJSON?) -> EndToEndError {
        let code = value?["error"]?.string ?? "HTTP \(status)"
        let message = value?["message"]?.string.map { $0.split(separator: "\n").prefix(3).joined(separator: " / ") } ?? ""
        return EndToEndError("WebDriver \(method) \(path) failed: \(code): \(message)")
    }

    /// Said when chromedriver or Chromium cannot be found or started: the suite must fail, never skip.
    static func notInstalled(_ what: String) -> EndToEndError {
        EndToEndError(
            "\(what). The end-to-end tests need Chromium and chromedriver: run ./scripts/test, which installs them "
                + "(apt-get install chromium chromium-driver), or point SIWA_TEST_CHROMEDRIVER and SIWA_TEST_CHROMIUM at them."
        )
    }
}
