import AsyncHTTPClient
import NIOCore

extension HTTPClientResponse.Body {
    /// Collects at most `maxBytes`, failing with `HTTPClientError.deadlineExceeded` at `deadline`: AsyncHTTPClient's
    /// own deadline stops counting once the response head arrives, so a stalled body would otherwise wait forever.
    func collect(upTo maxBytes: Int, deadline: NIODeadline) async throws -> ByteBuffer {
        try await withThrowingTaskGroup(of: ByteBuffer?.self) { group in
            group.addTask { try await self.collect(upTo: maxBytes) }
            group.addTask {
                let remaining = deadline - .now()
                try await Task.sleep(nanoseconds: UInt64(Swift.max(remaining.nanoseconds, 0)))
                return nil
            }
            defer { group.cancelAll() }
            guard let buffer = try await group.next() ?? nil else { throw HTTPClientError.deadlineExceeded }
            return buffer
        }
    }
}
