import Foundation
import FuzzTargets
#if FUZZING
import CFuzzerDriver
#endif

/// `SiwaFuzz TARGET [ARGS…]` with TARGET one of callback, jwt, user.
///
/// Built by `scripts/fuzz` with `-sanitize=fuzzer -DFUZZING`, it hands ARGS to libFuzzer (corpus directories,
/// `-max_total_time=600`, …). Built normally, it replays the files and directories in ARGS through the target,
/// as `swift test` does with the committed corpora: a quick way to check one crashing input after a fix.
@main
struct SiwaFuzz {
    // Set once before libFuzzer starts; its C callback cannot capture context.
    nonisolated(unsafe) static var selectedTarget: FuzzTarget = .callback

    static func main() {
        let arguments = CommandLine.arguments
        // libFuzzer re-runs this program for -merge and -jobs with the arguments it was given, which no longer
        // name the target: the environment carries it to those children.
        let inherited = ProcessInfo.processInfo.environment["SIWA_FUZZ_TARGET"].flatMap(FuzzTarget.init(rawValue:))
        let named = arguments.count >= 2 ? FuzzTarget(rawValue: arguments[1]) : nil
        guard let target = named ?? inherited else {
            let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: "|")
            FileHandle.standardError.write(Data("usage: SiwaFuzz \(names) [libFuzzer options and corpus directories | files to replay]\n".utf8))
            exit(2)
        }
        selectedTarget = target
        setenv("SIWA_FUZZ_TARGET", target.rawValue, 1)
        #if FUZZING
        // libFuzzer sees the program name followed by everything after TARGET.
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        if named != nil {
            argc -= 1
            argv?[1] = argv?[0]
            argv = argv.map { $0 + 1 }
        }
        exit(LLVMFuzzerRunDriver(&argc, &argv) { data, size in
            guard let data else { return 0 }
            if case .violated(let message) = SiwaFuzz.selectedTarget.run(Array(UnsafeBufferPointer(start: data, count: size))) {
                // A crash is how libFuzzer learns of a violation, and it saves the input.
                FileHandle.standardError.write(Data("fuzz property violated: \(message)\n".utf8))
                abort()
            }
            return 0
        })
        #else
        var count = 0
        var violations = 0
        for path in arguments.dropFirst(named == nil ? 1 : 2) {
            for file in files(at: URL(fileURLWithPath: path)) {
                guard let data = FileManager.default.contents(atPath: file.path) else { continue }
                if case .violated(let message) = target.run(Array(data)) {
                    print("\(file.path): property violated: \(message)")
                    violations += 1
                }
                count += 1
            }
        }
        print("\(target.rawValue): \(count) inputs replayed, \(violations) violated a property")
        if violations > 0 { exit(1) }
        #endif
    }

    static func files(at url: URL) -> [URL] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory) else { return [] }
        guard isDirectory.boolValue else { return [url] }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? []
        return names.sorted().filter { !$0.hasPrefix(".") }.map { url.appendingPathComponent($0) }
    }
}
