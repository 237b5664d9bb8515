import DoorHTTP
import NIOHPACK

/// A request's HTTP/2 head read in one pass, and held to RFC 9113 §8.2 and §8.3 (RFC 8441 §4 for `:protocol`): the
/// one check of a stream's fields. NIO's HTTP/2 handler can check them too; siwa turns that off (`ClientHTTP2`) because
/// `HTTP2StreamBridge` reads every field anyway to write the HTTP/1.1 head, and NIO's reading cost more than a tenth
/// of an HTTP/2 request's time. `HTTP2RequestHeadTests` holds this reading to NIO's own verdicts on generated heads.
///
/// What the bridge asks beyond this (a method that is a token, a target an HTTP/1.1 request line carries, one `Host`
/// that names the `:authority`, one `Content-Length` of digits alone) it checks itself.
struct HTTP2RequestHead {
    var method = ""
    var path: String?
    var authority: String?
    /// `:protocol` (RFC 8441), only when extended CONNECT was announced.
    var connectProtocol: String?
    /// The first `Host` field, and how many came.
    var host: String?
    var hosts = 0
    var cookies = 0
    /// How many `Content-Length` fields came, and whether each was digits alone.
    var lengths = 0
    var lengthsAreDigits = true
    var hasLength: Bool { lengths > 0 }
    /// About the size of the HTTP/1.1 head the fields make.
    var size = 128

    private struct Pseudo: OptionSet {
        let rawValue: UInt8
        static let method = Pseudo(rawValue: 1)
        static let scheme = Pseudo(rawValue: 2)
        static let path = Pseudo(rawValue: 4)
        static let authority = Pseudo(rawValue: 8)
        static let `protocol` = Pseudo(rawValue: 16)
    }

    /// Nil when the head is malformed: a pseudo-header after a regular field, twice, unknown (`:status` included), or
    /// with a blank, a control byte or DEL in its value; `:protocol` not announced (`extendedConnect`) or not on a
    /// CONNECT; an empty `:path`; the pseudo-headers a request must have missing (`:method`, `:scheme` and `:path`,
    /// or a CONNECT's `:method` and `:authority` alone); a name that is not a lowercase token; a value with NUL, CR
    /// or LF; a connection-specific field; `TE` other than `trailers`.
    init?(_ headers: HPACKHeaders, extendedConnect: Bool) {
        var seen: Pseudo = []
        var regular = false
        for (name, value, _) in headers {
            size &+= name.utf8.count &+ value.utf8.count &+ 4
            if name.utf8.first == UInt8(ascii: ":") {
                guard !regular, Self.isPseudoValue(value) else { return nil }
                let field: Pseudo
                switch name {
                case ":method":
                    field = .method
                    method = value
                case ":scheme":
                    field = .scheme
                case ":path":
                    guard !value.isEmpty else { return nil }
                    field = .path
                    path = value
                case ":authority":
                    field = .authority
                    authority = value
                case ":protocol" where extendedConnect:
                    field = .protocol
                    connectProtocol = value
                default:
                    return nil
                }
                guard !seen.contains(field) else { return nil }
                seen.insert(field)
                continue
            }
            regular = true
            guard Self.isRegular(name, value) else { return nil }
            switch name {
            case "cookie": cookies += 1
            case "content-length":
                lengths += 1
                lengthsAreDigits = lengthsAreDigits && !value.isEmpty && value.utf8.allSatisfy { (0x30...0x39).contains($0) }
            case "host":
                hosts += 1
                if host == nil { host = value }
            case "te":
                guard value == "trailers" else { return nil }
            default: break
            }
        }
        if method == "CONNECT", !seen.contains(.protocol) {
            // RFC 9113 §8.5: a CONNECT names an authority and nothing else.
            guard seen == [.method, .authority] else { return nil }
        } else {
            guard seen.isSuperset(of: [.method, .scheme, .path]) else { return nil }
            // RFC 8441 §4: `:protocol` goes with CONNECT only.
            if seen.contains(.protocol), method != "CONNECT" { return nil }
        }
    }

    /// Whether `headers` are trailers as RFC 9113 §8.1 allows them: no pseudo-header, and each field as in a head.
    static func isTrailers(_ headers: HPACKHeaders) -> Bool {
        headers.allSatisfy { name, value, _ in name.utf8.first != UInt8(ascii: ":") && isRegular(name, value) }
    }

    /// A regular field: its name a token without uppercase (RFC 9113 §8.2.1), its value without NUL, CR or LF, and not
    /// one of the connection-specific fields (§8.2.2).
    private static func isRegular(_ name: String, _ value: String) -> Bool {
        guard isName(name), isValue(value) else { return false }
        switch name {
        case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade": return false
        default: return true
        }
    }

    /// A token (RFC 9110 §5.6.2) without uppercase letters, read in one pass.
    static func isName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.allSatisfy { !(0x41...0x5A).contains($0) && RawHTTP.isTokenByte($0) }
    }

    /// RFC 9113 §8.2.1: a field value holds no NUL, CR or LF.
    static func isValue(_ value: String) -> Bool {
        !value.utf8.contains { $0 == 0 || $0 == 0x0A || $0 == 0x0D }
    }

    /// A pseudo-header's value: no blank, control byte or DEL (none of their grammars has one, and `:path` becomes
    /// the HTTP/1.1 request line).
    static func isPseudoValue(_ value: String) -> Bool {
        !value.utf8.contains { $0 <= 0x20 || $0 == 0x7F }
    }
}
