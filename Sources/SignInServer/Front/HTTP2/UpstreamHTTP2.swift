import DoorHTTP
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOHTTPTypes
import NIOHTTPTypesHTTP2
import NIOPosix

/// `upstream_http2` (issue 36): the upstream reached over HTTP/2 with prior knowledge (h2c), every request a stream
/// of one connection, made again when it ends. What only HTTP/2 carries passes: trailers (a gRPC service's
/// `grpc-status`), and requests and answers that stream both ways at once.
///
/// One connection at a time: requests that find none wait for the one connect in progress instead of each making
/// their own. A connection the upstream sends GOAWAY on (a graceful restart, nginx's `keepalive_requests`, grpc-go's
/// `MaxConnectionAge`) takes no new stream: the next request connects anew, and the old connection is closed once its
/// streams have ended (RFC 9113 6.8). A stream the upstream refused unprocessed (REFUSED_STREAM, or beyond a GOAWAY's
/// last stream, RFC 9113 8.7) is asked again once on a new stream when the request's body is whole in hand.
final class UpstreamHTTP2: Sendable {
    typealias Stream = NIOAsyncChannel<HTTPResponsePart, HTTPRequestPart>

    /// A stream opened, on its connection.
    struct Opened: Sendable {
        let stream: Stream
        let closing: ClosingWatch
        let connection: Connection

        /// Whether the upstream refused the stream unprocessed (RFC 9113 8.7): it reset it REFUSED_STREAM, or its
        /// GOAWAY named a last stream before it (NIO closes those streams with CANCEL). Asked on the connection's
        /// event loop, after whatever it was reading when the stream ended: the GOAWAY and the streams it drops come
        /// in one read.
        func refusedUnprocessed() async -> Bool {
            let closing = closing
            let usage = connection.usage
            let refused = connection.channel.eventLoop.submit { () -> Bool in
                guard let (stream, code) = closing.closed else { return false }
                if code == .refusedStream { return true }
                return code == .cancel && usage.lastStreamBeforeGoAway.map { stream > $0 } == true
            }
            return (try? await refused.get()) ?? false
        }
    }

    /// First in a stream's pipeline: sees NIO's error for a stream the upstream closed, with its error code.
    final class ClosingWatch: ChannelInboundHandler, Sendable {
        typealias InboundIn = HTTP2Frame.FramePayload
        typealias InboundOut = HTTP2Frame.FramePayload
        private let seen = NIOLockedValueBox<(HTTP2StreamID, NIOHTTP2.HTTP2ErrorCode)?>(nil)

