import Foundation

/// Runs `body` with a new directory under the system's temporary one (named `prefix` and a UUID), removed after it.
public func withScratchDirectory<T>(_ prefix: String, _ body: (URL) async throws -> T) async throws -> T {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    return try await body(directory)
}
