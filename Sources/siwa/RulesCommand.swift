import ArgumentParser
import DoorHTTP
import Foundation
import Logging
import SignInServer

/// `siwa rules`: which access rule decides a request, for operators to check a configuration before they ship it.
struct RulesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rules",
        abstract: "Check which access rule decides a request, and its verdict.",
        discussion: "Example: siwa rules test --config siwa.json https://grafana.example.com/admin/ --email ada@example.com",
        subcommands: [Test.self]
    )

    struct Test: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the rule that decides URL (its index, or global) and the verdict: public, allow, deny or sign-in. Exit 0 for public and allow, 1 otherwise.",
            discussion: "Example: siwa rules test --config siwa.json https://grafana.example.com/admin/users --email ada@example.com"
        )
        @OptionGroup var options: KeysCommand.Options
        @Argument(help: "The request's URL (https://host/path?query), or its path alone (then rules naming hosts cannot apply).") var url: String
        @Option(help: "The person's email.") var email: String?
        @Option(help: "The person's Apple sub.") var sub: String?
        @Option(help: "The request's method.") var method: String = "GET"

        func run() async throws {
            let request = try Self.request(url, method: method)
            try await KeysCommand.withStore(options) { store, plan in
                let access = plan.settings.front.access
                await GroupsRefresher(store: store, access: access, interval: .seconds(1), logger: CLIOutput.quietLogger).refresh()
                // A person is named by a sub, an email or both; with an email alone, a sub no member names.
                let person = email != nil || sub != nil
                let subject = sub ?? "(no sub given)"
                let judgement = access.judge(request, subject: person ? subject : nil, email: email)
                let rule = judgement.rule == "global" ? nil : access.rules.first { $0.label == judgement.rule }
                CLIOutput.stdout("decided by " + (rule?.description ?? "global: allowed_emails, allowed_email_domains, allowed_subs, allowed_groups"))
                if person { CLIOutput.stdout("groups: " + (judgement.groups.isEmpty ? "none" : judgement.groups.joined(separator: ", "))) }
                if let reason = judgement.reason { CLIOutput.stdout("note: \(reason)") }
                CLIOutput.stdout("verdict: \(judgement.verdict.rawValue)")
                if let maxAuthAge = judgement.maxAuthAge {
                    CLIOutput.stdout("max_auth_age: \(maxAuthAge) s: a session whose sign-in with Apple is older is sent to Apple again (401 insufficient_user_authentication to a script or app)")
                }
                if judgement.verdict != .public, judgement.verdict != .allow { throw ExitCode(1) }
            }
        }

        /// The request as the door reads it: host without port, the path normalized (`RequestTarget`).
        static func request(_ url: String, method: String) throws -> AccessRequest {
            var host: String?
            var target = url
            if let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https" {
                guard let name = components.host, !name.isEmpty else { throw ValidationError("\(url): no host") }
                host = name
                target = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
                if let query = components.percentEncodedQuery { target += "?" + query }
            }
            guard target.hasPrefix("/") else { throw ValidationError("\(url): give an http(s) URL or a path starting with /") }
            do {
                return AccessRequest(host: host, method: method, path: try RequestTarget(target, host: nil).path)
            } catch {
                throw ValidationError("\(url): siwa's door refuses this target (\(error)); no rule is asked")
            }
        }
    }
}