        var closed: (HTTP2StreamID, NIOHTTP2.HTTP2ErrorCode)? { seen.withLockedValue { $0 } }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            if let closed = error as? NIOHTTP2Errors.StreamClosed {
                seen.withLockedValue { $0 = (closed.streamID, closed.errorCode) }
            }
            context.fireErrorCaught(error)
        }
    }

    struct Connection: Sendable {
        let channel: any Channel
        let multiplexer: NIOHTTP2Handler.AsyncStreamMultiplexer<Void>
        let usage: Usage
    }

    /// A connection's open streams, and whether the upstream has said GOAWAY on it: once it has and none is open, the
    /// connection is closed.
    final class Usage: Sendable {
        private struct State {
            var open = 0
            var goneAway = false
            var lastStream: HTTP2StreamID?
        }
        private let state = NIOLockedValueBox(State())
        private let channel: any Channel

        init(channel: any Channel) {
            self.channel = channel
        }

        var goneAway: Bool { state.withLockedValue { $0.goneAway } }

        /// The last stream the upstream's GOAWAY said it processed (the lowest, when it said several).
        var lastStreamBeforeGoAway: HTTP2StreamID? { state.withLockedValue { $0.lastStream } }

        /// The upstream said GOAWAY: no new stream.
        func goAway(lastStream: HTTP2StreamID) {
            change { state in
                state.goneAway = true
                state.lastStream = min(state.lastStream ?? lastStream, lastStream)
            }
        }

        func opened() { change { $0.open += 1 } }

        func closed() { change { $0.open -= 1 } }

        private func change(_ body: (inout State) -> Void) {
            let idle = state.withLockedValue { state -> Bool in
                body(&state)
                return state.goneAway && state.open == 0
            }
            if idle { channel.close(promise: nil) }
        }
    }

    private enum State {
        case none
        case connecting(EventLoopFuture<Connection>)
        case ready(Connection)
    }

    private let settings: UpstreamSettings
    private let current = NIOLockedValueBox(State.none)

    init(settings: UpstreamSettings) {
        self.settings = settings
    }

    /// A new stream on the connection, connecting first when there is none (or it ended, or the upstream said GOAWAY).
    func openStream() async throws -> Opened {
        let connection = try await connection()
        let closing = ClosingWatch()
        let stream = try await connection.multiplexer.openStream { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(closing)
                try channel.pipeline.syncOperations.addHandler(HTTP2FramePayloadToHTTPClientCodec())
                return try Stream(wrappingChannelSynchronously: channel)
            }
        }
        connection.usage.opened()
        stream.channel.closeFuture.whenComplete { _ in connection.usage.closed() }
        return Opened(stream: stream, closing: closing, connection: connection)
    }

    private func connection() async throws -> Connection {
        let future = current.withLockedValue { state -> EventLoopFuture<Connection> in
            switch state {
            case .ready(let connection) where connection.channel.isActive && !connection.usage.goneAway:
                return connection.channel.eventLoop.makeSucceededFuture(connection)
            case .connecting(let pending):
                return pending
            case .none, .ready:
                let pending = connect()
                state = .connecting(pending)
                pending.whenComplete { result in
                    self.current.withLockedValue { state in
                        guard case .connecting(let waited) = state, waited === pending else { return }
                        state = (try? result.get()).map(State.ready) ?? .none
                    }
                }
                return pending
            }
        }
        return try await future.get()
    }

    private func connect() -> EventLoopFuture<Connection> {
        let settings = settings
        let promise = MultiThreadedEventLoopGroup.singleton.next().makePromise(of: Connection.self)
        promise.completeWithTask {
            try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(UpstreamClient.connectTimeout(settings))
                .connect(host: settings.host, port: settings.port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let usage = Usage(channel: channel)
                        let multiplexer = try channel.pipeline.syncOperations.configureAsyncHTTP2Pipeline(mode: .client) { stream in
                            // The upstream may not open streams (no server push): any it tries is closed.
                            stream.close()
                        }
                        try channel.pipeline.syncOperations.addHandler(GoAwayWatch(usage: usage))
                        return Connection(channel: channel, multiplexer: multiplexer, usage: usage)
                    }
                }
        }
        return promise.futureResult
    }

    /// Ends the connection (at the server's shutdown).
    func close() {
        let state = current.withLockedValue { state -> State in
            defer { state = .none }
            return state
        }
        switch state {
        case .ready(let connection): connection.channel.close(promise: nil)
        case .connecting(let pending): pending.whenSuccess { $0.channel.close(promise: nil) }
        case .none: break
        }
    }

    /// After NIO's HTTP/2 handler, which passes on the connection's own frames: a GOAWAY retires the connection.
    final class GoAwayWatch: ChannelInboundHandler {
        typealias InboundIn = HTTP2Frame
        private let usage: Usage

        init(usage: Usage) {
            self.usage = usage
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            if case .goAway(let lastStream, _, _) = unwrapInboundIn(data).payload { usage.goAway(lastStream: lastStream) }
        }
    }
}

