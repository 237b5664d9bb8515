import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Bytes from the kernel's CSPRNG, for the core, the server and the emulator.
public enum SecureRandom {
    /// `count` bytes from the kernel's CSPRNG in one system call on Linux (the standard library's
    /// generator asks the kernel once per 8 bytes, and a byte-wise loop once per byte: a page view paid 32
    /// system calls for its CSRF token).
    public static func bytes(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        #if canImport(Glibc)
        // getentropy: one getrandom system call for up to 256 bytes.
        let filled = count <= 256 && bytes.withUnsafeMutableBytes { buffer -> Bool in
            guard let base = buffer.baseAddress else { return false }
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
}
