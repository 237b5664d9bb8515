import DoorHTTP
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// What the request looked like before a trusted reverse proxy: the client's address (the right-most
/// `X-Forwarded-For` entry that is not itself a trusted proxy), the host (`X-Forwarded-Host`) and the scheme
/// (`X-Forwarded-Proto`). From any other peer these headers are ignored.
///
/// Each answer is read from the request's header fields and the peer's address, so the front's event-loop fast path
/// (`RawFrontPath`), which has no Hummingbird `Request`, reads them the same way as the handlers.
struct ClientAddressResolver: Sendable {
    let trustedProxies: TrustedProxies
    /// The scheme of siwa's own listener: `https` when it terminates TLS itself (`ServerSettings.edge`), so what a
    /// trusted proxy does not say is the connection's own.
    var ownScheme = "http"

    /// Whether `peer` is a trusted proxy.
    func trusted(_ peer: String?) -> Bool {
        trustedProxies.contains(peer)
    }

    /// How a peer is named where an address is written (`X-Forwarded-For`, the rate limit's key): its address;
    /// `unix` without one when siwa listens on a Unix socket (every peer is then on it), else `unknown`.
    func peerName(_ peer: String?) -> String {
        peer ?? (trustedProxies.socketPeers ? "unix" : "unknown")
    }

    /// The host the browser used.
    func host(_ request: Request, context: ServerContext) -> String? {
        host(request.headers, authority: request.head.authority, peer: context.remoteAddress?.ipAddress)
    }

    func host(_ fields: HTTPFields, authority: String?, peer: String?) -> String? {
        host(fields, authority: authority, fromTrusted: trusted(peer))
    }

    func host(_ fields: HTTPFields, authority: String?, fromTrusted: Bool) -> String? {
        forwarded(.xForwardedHost, fields, fromTrusted: fromTrusted) ?? authority
    }

    /// The scheme the browser used.
    func scheme(_ request: Request, context: ServerContext) -> String {
        scheme(request.headers, peer: context.remoteAddress?.ipAddress)
    }

    func scheme(_ fields: HTTPFields, peer: String?) -> String {
        scheme(fields, fromTrusted: trusted(peer))
    }

    func scheme(_ fields: HTTPFields, fromTrusted: Bool) -> String {
        forwarded(.xForwardedProto, fields, fromTrusted: fromTrusted)?.lowercased() ?? ownScheme
    }

    /// The client's address: the right-most `X-Forwarded-For` entry that is not a trusted proxy, from a trusted proxy;
    /// else the peer's.
    func clientAddress(_ request: Request, context: ServerContext) -> String {
        clientAddress(request.headers, peer: context.remoteAddress?.ipAddress)
    }

    func clientAddress(_ fields: HTTPFields, peer address: String?) -> String {
        // A peer on siwa's Unix socket has no address.
        let peer = peerName(address)
        guard trusted(address), let name = HTTPField.Name.xForwardedFor, let header = fields[name] else { return peer }
        let hops = header.split(separator: ",").map { String($0.trimmingBlanks) }.filter { !$0.isEmpty }
        return hops.last(where: { !trustedProxies.contains($0) }) ?? peer
    }

    /// The `X-Forwarded-For` to hand on: the chain a trusted proxy sent with the peer's address appended, or, from
    /// anyone else, the peer's address alone (what a client claims there is dropped).
    func forwardedFor(_ request: Request, context: ServerContext) -> String {
        forwardedFor(request.headers, peer: context.remoteAddress?.ipAddress)
    }

    func forwardedFor(_ fields: HTTPFields, peer: String?) -> String {
        forwardedFor(fields, peer: peer, fromTrusted: trusted(peer))
    }

    /// The same, for a peer already known to be a trusted proxy or not (the byte path decides that once per
    /// connection).
    func forwardedFor(_ fields: HTTPFields, peer: String?, fromTrusted: Bool) -> String {
        let address = peerName(peer)
        guard fromTrusted, let name = HTTPField.Name.xForwardedFor else { return address }
        var chain = ""
        for field in fields where field.name == name {
            for hop in field.value.split(separator: ",") {
                let trimmed = hop.trimmingBlanks
                if !trimmed.isEmpty { chain += trimmed + ", " }
            }
        }
        return chain + address
    }

    /// The first value of the forwarded header `name`, only from a trusted proxy.
    func forwarded(_ name: HTTPField.Name?, _ request: Request, context: ServerContext) -> String? {
        forwarded(name, request.headers, peer: context.remoteAddress?.ipAddress)
    }

    /// The first item of the first `name` field, trimmed of blanks, read by byte: this runs several times on
    /// every request the front passes (Foundation's `trimmingCharacters` was 7 % of a check's time).
    func forwarded(_ name: HTTPField.Name?, _ fields: HTTPFields, peer: String?) -> String? {
        forwarded(name, fields, fromTrusted: trusted(peer))
    }

    /// The same, for a peer already known to be a trusted proxy or not (`fromTrusted`).
    func forwarded(_ name: HTTPField.Name?, _ fields: HTTPFields, fromTrusted: Bool) -> String? {
        guard let name, fromTrusted, let field = fields.first(where: { $0.name == name }) else { return nil }
        let value = field.value
        let end = value.utf8.firstIndex(of: UInt8(ascii: ",")) ?? value.endIndex
        let trimmed = value[value.startIndex..<end].trimmingBlanks
        return trimmed.isEmpty ? nil : String(trimmed)
    }

    /// The origin (`scheme://host`) a trusted proxy says the request was made to, from `X-Forwarded-Proto` and
    /// `-Host`; nil without a trusted forwarded host. The audience of the forward-auth answer's assertion.
    func forwardedOrigin(_ fields: HTTPFields, peer: String?) -> String? {
        forwardedOrigin(fields, fromTrusted: trusted(peer))
    }

    /// The same, for a peer already known to be a trusted proxy or not (the byte path decides that once per
    /// connection).
    func forwardedOrigin(_ fields: HTTPFields, fromTrusted: Bool) -> String? {
        guard let host = forwarded(.xForwardedHost, fields, fromTrusted: fromTrusted) else { return nil }
        let scheme = forwarded(.xForwardedProto, fields, fromTrusted: fromTrusted)?.lowercased() == "https" ? "https" : "http"
        return scheme + "://" + host
    }

    /// The URL the browser asked a forward-auth proxy for (Traefik, Caddy), from a trusted proxy's
    /// `X-Forwarded-Proto`, `-Host` and `-Uri` (an origin-form path); nil without them. Where a sign-in comes back to.
    func forwardedURL(_ fields: HTTPFields, fromTrusted: Bool) -> String? {
        guard let origin = forwardedOrigin(fields, fromTrusted: fromTrusted), let uri = forwarded(.xForwardedUri, fields, fromTrusted: fromTrusted),
            uri.hasPrefix("/")
        else { return nil }
        return origin + uri
    }

    /// The method of the request a forward-auth proxy checks: its trusted `X-Forwarded-Method`, else `own` (the
    /// check's).
    func forwardedMethod(_ fields: HTTPFields, fromTrusted: Bool, own: String) -> String {
        forwarded(.xForwardedMethod, fields, fromTrusted: fromTrusted)?.uppercased() ?? own
    }
}

extension ServerSettings {
    /// How the front reads a request's client, host and scheme (`trusted_proxies`; `https` on siwa's own TLS).
    var addressResolver: ClientAddressResolver {
        ClientAddressResolver(trustedProxies: proxies, ownScheme: edge == nil ? "http" : "https")
    }
}