extension UpstreamForwarder {
    /// `forward` over HTTP/2 (`upstream_http2`): the same head (`upstreamHeaders`, less `Host`, which is the
    /// `:authority`), `TE: trailers` kept where the client asked for it, the same answer filter, the same failures;
    /// the answer's trailers passed on.
    func forwardOverHTTP2(
        _ request: Request, target: RequestTarget, context: ServerContext, identity: [HTTPField], connection: UpstreamHTTP2, place: UpstreamAdmission.Pass
    ) async throws(Failure) -> Response {
        let holder = PlaceHolder(place)
        var head = HTTPRequest(method: request.method, scheme: "http", authority: settings.authority, path: settings.requestTarget(target.forwarded))
        for (name, value) in upstreamHeaders(request, context: context, identity: identity) where name.lowercased() != "host" {
            if let field = HTTPField.Name(name.lowercased()) { head.headerFields.append(HTTPField(name: field, value: value)) }
        }
        if let te = request.headers[.te], te.lowercased().split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == "trailers" }) {
            head.headerFields[.te] = "trailers"
        }
        let requestHead = head
        let upload = UploadEnd()
        let kept = KeptBody(limit: Self.keptBodyLimit)
        // A request that says no body (no length, or 0, and no transfer coding: RFC 9112 6.3) has it whole from the
        // start, however soon the upstream refuses its stream.
        if request.headers[.transferEncoding] == nil, (request.headers[.contentLength] ?? "0") == "0" { kept.ended() }
        var body = RetryableBody(.live(ObservedBody(base: request.body, end: upload), kept))
        var sentAgain = false
        while true {
            let opened: UpstreamHTTP2.Opened
            do {
                opened = try await connection.openStream()
            } catch {
                holder.release()
                throw .unreachable(error)
            }
            let stream = opened.stream
            // The exchange runs in a task of its own: it writes the request as its body comes, reads the answer's head
            // and hands it over through `answered`, then hands the stream's reader to the answer's body (`rest`), which
            // reads the rest as the client takes it: HTTP/2's flow control holds the upstream back while the client
            // does not read. The stream is closed (RST_STREAM CANCEL to the upstream if it is not over) once the body
            // is done with it, or the client is gone (`StreamRelease`, also when the body is never written).
            let loop = stream.channel.eventLoop
            // The answer's head with its status rule, judged once here.
            let answered = loop.makePromise(of: (HTTPResponse, AnswerFilter.StatusRule).self)
            let rest = loop.makePromise(of: Unchecked<NIOAsyncChannelInboundStream<HTTPResponsePart>.AsyncIterator>.self)
            let done = loop.makePromise(of: Void.self)
            let sent = body
            let exchange = Task {
                do {
                    try await stream.executeThenClose { inbound, outbound in
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            group.addTask {
                                try await outbound.write(.head(requestHead))
                                for try await buffer in sent { try await outbound.write(.body(buffer)) }
                                try await outbound.write(.end(nil))
                            }
                            var iterator = inbound.makeAsyncIterator()
                            reading: while true {
                                switch try await iterator.next() {
                                case .head(let response)?:
                                    // The status rule every carrier follows: an interim answer is skipped; any other
                                    // status is judged below (a 101, which HTTP/2 does not have, is a broken upstream).
                                    let rule = AnswerFilter.rule(status: response.status.code, method: requestHead.method.rawValue, askedToSwitch: false)
                                    if rule == .interim { continue }
                                    answered.succeed((response, rule))
                                    break reading
                                case .body?, .end?:
                                    throw Failure.broken("the upstream sent a body before its answer's head")
                                case nil:
                                    throw Failure.broken("the upstream ended the stream without an answer")
                                }
                            }
                            rest.succeed(Unchecked(iterator))
                            try await done.futureResult.get()
                            group.cancelAll()
                        }
                    }
                } catch {
                    answered.fail(error)
                    rest.fail(error)
                }
            }
            // The answer's head within upstream_timeout_ms of the request's last byte (at once without a body).
            let timeoutMS = settings.timeoutMS
            let timer = Task {
                await upload.ended()
                try await Task.sleep(for: .milliseconds(timeoutMS))
                answered.fail(Failure.timedOut)
            }
            let response: HTTPResponse
            let rule: AnswerFilter.StatusRule
            do {
                (response, rule) = try await answered.futureResult.get()
                timer.cancel()
                kept.release()
            } catch {
                timer.cancel()
                exchange.cancel()
                stream.channel.close(promise: nil)
                await upload.stop()
                done.succeed()
                // RFC 9113 8.7: a stream the upstream refused was not processed, and may be sent again, whatever its
                // method (a graceful restart's GOAWAY racing the request, a server at its stream limit). Once, on a new
                // stream (a new connection after a GOAWAY), when the body is whole in hand; one still arriving cannot
                // be sent again, and is the 502 it was before.
                if !sentAgain, let whole = kept.whole(), await opened.refusedUnprocessed() {
                    sentAgain = true
                    context.logger.info("the upstream refused the stream unprocessed; sent again on a new stream")
                    body = RetryableBody(.kept(whole))
                    continue
                }
                holder.release()
                switch error {
                case let failure as Failure: throw failure
                default: throw .unreachable(error)
                }
            }
            let release = StreamRelease(done: done, holder: holder)
            switch rule {
            case .final:
                break
            case .broken(let reason):
                exchange.cancel()
                await upload.stop()
                release.release()
                throw .broken(reason)
            case .interim, .switched:
                exchange.cancel()
                await upload.stop()
                release.release()
                throw .broken("the upstream answered \(response.status.code) where its answer was due")
            }
            var fields = HTTPHeaders()
            for field in response.headerFields { fields.add(name: field.name.rawName, value: field.value) }
            let failures = failures
            let logger = context.logger
            return Response(
                status: response.status, headers: Self.responseHeaders(fields),
                body: ResponseBody { writer in
                    // Done with the stream however this ends: the client gone (a write that throws), the upstream's
                    // answer broken off, or whole.
                    defer { release.release() }
                    var trailers: HTTPFields?
                    do {
                        var iterator = try await rest.futureResult.get().value
                        var ended = false
                        reading: while let part = try await iterator.next() {
                            switch part {
                            case .body(let buffer): try await writer.write(buffer)
                            case .end(let ending):
                                trailers = ending.map(Self.trailerFields)
                                ended = true
                                break reading
                            case .head: continue
                            }
                        }
                        // The stream ended without END_STREAM (the upstream's connection reset or closed midway): the
                        // answer must not look whole to the client (RFC 9112 8).
                        guard ended else { throw Failure.broken("the upstream's stream ended before its answer did") }
                    } catch {
                        failures.brokeOff("\(error)", logger: logger)
                        throw error
                    }
                    release.release()
                    await upload.stop()
                    try await writer.finish(trailers)
                }
            )
        }
    }

    /// The most of a request body kept to send again when the upstream refuses its stream unprocessed.
    static let keptBodyLimit = 64 * 1024
}

