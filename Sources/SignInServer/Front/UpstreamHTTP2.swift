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
final class UpstreamHTTP2: Sendable {
    typealias Stream = NIOAsyncChannel<HTTPResponsePart, HTTPRequestPart>
    struct Connection: Sendable {
        let channel: any Channel
        let multiplexer: NIOHTTP2Handler.AsyncStreamMultiplexer<Void>
    }

    private let settings: UpstreamSettings
    private let current = NIOLockedValueBox<Connection?>(nil)

    init(settings: UpstreamSettings) {
        self.settings = settings
    }

    /// A new stream on the connection, connecting first when there is none (or it ended).
    func openStream() async throws -> Stream {
        let connection = try await connection()
        return try await connection.multiplexer.openStream { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(HTTP2FramePayloadToHTTPClientCodec())
                return try Stream(wrappingChannelSynchronously: channel)
            }
        }
    }

    private func connection() async throws -> Connection {
        if let existing = current.withLockedValue({ $0 }), existing.channel.isActive { return existing }
        let made = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(UpstreamClient.connectTimeout(settings))
            .connect(host: settings.host, port: settings.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let multiplexer = try channel.pipeline.syncOperations.configureAsyncHTTP2Pipeline(mode: .client) { stream in
                        // The upstream may not open streams (no server push): any it tries is closed.
                        stream.close()
                    }
                    return Connection(channel: channel, multiplexer: multiplexer)
                }
            }
        current.withLockedValue { $0 = made }
        return made
    }

    /// Ends the connection (at the server's shutdown).
    func close() {
        current.withLockedValue { connection in
            connection?.channel.close(promise: nil)
            connection = nil
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
        var head = HTTPRequest(method: request.method, scheme: "http", authority: settings.authority, path: settings.basePath + target.forwarded)
        for (name, value) in upstreamHeaders(request, context: context, identity: identity) where name.lowercased() != "host" {
            if let field = HTTPField.Name(name.lowercased()) { head.headerFields.append(HTTPField(name: field, value: value)) }
        }
        if let te = request.headers[.te], te.lowercased().split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == "trailers" }) {
            head.headerFields[.te] = "trailers"
        }
        let requestHead = head
        let stream: UpstreamHTTP2.Stream
        do {
            stream = try await connection.openStream()
        } catch {
            holder.release()
            throw .unreachable(error)
        }
        // The exchange runs in a task of its own: it writes the request as its body comes, and hands the answer on, its
        // head through `answered` and its body and trailers through `parts`, until either side ends.
        let upload = UploadEnd()
        let body = ObservedBody(base: request.body, end: upload)
        let answered = stream.channel.eventLoop.makePromise(of: HTTPResponse.self)
        let (parts, feed) = AsyncThrowingStream<HTTPResponsePart, any Error>.makeStream()
        let exchange = Task {
            do {
                try await stream.executeThenClose { inbound, outbound in
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask {
                            try await outbound.write(.head(requestHead))
                            for try await buffer in body { try await outbound.write(.body(buffer)) }
                            try await outbound.write(.end(nil))
                        }
                        var headSeen = false
                        for try await part in inbound {
                            switch part {
                            case .head(let response) where response.status.kind == .informational:
                                continue
                            case .head(let response) where !headSeen:
                                headSeen = true
                                answered.succeed(response)
                            default:
                                feed.yield(part)
                            }
                        }
                        if !headSeen { answered.fail(Failure.broken("the upstream ended the stream without an answer")) }
                        feed.finish()
                        group.cancelAll()
                    }
                }
            } catch {
                answered.fail(error)
                feed.finish(throwing: error)
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
        do {
            response = try await answered.futureResult.get()
            timer.cancel()
        } catch {
            timer.cancel()
            exchange.cancel()
            stream.channel.close(promise: nil)
            await upload.stop()
            holder.release()
            switch error {
            case let failure as Failure: throw failure
            default: throw .unreachable(error)
            }
        }
        switch AnswerFilter.rule(status: response.status.code, method: request.method.rawValue, askedToSwitch: false) {
        case .final:
            break
        case .broken(let reason):
            exchange.cancel()
            await upload.stop()
            holder.release()
            throw .broken(reason)
        case .interim, .switched:
            exchange.cancel()
            await upload.stop()
            holder.release()
            throw .broken("the upstream answered \(response.status.code) where its answer was due")
        }
        var fields = HTTPHeaders()
        for field in response.headerFields { fields.add(name: field.name.rawName, value: field.value) }
        let failures = failures
        let logger = context.logger
        return Response(
            status: response.status, headers: Self.responseHeaders(fields),
            body: ResponseBody { writer in
                defer { holder.release() }
                var trailers: HTTPFields?
                do {
                    for try await part in parts {
                        switch part {
                        case .body(let buffer): try await writer.write(buffer)
                        case .end(let ending): trailers = ending
                        case .head: continue
                        }
                    }
                } catch {
                    failures.brokeOff("\(error)", logger: logger)
                    throw error
                }
                holder.release()
                await upload.stop()
                try await writer.finish(trailers)
            }
        )
    }
}
