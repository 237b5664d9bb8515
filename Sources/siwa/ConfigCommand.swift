import ArgumentParser
import Foundation

/// `siwa config`: what the configuration can hold.
struct ConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "Print the configuration reference: every key, its environment variable, flag, default and meaning.",
        discussion: "Example: siwa config reference > docs/configuration.md",
        subcommands: [Reference.self]
    )

    struct Reference: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print docs/configuration.md (Markdown), made from the keys siwa knows.",
            discussion: "Example: siwa config reference > docs/configuration.md"
        )

        func run() {
            CLIOutput.stdout(ConfigCommand.reference, terminator: "")
        }
    }

    /// The configuration reference page, made from `SettingKey.all`; docs/configuration.md is this (tested).
    static var reference: String {
        var page = """
            # Configuration reference

            Every key siwa reads: its name in the config file, its environment variable and its flag, its default and what it does. \
            Made by `siwa config reference` from the keys the code knows (a test checks this page is its output). Back to the \
            [README](../README.md).

            INTRO

            | key | environment | flag | default | meaning |
            |---|---|---|---|---|

            """
        page = page.replacingOccurrences(of: "INTRO", with: intro)
        for key in SettingKey.all {
            page += "| `\(key.name)` | `\(key.environmentName)` | `\(key.flag)` | \(key.defaultText) | \(key.help) |\n"
        }
        return page
    }

    static let intro = """
        One configuration, read through swift-configuration's providers, serves `siwa serve`, `siwa doctor` and
        `siwa migrate-users`. Every key below can be given as a flag (`--data-key`), in the environment
        (`SIWA_DATA_KEY`), in a `.env` file in the working directory (`SIWA_DATA_KEY=…` lines), or in a JSON file given
        by `--config`/`SIWA_CONFIG` (`"data_key"`); the command line wins over the environment, which wins over `.env`,
        which wins over the file, which wins over the defaults. Lists are comma-separated on the command line and in
        the environment, JSON arrays in the file. A flag or file key that names no key stops start-up naming it.
        `siwa serve --print-config` prints the effective value of every key and where it came from (`command line`,
        `environment`, `.env`, `config file`, or `(default)`); secrets (`data_key`) print as `<redacted>`, and
        `ConfigurationLayersTests` checks this table against the keys the code knows.
        """
}
