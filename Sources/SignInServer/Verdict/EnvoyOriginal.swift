import DoorHTTP
import HTTPTypes

/// What Envoy's `ext_authz` says of the original request, read alike by its handlers (HTTP and gRPC modes,
/// `ExtAuthzController`) and by the byte path (`ConnectionMemory.extAuthzAnswer`): the original target of an HTTP
/// mode check, the origin it was made to, and the request as the rules see it. What Envoy says is believed from a
/// trusted proxy only (`trusted_proxies`), as `/auth/check` believes nginx.
enum EnvoyOriginal {
    /// The prefix Envoy's `http_service.path_prefix` names.
    static let prefix = "/auth/ext-authz"

    /// The original target (path and query) of an HTTP mode check whose own target is `checkTarget`: what follows
    /// `prefix`, with a leading `/`; nil when `checkTarget` is not `prefix` or below it.
    static func target(checkTarget: String) -> String? {
        guard checkTarget.hasPrefix(prefix) else { return nil }
        let rest = checkTarget.dropFirst(prefix.count)
        guard rest.isEmpty || rest.first == "/" || rest.first == "?" else { return nil }
        return rest.first == "/" ? String(rest) : "/" + rest
    }

    /// The origin (`scheme://host`) Envoy says the request was made to, believed from a trusted proxy only: the
    /// assertion's audience, and the start of the URL to come back to.
    static func origin(host: String?, scheme: String?, fromTrusted: Bool) -> String? {
        guard fromTrusted, let host else { return nil }
        return (scheme?.lowercased() == "https" ? "https" : "http") + "://" + host
    }

    /// The request as the rules see it, and the URL to come back to, for a request of `method` (upper-cased) for
    /// `target` made to `origin`'s `host`. Without an origin (an asker that is not a trusted proxy), or with a target
    /// that does not read, the rules see no host, method or path, so no rule that names them applies, and there is no
    /// URL.
    static func asked(method: String, target: String, host: String?, origin: String?, isPreflight: Bool) -> (AccessRequest, url: String?) {
        guard let origin, let host, let read = try? RequestTarget(target, host: host) else {
            return (AccessRequest(host: nil, method: nil, path: nil), nil)
        }
        return (AccessRequest(host: host, method: method, path: read.path, isPreflight: isPreflight), origin + read.forwarded)
    }
}

extension HTTPField.Name {
    /// The field of an `ext_authz` HTTP service's 200 naming the fields Envoy removes from the upstream's request.
    static let envoyAuthHeadersToRemove = HTTPField.Name("x-envoy-auth-headers-to-remove")
}
