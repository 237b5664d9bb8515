import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A program the tests start, with the part of Foundation's `Process` API they use, launched by `posix_spawn`.
///
/// Foundation's `Process.run()` on Linux crashed the test process (a bad read while preparing the child) whenever it
/// ran while the process had more than about 1,024 descriptors open, which the full suite reaches for moments when
/// hundreds of tests each listen on a port. posix_spawn has no such limit. The child also starts with no signal
/// blocked and default dispositions: a program started from a Swift concurrency thread would otherwise inherit its
/// mask, which blocks SIGTERM (Apache then never sees the SIGTERM that stops it). Its exit is collected by a thread
/// of its own blocked in `waitpid`.
public final class SpawnedProcess: @unchecked Sendable {
    // Set before `run()`, by the one task that configures it; read-only afterwards.
    public var executableURL: URL?
    public var arguments: [String] = []
    /// The child's whole environment; nil: this process's.
    public var environment: [String: String]?
    public var standardOutput: FileHandle?
    public var standardError: FileHandle?
    /// Accepted for `Process` compatibility; the child's standard input is always /dev/null.
    public var standardInput: FileHandle?
    /// Called once, on the waiting thread, when the program has exited.
    public var terminationHandler: (@Sendable (SpawnedProcess) -> Void)?

    private struct State {
        var pid: pid_t = 0
        var status: Int32?
    }

    private let state = Mutex(State())
    private let exited = DispatchSemaphore(value: 0)

    public init() {}

    /// glibc's `posix_spawn_file_actions_addclosefrom_np`.
    private static let closeFrom: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? = {
        guard let symbol = dlsym(dlopen(nil, RTLD_NOW), "posix_spawn_file_actions_addclosefrom_np") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
    }()

    public var processIdentifier: Int32 { state.withLock { $0.pid } }
    public var isRunning: Bool { state.withLock { $0.pid != 0 && $0.status == nil } }
    /// The exit status, or 128 + the signal that ended it; -1 while it runs.
    public var terminationStatus: Int32 { state.withLock { $0.status ?? -1 } }

    /// Sends SIGTERM.
    public func terminate() {
        let pid = processIdentifier
        if pid > 0, isRunning { kill(pid, SIGTERM) }
    }

    /// Blocks the calling thread until the program has exited (use off the concurrency pool).
    public func waitUntilExit() {
        guard processIdentifier != 0 else { return }
        exited.wait()
        exited.signal()
    }

    public func run() throws {
        guard let executable = executableURL?.path else { throw SpawnError("no executable") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        if let output = standardOutput { posix_spawn_file_actions_adddup2(&actions, output.fileDescriptor, 1) }
        if let error = standardError { posix_spawn_file_actions_adddup2(&actions, error.fileDescriptor, 2) }
        // Nothing else of this process's: posix_spawn hands the child every descriptor not marked close-on-exec,
        // and NIO's sockets are not. A child holding a copy of a socket the test process closes keeps that socket
        // open: the peer saw no end of a close-delimited answer until the child (a curl waiting for that very
        // answer) exited.
        // (glibc 2.34 and later; Swift's Glibc module does not import the GNU extension, so it is looked up.)
        if let closeFrom = Self.closeFrom { _ = closeFrom(&actions, 3) }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD, SIGQUIT] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let environment = (self.environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup($0) } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var spawned: pid_t = 0
        let result = posix_spawn(&spawned, executable, &actions, &attributes, argv, envp)
        guard result == 0 else { throw SpawnError("posix_spawn \(executable): \(String(cString: strerror(result)))") }
        let pid = spawned
        state.withLock { $0.pid = pid }
        let waiter = Thread { [self] in
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1, errno == EINTR {}
            // WIFEXITED / WEXITSTATUS / WTERMSIG, which Swift does not import as macros.
            let signal = status & 0x7F
            let code = signal == 0 ? (status >> 8) & 0xFF : 128 + signal
            state.withLock { $0.status = code }
            terminationHandler?(self)
            exited.signal()
        }
        waiter.start()
    }
}

/// A program that could not be started.
public struct SpawnError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
