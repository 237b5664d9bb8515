import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Bytes from the kernel's CSPRNG, for the core, the server and the emulator.
public enum SecureRandom {
    /// `count` bytes from the kernel's CSPRNG. Small requests (tokens: up to 64 bytes) are served from a pool of
    /// 4 KB filled by 16 `getentropy` system calls and handed out once each, under a lock: a page view's CSRF token
    /// paid a system call of its own (1 % of the sign-in page's CPU in a profile). The bytes are the kernel's
    /// either way; siwa does not fork, so no two processes share a pool.
    public static func bytes(_ count: Int) -> [UInt8] {
        #if canImport(Glibc)
        if count > 0, count <= Pool.largestServed, let pooled = pool.withLock({ $0.take(count) }) { return pooled }
        #endif
        return direct(count)
    }

    /// `count` bytes straight from the kernel: getentropy (one system call for up to 256 bytes), else the standard
    /// library's generator.
    static func direct(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        #if canImport(Glibc)
        let filled = count <= 256 && bytes.withUnsafeMutableBytes { buffer -> Bool in
            guard let base = buffer.baseAddress else { return count == 0 }
            return getentropy(base, count) == 0
        }
        if filled { return bytes }
        #endif
        var generator = SystemRandomNumberGenerator()
        var index = 0
        while index < count {
            var word = generator.next()
            withUnsafeBytes(of: &word) { wordBytes in
                for byte in wordBytes where index < count {
                    bytes[index] = byte
                    index += 1
                }
            }
        }
        return bytes
    }

    #if canImport(Glibc)
    private static let pool = Mutex(Pool())

    /// Kernel bytes not yet handed out; each byte is handed out once.
    struct Pool: ~Copyable {
        static let size = 4096
        static let largestServed = 64
        private var bytes = [UInt8](repeating: 0, count: Pool.size)
        private var next = Pool.size

        /// `count` unused bytes, refilling first when too few are left; nil when the kernel did not fill it.
        mutating func take(_ count: Int) -> [UInt8]? {
            if Self.size - next < count {
                let filled = bytes.withUnsafeMutableBytes { buffer -> Bool in
                    guard let base = buffer.baseAddress else { return false }
                    // getentropy fills at most 256 bytes a call.
                    return stride(from: 0, to: Self.size, by: 256).allSatisfy { getentropy(base + $0, 256) == 0 }
                }
                guard filled else { return nil }
                next = 0
            }
            defer {
                // Handed out: never again, even if a copy of the pool's storage lingered.
                for index in next..<(next + count) { bytes[index] = 0 }
                next += count
            }
            return Array(bytes[next..<(next + count)])
        }
    }
    #endif
}
