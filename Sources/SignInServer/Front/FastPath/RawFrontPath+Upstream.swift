import DoorHTTP
import Foundation
import HTTPTypes
import Logging
import NIOCore

/// The byte path's upstream side: a place at the upstream, a connection from the raw pool, the request written, the
/// answer relayed as it comes (`UpstreamAnswerRelay`), and what a failure becomes.
extension RawFrontPath {

    /// Takes a place at the upstream for the exchange (`upstream_max_connections`), then connects; with none free, waits
    /// in line for one for at most `upstream_timeout_ms` (then, or with the line full, siwa's 503 page).
    func admit() {
        guard let exchange, let context, let upstream else { return }
        let admission = upstream.gate.forwarder.admission
        if exchange.tryAdmit(admission) { return connect(fresh: false) }
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        exchange.waitForPlace(at: admission, on: context.eventLoop, waitingAtMost: .milliseconds(Int64(upstream.rawPool.settings.timeoutMS))) {
            granted, waited in handler.value.admitted(granted, waited)
        }
    }

    /// The wait for a place at the upstream is over for `waited`: connect, or answer 503.
    private func admitted(_ granted: Bool, _ waited: ByteExchange) {
        guard let exchange, exchange === waited else {
            // The client left meanwhile: the place goes to the next in line.
            if granted { upstream?.gate.forwarder.admission.leave() }
            return
        }
        exchange.ticket = nil
        guard granted else { return failed(.busy) }
        exchange.admitted = true
        connect(fresh: false)
    }

    /// Frees the exchange's place at the upstream, or its place in line.
    private func release(_ exchange: ByteExchange) {
        guard let admission = upstream?.gate.forwarder.admission else { return }
        exchange.release(admission)
    }

    private func connect(fresh: Bool) {
        guard let context, let pool = upstream?.rawPool else { return }
        pool.acquire(on: context.eventLoop, fresh: fresh) { result in
            switch result {
            case .success(let (connection, reused)): self.connected(connection, reused: reused)
            case .failure(let failure): self.failed(failure)
            }
        }
    }

    private func connected(_ connection: UpstreamConnection<ByteBuffer>, reused: Bool) {
        guard let exchange, let context else {
            // The client left meanwhile: the connection goes back unused.
            upstream?.rawPool.finish(connection, reusable: true)
            return
        }
        let handler = connection.handler.value
        handler.delegate = self
        exchange.attempt.connection = connection
        exchange.attempt.reused = reused
        let timeoutMS = Int64(upstream?.rawPool.settings.timeoutMS ?? UpstreamSettings.defaultTimeoutMS)
        exchange.deadline = .now() + .milliseconds(timeoutMS)
        armTimer(context)
        handler.send(exchange.request)
    }

    /// When an answer's body that has gone silent now is ended (`upstream_idle_timeout_ms` from now).
    func idleDeadline() -> NIODeadline {
        .now() + .milliseconds(Int64(upstream?.rawPool.settings.idleTimeoutMS ?? UpstreamSettings.defaultIdleTimeoutMS))
    }

    func armTimer(_ context: ChannelHandlerContext) {
        // Asked on every read of an answer's body: a timer that serves costs no new closure.
        guard let deadline = exchange?.deadline else { return }
        timer.arm(deadline, for: self, on: context.eventLoop)
    }

    func timerFired() {
        guard let context, let due = exchange?.deadline else { return }
        if due <= .now() {
            timedOut()
        } else {
            armTimer(context)
        }
    }

    private func timedOut() {
        guard let exchange else { return }
        guard exchange.body == nil else {
            return upstreamBrokeMidway("the upstream's answer was silent for upstream_idle_timeout_ms (\(upstream?.rawPool.settings.idleTimeoutMS ?? 0) ms)")
        }
        upstream?.rawPool.finish(exchange.attempt.connection, reusable: false)
        failed(.timedOut)
    }

    /// No answer came: a reused connection is tried once more with a new one; otherwise siwa's 502 or 504 page.
    private func failed(_ failure: UpstreamForwarder.Failure) {
        guard let exchange, let context else { return }
        exchange.deadline = nil
        if exchange.attempt.retries(after: failure) {
            exchange.answer = nil
            return connect(fresh: true)
        }
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        answers.failurePage(failure, for: requestForPage(exchange), on: context.eventLoop) { head, body in handler.value.answerFailure(head, body: body) }
    }

    /// The client's request as the page renderer reads it (its language, whether it asks for JSON).
    private func requestForPage(_ exchange: ByteExchange) -> HTTPRequest {
        let fields = ConnectionMemory.fields(of: exchange.head, in: exchange.headBytes)
        return HTTPRequest(method: .get, scheme: nil, authority: exchange.head.host, path: exchange.head.target, headerFields: fields)
    }

    private func answerFailure(_ head: HTTPResponse, body: ByteBuffer) {
        guard let context, let exchange, exchange.body == nil else { return }
        var out = ByteHead.written(head, closing: exchange.closeClient, allocator: context.channel.allocator)
        var body = body
        out.writeBuffer(&body)
        // Flushed by `finish`.
        context.write(wrapOutboundOut(out), promise: nil)
        finish(reusable: false)
    }

