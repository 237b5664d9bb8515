import NIOCore

/// Something with a deadline on a connection's timer: asked when the timer goes off, it checks what is due now and
/// arms the timer again for what is not.
protocol DeadlineWatcher: AnyObject {
    func timerFired()
}

/// The one timer of a byte-path connection, shared by what waits on it: the exchange of an HTTP/1.1 connection, or
/// the exchanges of an HTTP/2 connection's streams (`RawFrontPath`, one per stream, all on the connection's
/// `ConnectionMemory`). Scheduling and cancelling a task per request, or per stream, showed in profiles; here a timer
/// due no later than the new deadline serves, one that fires early (for an exchange that has ended or moved its
/// deadline) asks each watcher again, and a watcher that leaves is only forgotten. The timer is cancelled once, when
/// the connection ends.
final class ConnectionTimer {
    private var timer: Scheduled<Void>?
    /// When `timer` fires.
    private var due: NIODeadline?
    /// What waits on the timer, asked when it fires.
    private var watchers: [ObjectIdentifier: any DeadlineWatcher] = [:]

    /// Whether the timer armed goes off no later than `deadline`: it serves (one due later, the head's when the body's
    /// idle limit is shorter, is replaced).
    func serves(_ deadline: NIODeadline) -> Bool {
        guard timer != nil, let due else { return false }
        return due <= deadline
    }

    /// Arms the timer for `deadline` on `loop`, unless the one armed serves; `watcher` is asked when it goes off (and
    /// checks what is due).
    func arm(_ deadline: NIODeadline, for watcher: any DeadlineWatcher, on loop: any EventLoop) {
        let id = ObjectIdentifier(watcher)
        if watchers[id] == nil { watchers[id] = watcher }
        if serves(deadline) { return }
        timer?.cancel()
        due = deadline
        timer = loop.assumeIsolated().scheduleTask(deadline: deadline) {
            self.timer = nil
            self.due = nil
            self.fire()
        }
    }

    /// Forgets `watcher` (its exchange, or its stream, has ended); the timer stays armed for the others, or goes off
    /// once more for none.
    func forget(_ watcher: any DeadlineWatcher) {
        watchers.removeValue(forKey: ObjectIdentifier(watcher))
    }

    /// Each watcher checks what is due; those still waiting arm the timer again.
    private func fire() {
        let asked = watchers
        watchers.removeAll(keepingCapacity: true)
        for watcher in asked.values { watcher.timerFired() }
    }

    /// Stops the timer and forgets every watcher (the connection has ended).
    func cancel() {
        timer?.cancel()
        timer = nil
        due = nil
        watchers.removeAll()
    }
}