/// A request body's bytes kept as they are read, up to `limit`, so that a request the upstream refused unprocessed can
/// be sent again (`forwardOverHTTP2`).
final class KeptBody: Sendable {
    private struct State {
        var buffers: [ByteBuffer] = []
        var size = 0
        var whole = false
        var over = false
    }
    private let state = NIOLockedValueBox(State())
    private let limit: Int

    init(limit: Int) {
        self.limit = limit
    }

    func keep(_ buffer: ByteBuffer) {
        state.withLockedValue { state in
            guard !state.over else { return }
            state.size += buffer.readableBytes
            if state.size > limit {
                state.over = true
                state.buffers = []
            } else {
                state.buffers.append(buffer)
            }
        }
    }

    func ended() {
        state.withLockedValue { $0.whole = true }
    }

    /// Keeps nothing more, and lets go of what it kept: the answer has come, so nothing will be sent again (a long
    /// stream's small messages would otherwise each hold the read buffer they are a slice of).
    func release() {
        state.withLockedValue { state in
            state.over = true
            state.buffers = []
        }
    }

    /// The whole body, when all of it has been read and kept.
    func whole() -> [ByteBuffer]? {
        state.withLockedValue { state in state.whole && !state.over ? state.buffers : nil }
    }
}

/// The body of an HTTP/2 exchange: the client's as it is read (kept on the way, `KeptBody`), or, sent again, what was
/// kept of it.
struct RetryableBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    enum Source: Sendable {
        case live(ObservedBody<RequestBody>, KeptBody)
        case kept([ByteBuffer])
    }
    let source: Source

    init(_ source: Source) {
        self.source = source
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        var live: ObservedBody<RequestBody>.Iterator?
        let kept: KeptBody?
        var replay: IndexingIterator<[ByteBuffer]>

        mutating func next() async throws -> ByteBuffer? {
            guard var iterator = live, let kept else { return replay.next() }
            let buffer = try await iterator.next()
            live = iterator
            // A read cut short by the exchange's end (its task cancelled) also ends as nil: not a whole body.
            if let buffer { kept.keep(buffer) } else if !Task.isCancelled { kept.ended() }
            return buffer
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        switch source {
        case .live(let body, let kept): AsyncIterator(live: body.makeAsyncIterator(), kept: kept, replay: [].makeIterator())
        case .kept(let buffers): AsyncIterator(live: nil, kept: nil, replay: buffers.makeIterator())
        }
    }
}

/// The end of an HTTP/2 exchange's use of its stream and its place at the upstream: once, when the answer's body is
/// done, or when the answer is dropped unwritten (the client gone before its head), at the latest when this goes.
final class StreamRelease: Sendable {
    private let done: EventLoopPromise<Void>
    private let holder: PlaceHolder

    init(done: EventLoopPromise<Void>, holder: PlaceHolder) {
        self.done = done
        self.holder = holder
    }

    func release() {
        holder.release()
        done.succeed()
    }

    deinit {
        release()
    }
}

extension UpstreamForwarder {
    /// An HTTP/2 answer's trailers as the client gets them: through the answer's filter (hop-by-hop fields, a cookie of
    /// siwa's), without framing fields.
    static func trailerFields(_ trailers: HTTPFields) -> HTTPFields {
        var filter = AnswerFilter(connection: trailers[values: .connection])
        var kept = HTTPFields()
        for field in trailers where field.name != .contentLength && filter.keeps(field.name.canonicalName, value: { field.value }) {
            kept.append(field)
        }
        return kept
    }
}
