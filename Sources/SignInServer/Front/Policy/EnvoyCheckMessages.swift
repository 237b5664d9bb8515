import EnvoyAuthorization
import HTTPTypes
import NIOCore
import SwiftProtobuf

/// Envoy's gRPC `Check` call as messages, read and made alike by its handler (`ExtAuthzController.grpc`) and by the
/// HTTP/2 byte path (`GRPCCheckFromMemory`): the call's path, its framing (five bytes before the one message of a unary
/// call), the original request's fields as a `CheckRequest` carries them, and the `CheckResponse` of either verdict.
enum EnvoyCheckMessages {
    /// The call's path.
    static let path = "/envoy.service.auth.v3.Authorization/Check"
    /// The largest `CheckRequest` siwa reads (Envoy's `with_request_body` may add up to its `max_request_bytes`).
    static let maxMessage = 1 << 20

    /// gRPC status codes siwa answers with (grpc/doc/statuscodes.md).
    enum GRPCStatus: Int32 {
        case ok = 0
        case invalidArgument = 3
        case permissionDenied = 7
        case resourceExhausted = 8
        case unimplemented = 12
        case unauthenticated = 16
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
        guard Int(length) <= maxMessage else { return .failure(FramingProblem(status: .resourceExhausted, message: "the message is too large")) }
        guard let bytes = body.readBytes(length: Int(length)), body.readableBytes == 0 else {
            return .failure(FramingProblem(status: .invalidArgument, message: "the call's body is not one whole message"))
        }
        return .success(bytes)
    }

    /// `message` framed as a unary call's answer body; empty when it cannot be serialized.
    static func frame(_ message: any SwiftProtobuf.Message) -> ByteBuffer {
        var frame = ByteBuffer()
        guard let bytes: [UInt8] = try? message.serializedBytes() else { return frame }
        frame.reserveCapacity(bytes.count + 5)
        frame.writeInteger(UInt8(0))
        frame.writeInteger(UInt32(bytes.count), endianness: .big)
        frame.writeBytes(bytes)
        return frame
    }

    /// The fields of the original request a `CheckRequest` carries, less pseudo-fields: with `encode_raw_headers`,
    /// each field as sent (its value in `raw_value`), else Envoy's map (repeated fields joined), in name order.
    static func fields(of http: Envoy_Service_Auth_V3_AttributeContext.HttpRequest) -> HTTPFields {
        var fields = HTTPFields()
        if !http.headerMap.headers.isEmpty {
            for header in http.headerMap.headers {
                let value = header.rawValue.isEmpty ? header.value : String(decoding: header.rawValue, as: UTF8.self)
                if let name = HTTPField.Name(header.key), !header.key.hasPrefix(":") { fields.append(HTTPField(name: name, value: value)) }
            }
        } else {
            for (key, value) in http.headers.sorted(by: { $0.key < $1.key }) where !key.hasPrefix(":") {
                if let name = HTTPField.Name(key) { fields.append(HTTPField(name: name, value: value)) }
            }
        }
        return fields
    }

    /// The answer that lets the request through: `set` on the upstream's request (each replacing any of its name),
    /// `remove` from it.
    static func allowed(set: [HTTPField], remove: [String]) -> Envoy_Service_Auth_V3_CheckResponse {
        var ok = Envoy_Service_Auth_V3_OkHttpResponse()
        ok.headers = set.map { option($0.name.canonicalName, $0.value) }
        ok.headersToRemove = remove
        var answer = Envoy_Service_Auth_V3_CheckResponse()
        answer.status.code = GRPCStatus.ok.rawValue
        answer.okResponse = ok
        return answer
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
}

extension HTTPField.Name {
    /// gRPC's status and its message, in the trailers.
    static let grpcStatus = HTTPField.Name("grpc-status")
    static let grpcMessage = HTTPField.Name("grpc-message")
}
