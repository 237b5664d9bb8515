import Foundation
import TestSupport

/// The Python scripts of `ThirdParty/` that print their outcome as JSON on their last line (the raw HTTP/2 clients,
/// the gRPC client), run with the tests' Python.
enum ThirdPartyScript {
    /// Runs `name` with `arguments` (its standard input `sending` as JSON, when given) and decodes the last line it
    /// printed; throws with what it printed when that line is not an outcome.
    static func run<Outcome: Decodable>(
        _ name: String, _ arguments: [String], sending: (any Encodable)? = nil, timeLimit: Duration = .seconds(90), as type: Outcome.Type = Outcome.self
    ) async throws -> Outcome {
        let python = try ExternalTool.authlibPython.executable().path
        let script = ExternalTool.thirdPartyScripts.appendingPathComponent(name).path
        let outcome: ChildProcess.Outcome
        if let sending {
            let input = FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-\(UUID().uuidString).json")
            try JSONEncoder().encode(sending).write(to: input)
            defer { try? FileManager.default.removeItem(at: input) }
            outcome = try await ChildProcess.run(
                URL(fileURLWithPath: "/bin/sh"), arguments: ["-c", "input=\"$1\"; shift; exec \"$@\" < \"$input\"", "sh", input.path, python, script] + arguments,
                environment: [:], timeLimit: timeLimit
            )
        } else {
            outcome = try await ChildProcess.run(URL(fileURLWithPath: python), arguments: [script] + arguments, environment: [:], timeLimit: timeLimit)
        }
        guard let line = outcome.stdout.split(separator: "\n").last, let decoded = try? JSONDecoder().decode(Outcome.self, from: Data(line.utf8)) else {
            throw EndToEndError("\(name) \(arguments.joined(separator: " ")) printed no outcome: \(outcome.stdout.suffix(2000)) \(outcome.stderr.suffix(2000))")
        }
        return decoded
    }
}
