import Foundation
@testable import SignInServer
import Testing

/// An install that links siwa's resource directories (issue 29's systemd test found a linked Templates/ was not read).
@Suite("Linked resource directories")
struct LinkedResourcesTests {
    @Test("a Templates directory reached through a symbolic link is read where it leads")
    func linkedTemplates() async throws {
        let linkDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-linked-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: linkDirectory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: linkDirectory) }
        let link = linkDirectory.appendingPathComponent("Templates")
        try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: ResourceLocator.directory("Templates"))
        let renderer = try await PageRenderer(directory: link.path, localMode: true)
        let page = renderer.render(.notFound, language: .english)
        #expect(page.status == .notFound)
    }
}
