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
    static let grpcPath = "/envoy.service.auth.v3.Authorization/Check"
    /// The largest `CheckRequest` siwa reads (Envoy's `with_request_body` may add up to its `max_request_bytes`).
    static let grpcMaxMessage = 1 << 20

    func addGRPCRoute(to router: Router<ServerContext>) {
        router.post(RouterPath(Self.grpcPath), use: grpc)
    }

    /// gRPC status codes siwa answers with (grpc/doc/statuscodes.md).
    enum GRPCStatus: Int32 {
        case ok = 0
        case invalidArgument = 3
        case permissionDenied = 7
        case resourceExhausted = 8
        case unimplemented = 12
        case unauthenticated = 16
    }

    @Sendable func grpc(_ request: Request, context: ServerContext) async throws -> Response {
        guard request.headers[.contentType]?.lowercased().hasPrefix("application/grpc") == true else {
            return Self.grpcAnswer(nil, status: .invalidArgument, message: "not a gRPC request (content-type application/grpc)")
        }
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: Self.grpcMaxMessage + 5)
        } catch {
            return Self.grpcAnswer(nil, status: .resourceExhausted, message: "the CheckRequest is larger than \(Self.grpcMaxMessage) bytes")
        }
        let message: Envoy_Service_Auth_V3_CheckRequest
        switch Self.unframe(body) {
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
        let response: Envoy_Service_Auth_V3_CheckResponse
        switch await check(original, mode: "grpc", logger: context.logger) {
        case .allowed(let set, let remove):
            var ok = Envoy_Service_Auth_V3_OkHttpResponse()
            ok.headers = set.map { Self.option($0.name.canonicalName, $0.value) }
            ok.headersToRemove = remove
            var answer = Envoy_Service_Auth_V3_CheckResponse()
            answer.status.code = GRPCStatus.ok.rawValue
            answer.okResponse = ok
            response = answer
        case .denied(let refusal):
            response = Self.denied(refusal)
        }
        return Self.grpcAnswer(response, status: .ok, message: nil)
    }

    /// The original request as a `CheckRequest` describes it. The client's address is `source.address` when Envoy is
    /// a trusted proxy (Envoy's own idea of the downstream client, after its `xff_num_trusted_hops`), else the peer's.
    func original(of message: Envoy_Service_Auth_V3_CheckRequest, fromTrusted: Bool, peer: String?) -> Original {
        let http = message.attributes.request.http
        var fields = HTTPFields()
        if !http.headerMap.headers.isEmpty {
            // `encode_raw_headers`: each field as sent, its value in `raw_value`.
            for header in http.headerMap.headers {
                let value = header.rawValue.isEmpty ? header.value : String(decoding: header.rawValue, as: UTF8.self)
                if let name = HTTPField.Name(header.key), !header.key.hasPrefix(":") { fields.append(HTTPField(name: name, value: value)) }
            }
        } else {
            for (key, value) in http.headers.sorted(by: { $0.key < $1.key }) where !key.hasPrefix(":") {
                if let name = HTTPField.Name(key) { fields.append(HTTPField(name: name, value: value)) }
            }
        }
        let source = message.attributes.source.address.socketAddress.address
        let clientAddress = fromTrusted && !source.isEmpty ? source : proxy.peerName(peer)
        return Original(
            method: http.method.isEmpty ? "GET" : http.method, target: http.path.isEmpty ? "/" : http.path, host: http.host.isEmpty ? nil : http.host,
            scheme: http.scheme.isEmpty ? nil : http.scheme, fields: fields, fromTrusted: fromTrusted, clientAddress: clientAddress
        )
    }

    /// `refusal` (rendered as `/auth/forward` renders it) as a `DeniedHttpResponse`: its status, its fields (the
    /// `Location`, the `WWW-Authenticate`, its type) and its body.
    static func denied(_ refusal: RenderedPage) -> Envoy_Service_Auth_V3_CheckResponse {
        var denied = Envoy_Service_Auth_V3_DeniedHttpResponse()
        let code = Int(refusal.status.code)
        denied.status.code = Envoy_Type_V3_StatusCode(rawValue: code) ?? .forbidden
        denied.headers = refusal.headers.map { option($0.name.canonicalName, $0.value) }
        denied.body = String(decoding: refusal.body.readableBytesView, as: UTF8.self)
        var answer = Envoy_Service_Auth_V3_CheckResponse()
        answer.status.code = (code == 401 ? GRPCStatus.unauthenticated : GRPCStatus.permissionDenied).rawValue
        answer.deniedResponse = denied
        return answer
    }

    /// A field for Envoy to set, replacing any of the same name.
    static func option(_ name: String, _ value: String) -> Envoy_Config_Core_V3_HeaderValueOption {
        var option = Envoy_Config_Core_V3_HeaderValueOption()
        option.header.key = name
        option.header.value = value
        option.appendAction = .overwriteIfExistsOrAdd
        return option
    }

    /// Why a call's body is no message siwa reads.
    struct FramingProblem: Error {
        let status: GRPCStatus
        let message: String
    }

    /// The one message of a unary call's body: a flag byte (0: not compressed), a 4-byte big-endian length, the message.
    static func unframe(_ body: ByteBuffer) -> Result<[UInt8], FramingProblem> {
        var body = body
        guard let flag = body.readInteger(as: UInt8.self), let length = body.readInteger(endianness: .big, as: UInt32.self) else {
            return .failure(FramingProblem(status: .invalidArgument, message: "the call carries no message"))
        }
        guard flag == 0 else { return .failure(FramingProblem(status: .unimplemented, message: "compressed messages are not accepted (grpc-encoding identity)")) }
        guard Int(length) <= grpcMaxMessage else { return .failure(FramingProblem(status: .resourceExhausted, message: "the message is too large")) }
        guard let bytes = body.readBytes(length: Int(length)), body.readableBytes == 0 else {
            return .failure(FramingProblem(status: .invalidArgument, message: "the call's body is not one whole message"))
        }
        return .success(bytes)
    }

    /// A gRPC answer: `message` framed as the body (none for an error), and `grpc-status` in the trailers.
    static func grpcAnswer(_ message: (any SwiftProtobuf.Message)?, status: GRPCStatus, message text: String?) -> Response {
        var frame = ByteBuffer()
        if let message, let bytes: [UInt8] = try? message.serializedBytes() {
            frame.writeInteger(UInt8(0))
            frame.writeInteger(UInt32(bytes.count), endianness: .big)
            frame.writeBytes(bytes)
        }
        var trailers = HTTPFields()
        if let name = HTTPField.Name.grpcStatus { trailers[name] = String(status.rawValue) }
        if let text, let name = HTTPField.Name.grpcMessage { trailers[name] = text.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(.init(charactersIn: " .,()-_"))) ?? "" }
        let body = frame
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

extension HTTPField.Name {
    /// gRPC's status and its message, in the trailers.
    static let grpcStatus = HTTPField.Name("grpc-status")
    static let grpcMessage = HTTPField.Name("grpc-message")
}
