import Foundation

/// Files the suite leaves behind for people to look at: screenshots and the chromedriver log,
/// under `.build/artifacts/` (git-ignored).
enum Artifacts {
    /// `<package>/.build/artifacts`.
    static let directory: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent(".build/artifacts", isDirectory: true)

    /// Where screenshots go.
    static let screenshots = directory.appendingPathComponent("screenshots", isDirectory: true)

    /// The chromedriver log.
    static var chromedriverLog: URL {
        get throws {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            return directory.appendingPathComponent("chromedriver.log")
        }
    }

    /// Saves a screenshot of what `browser` shows as `<name>.png` and returns its path.
    @discardableResult
    static func screenshot(_ browser: Browser, named name: String) async throws -> URL {
        try FileManager.default.createDirectory(at: screenshots, withIntermediateDirectories: true)
        let file = screenshots.appendingPathComponent(name + ".png")
        try? FileManager.default.removeItem(at: file)
        try await browser.screenshot().write(to: file)
        return file
    }

    /// The eight bytes every PNG file starts with.
    static let pngSignature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
}
