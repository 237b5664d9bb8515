import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// What the request looked like before a trusted reverse proxy: the client's address (the right-most
/// `X-Forwarded-For` entry that is not itself a trusted proxy), the host (`X-Forwarded-Host`) and the scheme
/// (`X-Forwarded-Proto`). From any other peer these headers are ignored.
struct ClientAddressResolver: Sendable {
    let trustedProxies: Set<String>

    private func trusted(_ context: ServerContext) -> Bool {
        trustedProxies.contains(context.remoteAddress?.ipAddress ?? "")
    }

    /// The host the browser used.
    func host(_ request: Request, context: ServerContext) -> String? {
        if trusted(context), let name = HTTPField.Name.xForwardedHost, let forwarded = request.headers[name]?.split(separator: ",").first {
            return forwarded.trimmingCharacters(in: .whitespaces)
        }
        return request.head.authority
    }

    /// The scheme the browser used.
    func scheme(_ request: Request, context: ServerContext) -> String {
        if trusted(context), let name = HTTPField.Name.xForwardedProto, let forwarded = request.headers[name]?.split(separator: ",").first {
            return forwarded.trimmingCharacters(in: .whitespaces).lowercased()
        }
        return "http"
    }

    func clientAddress(_ request: Request, context: ServerContext) -> String {
        let peer = context.remoteAddress?.ipAddress ?? "unknown"
        guard trustedProxies.contains(peer), let name = HTTPField.Name.xForwardedFor, let header = request.headers[name] else { return peer }
        let hops = header.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        return hops.last(where: { !trustedProxies.contains($0) }) ?? peer
    }

    /// The `X-Forwarded-For` to hand on: the chain a trusted proxy sent with the peer's address appended, or, from
    /// anyone else, the peer's address alone (what a client claims there is dropped).
    func forwardedFor(_ request: Request, context: ServerContext) -> String {
        let peer = context.remoteAddress?.ipAddress ?? "unknown"
        guard trusted(context), let name = HTTPField.Name.xForwardedFor else { return peer }
        let chain = request.headers[values: name].flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        return (chain + [peer]).joined(separator: ", ")
    }

    /// The first value of the forwarded header `name`, only from a trusted proxy.
    func forwarded(_ name: HTTPField.Name?, _ request: Request, context: ServerContext) -> String? {
        guard trusted(context), let name, let value = request.headers[name]?.split(separator: ",").first else { return nil }
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        return trimmed.isEmpty ? nil : trimmed
    }
}
