import DoorHTTP
import NIOCore

/// One request on the byte path's way to the upstream and back (`RawFrontPath`): what was sent, the connection it
/// went on, what has come back, its deadline and its place at the upstream. A class: it is read and changed on every
/// event of the exchange, and a reference costs less to pass around than its fields.
final class ByteExchange {
    /// The client's request head (for siwa's 502 and 504 pages).
    let head: RawHTTP.RequestHead
    let headBytes: ByteBuffer
    /// The request as the upstream gets it.
    let request: ByteBuffer
    var attempt = UpstreamAttempt<ByteBuffer>()
    /// The upstream's answer so far, until its head has been read whole.
    var answer: ByteBuffer?
    var body: UpstreamAnswerRelay.Body?
    /// The upstream keeps its connection open after this answer.
    var keepAlive = false
    let closeClient: Bool
    /// When the upstream's response head is due (`upstream_timeout_ms` after the request was sent); once it came,
    /// when its body is silent too long (`upstream_idle_timeout_ms` after its last bytes); nil while the client
    /// is not taking the body (the upstream is not read then).
    var deadline: NIODeadline?
    /// It holds a place at the upstream (`upstream_max_connections`).
    var admitted = false
    /// It waits in line for one.
    var ticket: UInt64?

    init(head: RawHTTP.RequestHead, headBytes: ByteBuffer, request: ByteBuffer, closeClient: Bool) {
        self.head = head
        self.headBytes = headBytes
        self.request = request
        self.closeClient = closeClient
    }

    /// Takes a place at the upstream (`admission`) when one is free: true then.
    func tryAdmit(_ admission: UpstreamAdmission) -> Bool {
        admitted = admission.tryEnter()
        return admitted
    }

    /// Waits in line for a place at the upstream (`ticket`) for at most `limit`: `decided` runs on `loop` with whether
    /// a place came (false past the limit or with the line full) and the exchange that waited.
    func waitForPlace(
        at admission: UpstreamAdmission, on loop: any EventLoop, waitingAtMost limit: TimeAmount, decided: @escaping (Bool, ByteExchange) -> Void
    ) {
        let waiting = NIOLoopBound(self, eventLoop: loop)
        let callback = NIOLoopBound(decided, eventLoop: loop)
        // Without a ticket, `enter` has already said (a place came at once, or the line is full).
        guard let ticket = admission.enter({ granted in loop.execute { callback.value(granted, waiting.value) } }) else { return }
        self.ticket = ticket
        loop.assumeIsolated().scheduleTask(in: limit) {
            if admission.giveUp(ticket) { decided(false, self) }
        }
    }

    /// Frees its place at the upstream, or its place in line.
    func release(_ admission: UpstreamAdmission) {
        if admitted {
            admitted = false
            admission.leave()
        } else if let ticket {
            self.ticket = nil
            // Its place came meanwhile: whoever waited frees it when it arrives.
            _ = admission.giveUp(ticket)
        }
    }
}
