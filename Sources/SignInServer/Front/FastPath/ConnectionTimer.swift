import NIOCore

/// The one timer of a byte-path connection (`RawFrontPath`), armed for the exchange's deadline: scheduling and
/// cancelling one per request showed in profiles, so a timer due no later than the new deadline serves, and one that
/// fires early, for an exchange that has ended or moved its deadline, asks again (`fire` says what is due now).
final class ConnectionTimer {
    private var timer: Scheduled<Void>?
    /// When `timer` fires.
    private var due: NIODeadline?

    /// Whether the timer armed goes off no later than `deadline`: it serves (one due later, the head's when the body's
    /// idle limit is shorter, is replaced).
    func serves(_ deadline: NIODeadline) -> Bool {
        guard timer != nil, let due else { return false }
        return due <= deadline
    }

    /// Arms the timer for `deadline` on `loop`, unless the one armed serves; `fire` runs when it goes off (the caller
    /// checks what is due).
    func arm(_ deadline: NIODeadline, on loop: any EventLoop, fire: @escaping () -> Void) {
        if serves(deadline) { return }
        timer?.cancel()
        due = deadline
        timer = loop.assumeIsolated().scheduleTask(deadline: deadline) {
            self.timer = nil
            self.due = nil
            fire()
        }
    }

    /// Stops the timer (the connection has ended).
    func cancel() {
        timer?.cancel()
        timer = nil
        due = nil
    }
}
