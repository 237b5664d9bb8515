import AppleSignIn
import ArgumentParser
import AsyncHTTPClient
import SignInServer

/// `siwa doctor`: one line per configuration check, pass or fail, with the fix; non-zero exit on any failure.
struct DoctorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Check the configuration `siwa serve` would use, and with --online, Apple's answer to it.",
        discussion: "Example: siwa doctor --config siwa.json --online\n\n" + LayeredValues.help
    )

    @Flag(help: "Also fetch Apple's key set and probe the token endpoint with a dummy code.") var online = false

    @Argument(parsing: .allUnrecognized, help: ArgumentHelp("Configuration, exactly as for serve: --KEY VALUE (and --config FILE).", valueName: "settings"))
    var settings: [String] = []

    func run() async throws {
        let values: LayeredValues
        do {
            values = try await LayeredValues(commandArguments: settings)
        } catch let error as ConfigurationError {
            print("FAIL  \(error.field): \(error.message)")
            throw ExitCode.failure
        }
        let checks = await Self.checks(values, online: online)
        for check in checks { print(check.line) }
        let failed = checks.filter { !$0.passed }.count
        print(failed == 0 ? "all \(checks.count) checks passed" : "\(failed) of \(checks.count) checks failed")
        if failed > 0 { throw ExitCode.failure }
    }

    /// The doctor's item checks, then the very parse `siwa serve` does, so the doctor never passes what serve
    /// would refuse.
    static func checks(_ values: LayeredValues, online: Bool) async -> [ConfigurationDoctor.Check] {
        var checks = await ConfigurationDoctor(values: values.all, httpClient: .shared).run(online: online)
        do {
            let plan = try ServePlan(values: values, creatingLocalKey: false)
            checks.append(.init(name: "serve", passed: true, message: "siwa serve accepts this configuration (\(plan.settings.mode == .local ? "local" : "Apple") mode)"))
        } catch let error as ConfigurationError {
            checks.append(.init(name: "serve", passed: false, message: "\(error.field) \(error.message)"))
        } catch {
            checks.append(.init(name: "serve", passed: false, message: "\(error)"))
        }
        return checks
    }
}
