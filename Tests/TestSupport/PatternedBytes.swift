import Foundation
import NIOCore

/// A body of `count` bytes, byte `i` being `i % 256`, made a 64 KiB chunk at a time so that neither the side
/// sending it nor the side checking it holds it whole: what large uploads and downloads through a proxy carry, so
/// that a byte lost, doubled or reordered on the way shows.
public struct PatternedBytes: AsyncSequence, Sendable {
    public typealias Element = ByteBuffer
    public typealias Failure = Never

    /// How many bytes the body has.
    public let count: Int

    /// A body of `count` bytes.
    public init(count: Int) {
        self.count = count
    }

    /// Starts at byte 0.
    public func makeAsyncIterator() -> Iterator {
        Iterator(remaining: count)
    }

    /// Hands out slices of one shared chunk, so that making the body costs no memory.
    public struct Iterator: AsyncIteratorProtocol {
        public typealias Element = ByteBuffer
        public typealias Failure = Never

        var remaining: Int

        /// The next chunk (64 KiB, the last one shorter), nil after the last.
        public mutating func next() async -> ByteBuffer? {
            guard remaining > 0 else { return nil }
            let length = Swift.min(remaining, PatternedBytes.chunkSize)
            remaining -= length
            return PatternedBytes.chunk.getSlice(at: PatternedBytes.chunk.readerIndex, length: length)
        }
    }

    /// Whether `buffer` holds the pattern's bytes from `offset` on (an empty buffer does).
    public static func matches(_ buffer: ByteBuffer, at offset: Int) -> Bool {
        buffer.withUnsafeReadableBytes { bytes in
            reference.withUnsafeBytes { expected in
                guard let received = bytes.baseAddress, let pattern = expected.baseAddress else { return bytes.isEmpty }
                var position = 0
                // memcmp a chunk at a time: a byte-by-byte loop takes seconds per 64 MB in a debug build.
                while position < bytes.count {
                    let length = Swift.min(chunkSize, bytes.count - position)
                    guard memcmp(received + position, pattern + (offset + position) % 256, length) == 0 else { return false }
                    position += length
                }
                return true
            }
        }
    }

    static let chunkSize = 64 * 1024

    /// One chunk of the pattern and 255 bytes more, so that a chunk starting at any phase of the pattern is in it.
    static let reference: [UInt8] = (0..<(chunkSize + 255)).map { UInt8(truncatingIfNeeded: $0) }

    /// The first 64 KiB of the pattern (a multiple of 256, so every chunk of a body starts with byte 0).
    static let chunk = ByteBuffer(bytes: reference[0..<chunkSize])
}
