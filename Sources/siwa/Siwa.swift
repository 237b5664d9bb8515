import ArgumentParser

/// The `siwa` command line.
@main
struct Siwa: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "siwa",
        abstract: "Sign in with Apple for a website: server, emulator of Apple, and tools.",
        discussion: "Example: siwa serve (local mode: open http://127.0.0.1:8080/ and press Sign in with Apple)",
        subcommands: [ServeCommand.self, DoctorCommand.self, ConfigCommand.self, EmulatorCommand.self, MigrateUsersCommand.self, KeysCommand.self, OIDCCommand.self, GroupsCommand.self, InviteCommand.self, RulesCommand.self, ClientSecretCommand.self, VerifyTokenCommand.self, VerifyNotificationCommand.self]
    )
}
