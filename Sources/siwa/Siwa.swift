import ArgumentParser

/// The `siwa` command line.
@main
struct Siwa: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "siwa",
        abstract: "Sign in with Apple for a website: server, emulator of Apple, and tools.",
        subcommands: [ServeCommand.self, DoctorCommand.self, EmulatorCommand.self, MigrateUsersCommand.self, KeysCommand.self, OIDCCommand.self, GroupsCommand.self, RulesCommand.self, ClientSecretCommand.self, VerifyTokenCommand.self, VerifyNotificationCommand.self]
    )
}
