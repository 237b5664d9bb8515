import Foundation
import Logging

/// The command line's own output channels (the only place `print` is used).
enum CLIOutput {
    /// Writes one line to standard error.
    static func stdout(_ text: String, terminator: String = "\n") {
        print(text, terminator: terminator)
    }

    static func stderr(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }

    /// The log of a command's own work: warnings and errors only, so its output stays what it printed.
    static var quietLogger: Logger {
        var logger = Logger(label: "siwa")
        logger.logLevel = .warning
        return logger
    }

    /// Reads all of standard input as text.
    static func readStandardInput() -> String {
        String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
    }

    /// Pretty JSON with sorted keys and ISO dates.
    static func json(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }
}

