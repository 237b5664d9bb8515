import AsyncHTTPClient
import NIOCore
import Synchronization

extension HTTPClientResponse.Body {
    /// Collects at most `maxBytes`, failing with `HTTPClientError.deadlineExceeded` at `deadline`: AsyncHTTPClient's
    /// own deadline stops counting once the response head arrives, so a stalled body would otherwise wait forever.
    ///
    /// The caller is answered at the deadline whatever the collecting does with its cancellation: a task group would
    /// wait for its child, and a body cancelled before its first read went on to the stall's end under the full
    /// suite's load (12.06 s for a 300 ms deadline, CI's run of 4638454). The collecting is cancelled and ends on
    /// its own.
    func collect(upTo maxBytes: Int, deadline: NIODeadline) async throws -> ByteBuffer {
        let work = Task { try await self.collect(upTo: maxBytes) }
        let waiting = Waiting()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                waiting.slot.withLock { $0 = continuation }
                Task {
                    let result = await work.result
                    waiting.slot.withLock { $0.take() }?.resume(with: result)
                }
                Task {
                    let remaining = deadline - .now()
                    try? await Task.sleep(nanoseconds: UInt64(Swift.max(remaining.nanoseconds, 0)))
                    guard let continuation = waiting.slot.withLock({ $0.take() }) else { return }
                    work.cancel()
                    continuation.resume(throwing: HTTPClientError.deadlineExceeded)
                }
            }
        } onCancel: {
            work.cancel()
        }
    }
}

/// The caller's continuation, resumed by whichever comes first: the body or the deadline.
private final class Waiting: Sendable {
    let slot = Mutex<CheckedContinuation<ByteBuffer, any Error>?>(nil)
}
