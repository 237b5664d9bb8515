import EnvoyAuthorization
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import SwiftProtobuf

/// Envoy's `ext_authz` over gRPC: `envoy.service.auth.v3.Authorization/Check`, a unary call on siwa's own port (h2c
/// with prior knowledge, `PlainChannel`) or its HTTPS port (HTTP/2 by ALPN). The message is read with the code
/// swift-protobuf generated from Envoy's protos (`EnvoyAuthorization`); the gRPC framing of one unary call is five
/// bytes, read here: siwa serves the call on its own HTTP/2 door, where grpc-swift's server would need a listener of
/// its own. The verdict is the one every door renders (`ExtAuthzController.check`).
extension ExtAuthzController {
    /// The call's path.
    static let grpcPath = EnvoyCheckMessages.path
    typealias GRPCStatus = EnvoyCheckMessages.GRPCStatus

    func addGRPCRoute(to router: Router<ServerContext>) {
        router.post(RouterPath(Self.grpcPath), use: grpc)
    }

    @Sendable func grpc(_ request: Request, context: ServerContext) async throws -> Response {
        guard request.headers[.contentType]?.lowercased().hasPrefix("application/grpc") == true else {
            return Self.grpcAnswer(nil, status: .invalidArgument, message: "not a gRPC request (content-type application/grpc)")
        }
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: EnvoyCheckMessages.maxMessage + 5)
        } catch {
            return Self.grpcAnswer(nil, status: .resourceExhausted, message: "the CheckRequest is larger than \(EnvoyCheckMessages.maxMessage) bytes")
        }
        let message: Envoy_Service_Auth_V3_CheckRequest
        switch EnvoyCheckMessages.unframe(body) {
        case .failure(let problem):
            return Self.grpcAnswer(nil, status: problem.status, message: problem.message)
        case .success(let bytes):
            do {
                message = try Envoy_Service_Auth_V3_CheckRequest(serializedBytes: bytes)
            } catch {
                context.logger.notice("ext_authz gRPC: a CheckRequest siwa cannot read", metadata: ["error": "\(error)"])
                return Self.grpcAnswer(nil, status: .invalidArgument, message: "the CheckRequest could not be read")
            }
        }
        let peer = context.remoteAddress?.ipAddress
        let original = original(of: message, fromTrusted: proxy.trusted(peer), peer: peer)
        switch await check(original, mode: "grpc", logger: context.logger) {
        case .allowed(let set, let remove):
            return Self.grpcAnswer(EnvoyCheckMessages.allowed(set: set, remove: remove), status: .ok, message: nil)
        case .denied(let refusal):
            return Self.grpcAnswer(EnvoyCheckMessages.denied(refusal), status: .ok, message: nil)
        }
    }

    /// The original request as a `CheckRequest` describes it. The client's address is `source.address` when Envoy is
    /// a trusted proxy (Envoy's own idea of the downstream client, after its `xff_num_trusted_hops`), else the peer's.
    func original(of message: Envoy_Service_Auth_V3_CheckRequest, fromTrusted: Bool, peer: String?) -> Original {
        let http = message.attributes.request.http
        let source = message.attributes.source.address.socketAddress.address
        let clientAddress = fromTrusted && !source.isEmpty ? source : proxy.peerName(peer)
        return Original(
            method: http.method.isEmpty ? "GET" : http.method, target: http.path.isEmpty ? "/" : http.path, host: http.host.isEmpty ? nil : http.host,
            scheme: http.scheme.isEmpty ? nil : http.scheme, fields: EnvoyCheckMessages.fields(of: http), fromTrusted: fromTrusted, clientAddress: clientAddress
        )
    }

    /// A gRPC answer: `message` framed as the body (none for an error), and `grpc-status` in the trailers.
    static func grpcAnswer(_ message: (any SwiftProtobuf.Message)?, status: GRPCStatus, message text: String?) -> Response {
        let body = message.map(EnvoyCheckMessages.frame) ?? ByteBuffer()
        var trailers = HTTPFields()
        if let name = HTTPField.Name.grpcStatus { trailers[name] = String(status.rawValue) }
        if let text, let name = HTTPField.Name.grpcMessage { trailers[name] = text.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(.init(charactersIn: " .,()-_"))) ?? "" }
        let last = trailers
        return Response(
            status: .ok, headers: [.contentType: "application/grpc"],
            body: ResponseBody { writer in
                if body.readableBytes > 0 { try await writer.write(body) }
                try await writer.finish(last)
            }
        )
    }
}
