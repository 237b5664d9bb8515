import Foundation
import Testing

/// The controllers stay small enough to read in one sitting: split by concern (`Type+Concern.swift`) before a file
/// passes 250 lines.
@Suite("Source layout")
struct SourceLayoutTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let controllers = root.appendingPathComponent("Sources/SignInServer/Controllers")

    @Test("every file of Sources/SignInServer/Controllers is under 250 lines")
    func controllersUnder250Lines() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.controllers.path).filter { $0.hasSuffix(".swift") }
        #expect(files.contains("ConsoleController.swift"))
        for file in files {
            let text = try String(contentsOf: Self.controllers.appendingPathComponent(file), encoding: .utf8)
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false).count - (text.hasSuffix("\n") ? 1 : 0)
            #expect(lines < 250, "\(file) has \(lines) lines")
        }
    }
}