    func upstream(read buffer: ByteBuffer) {
        guard let exchange, let context else { return }
        var buffer = buffer
        if exchange.body == nil {
            // The head, read whole first (interim answers skipped).
            if exchange.answer == nil {
                exchange.answer = buffer
            } else {
                exchange.answer?.writeBuffer(&buffer)
            }
            guard var answer = exchange.answer else { return }
            while true {
                let parse = answer.withUnsafeReadableBytes { RawHTTP.response($0) }
                switch parse {
                case .incomplete:
                    exchange.answer = answer
                    return
                case .invalid(let reason):
                    return upstreamBroke("upstream answered with something that is not HTTP/1.1: \(reason)")
                case .head(let head):
                    switch AnswerFilter.rule(status: head.status, method: exchange.head.method, askedToSwitch: false) {
                    case .final:
                        break
                    case .interim:
                        answer.moveReaderIndex(forwardBy: head.length)
                        continue
                    case .broken(let reason):
                        return upstreamBroke(reason)
                    case .switched:
                        return upstreamBroke("the upstream switched protocols unasked")
                    }
                    exchange.answer = nil
                    exchange.keepAlive = head.keepAlive
                    var (out, body) = UpstreamAnswerRelay.head(head, from: answer, closeClient: exchange.closeClient, dates: answers.dates, allocator: context.channel.allocator)
                    answer.moveReaderIndex(forwardBy: head.length)
                    // A small body that came whole with its head goes out with it, in one write.
                    if case .length(let remaining) = body, remaining <= 16 * 1024, answer.readableBytes >= remaining,
                        var whole = answer.readSlice(length: remaining)
                    {
                        out.writeBuffer(&whole)
                        body = .ended(reusable: true)
                    }
                    context.write(wrapOutboundOut(out), promise: nil)
                    exchange.body = body
                    buffer = answer
                }
                break
            }
        }
        let body: UpstreamAnswerRelay.Body
        do {
            body = try UpstreamAnswerRelay.relay(&buffer, body: exchange.body ?? .ended(reusable: false), allocator: context.channel.allocator) {
                context.write(self.wrapOutboundOut($0), promise: nil)
            }
        } catch {
            return upstreamBrokeMidway("upstream sent a malformed chunked body")
        }
        exchange.body = body
        if case .ended(let reusable) = body {
            // Bytes after the answer's end answer no request: that connection is not used again. (`finish` flushes.)
            finish(reusable: reusable && exchange.keepAlive && buffer.readableBytes == 0)
        } else if !context.channel.isWritable, let connection = exchange.attempt.connection {
            // The client is slower than the upstream: stop reading the upstream until it catches up (and its silence
            // meanwhile is siwa's doing, not the upstream's).
            exchange.deadline = nil
            connection.readUpstream(false)
        } else {
            exchange.deadline = idleDeadline()
            armTimer(context)
        }
    }




    func upstreamReadComplete() {
        context?.flush()
    }

    func upstream(failed error: (any Error)?) {
        guard let exchange, let context else { return }
        exchange.attempt.connection = nil
        switch exchange.body {
        case nil:
            failed(.unreachable(error ?? UpstreamClosed()))
        case .untilClose?:
            guard error == nil else {
                // Reset, or TLS ended without its close: the body may be cut, and must not look whole.
                return upstreamBrokeMidway("upstream connection failed before its answer was over: \(error.map { "\($0)" } ?? "")")
            }
            // The end of the body, as the upstream framed it (flushed by `finish`).
            context.write(wrapOutboundOut(ByteBuffer(string: "0\r\n\r\n")), promise: nil)
            finish(reusable: false)
        case .ended?:
            break
        case .length?, .chunked?:
            upstreamBrokeMidway("upstream connection ended before its answer did: \(error.map { "\($0)" } ?? "closed")")
        }
    }

    /// The upstream's answer cannot be read before anything reached the client: the 502 page, its connection closed.
    private func upstreamBroke(_ reason: String) {
        guard let exchange else { return }
        upstream?.rawPool.finish(exchange.attempt.connection, reusable: false)
        // Not a connection the upstream closed while idle: nothing to try again.
        exchange.attempt.retried = true
        failed(.broken(reason))
    }

    /// The answer broke off midway: the client cannot be told otherwise than by ending its connection.
    private func upstreamBrokeMidway(_ reason: String) {
        upstream?.gate.failures.brokeOff(reason, logger: answers.logger)
        abandonExchange()
        context?.close(promise: nil)
    }

    /// The exchange is over: its connection goes back to the pool (or is closed), and what waited is taken up.
    private func finish(reusable: Bool) {
        guard let exchange, let context else { return }
        self.exchange = nil
        release(exchange)
        upstream?.rawPool.finish(exchange.attempt.connection, reusable: reusable)
        if exchange.closeClient { return endConnection(context, after: context.writeAndFlush(wrapOutboundOut(ByteBuffer()))) }
        // Flushed once the upstream's connection is back in the pool: an HTTP/2 stream ends, and its channel closes,
        // with the flush of its answer's last frame, which would otherwise abandon (and close) a reusable connection.
        context.flush()
        clientTimer?.answerEnded()
        if readHeld {
            readHeld = false
            context.read()
        }
        takePending(context)
    }

    /// Ends the connection after an answer that closes it, as every carrier does (`SaysConnectionOutcome.end`);
    /// what the client sends after it is not read.
    func endConnection(_ context: ChannelHandlerContext, after written: EventLoopFuture<Void>) {
        ended = true
        pending = nil
        SaysConnectionOutcome.end(context, after: written)
    }

    func abandonExchange() {
        guard let exchange else { return }
        self.exchange = nil
        release(exchange)
        upstream?.rawPool.finish(exchange.attempt.connection, reusable: false)
    }
}
