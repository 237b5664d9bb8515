import Foundation
import Synchronization

/// The loop of an outbox kept in the store (back-channel logouts, account events): claims what is due whenever there
/// is room among the deliveries in flight (`inFlightLimit`) and delivers each in a task of its own, so that a
/// receiver that cannot be reached holds up only its own deliveries, for their request timeout; claims again at once
/// while room and deliveries remain, else after `interval`. A failed claim is reported to `failed` and tried again.
/// Returns when the task is cancelled (graceful shutdown); a claimed delivery not finished comes back when its lease ends.
func pumpOutbox<Delivery: Sendable>(
    inFlightLimit: Int, interval: Duration, claim: @escaping @Sendable (_ room: Int) async throws -> [Delivery],
    deliver: @escaping @Sendable (Delivery) async -> Void, failed: @escaping @Sendable (any Error) -> Void
) async {
    let inFlight = InFlightCount()
    await withDiscardingTaskGroup { group in
        while !Task.isCancelled {
            let room = inFlightLimit - inFlight.count.load(ordering: .relaxed)
            var claimed = 0
            if room > 0 {
                do {
                    let due = try await claim(room)
                    claimed = due.count
                    for delivery in due {
                        inFlight.count.add(1, ordering: .relaxed)
                        group.addTask {
                            await deliver(delivery)
                            inFlight.count.subtract(1, ordering: .relaxed)
                        }
                    }
                } catch {
                    if !Task.isCancelled { failed(error) }
                }
            }
            if claimed == 0 || claimed < room { try? await Task.sleep(for: interval) } else { try? await Task.sleep(for: .milliseconds(20)) }
        }
    }
}

/// How many deliveries are in flight, shared by the loop and the deliveries' tasks.
private final class InFlightCount: Sendable {
    let count = Atomic<Int>(0)
}
