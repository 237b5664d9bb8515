import DoorHTTP

/// The one filter of the upstream's answer, for every carrier (the byte path, async-http-client, the WebSocket
/// handshake): what of the status and header fields reaches the client, as Go's `ReverseProxy` has one
/// `ModifyResponse`. A carrier reads the fields one by one (`keeps`), writes those kept as it writes bytes or header
/// types, then the fields the filter adds (`finish`), then its own framing.
///
/// - A status below 200 is never passed as the answer: 1xx answers other than 101 are skipped, those siwa knows (100,
///   102, 103) and those it does not (104, 199: RFC 9110 15.2 has a recipient parse and may ignore them); a 101 is the
///   answer only to a request that asked to switch (a WebSocket), a broken upstream otherwise.
/// - Hop-by-hop fields (RFC 9110 7.6.1) and every field the upstream's `Connection` names stay on the upstream's hop.
/// - `Date` and `Server` are siwa's (as nginx answers).
/// - An answer with two `Content-Length` fields is refused before it gets here (a broken upstream, siwa's 502), by the
///   byte path's parser and NIO's alike.
/// - A `Set-Cookie` of one of siwa's cookie names is dropped: behind siwa the upstream shares siwa's host, and must not
///   set or clear siwa's session.
/// - Transfer codings other than the final `chunked` (`Transfer-Encoding: gzip, chunked`) are said as the last content
///   codings (`Content-Encoding: gzip`) while the bytes stay as they came: the client's hop is framed by siwa, browsers
///   undo no transfer coding but `chunked`, and HTTP/2 has none at all, so this is the one label every client reads.
/// - Trailers of an HTTP/1.1 upstream are not passed (the body is re-framed by siwa); those of an HTTP/2 upstream (a gRPC
///   service's `grpc-status`) pass through this filter too (`UpstreamForwarder.trailerFields`): a cookie of siwa's, or
///   a hop-by-hop field, stays behind.
struct AnswerFilter {
    /// What becomes of an answer with a given status.
    enum StatusRule: Equatable {
        /// The answer: passed on.
        case final
        /// An interim answer (1xx but 101): skipped; the answer follows.
        case interim
        /// The upstream switched protocols as the request asked.
        case switched
        /// Nothing a client may be given: siwa's 502 instead.
        case broken(String)
    }

    /// The rule for `status` in answer to a request of `method` that asked (`askedToSwitch`) or not to switch.
    static func rule(status: Int, method: String, askedToSwitch: Bool) -> StatusRule {
        switch status {
        case 200...: return .final
        case 101: return askedToSwitch ? .switched : .broken("the upstream answered 101 to a \(method) that asked for no protocol switch")
        case 100..<200: return .interim
        default: return .broken("the upstream answered \(status), which is no HTTP status")
        }
    }

    /// The lowercased names the upstream's `Connection` lists.
    private let named: Set<String>
    /// The answer is a protocol switch: its `Content-Length` says nothing of a body either.
    private let switching: Bool
    /// The transfer codings read, other than a final `chunked`.
    private var codings: [Substring] = []

    /// A filter for one answer whose `Connection` values are `connection`.
    init(connection: [String], switching: Bool = false) {
        named = Self.connectionNamed(connection)
        self.switching = switching
    }

    /// Whether the field of this lowercased name (its `value` read only when it matters) reaches the client.
    mutating func keeps(_ lowercased: String, value: () -> String) -> Bool {
        // Each name compared only with those of its length (a `String` that differs costs a call to compare).
        switch lowercased.utf8.count {
        case 14 where lowercased == "content-length":
            return !switching
        case 17 where lowercased == "transfer-encoding":
            codings.append(contentsOf: RawHTTP.transferCodings([value()]).codings)
            return false
        case 4 where lowercased == "date", 6 where lowercased == "server":
            return false
        case 10 where lowercased == "set-cookie":
            return !CookiePolicy.allNames.contains(String(Substring(value()).prefix { $0 != "=" }.trimmingBlanks))
        default:
            return !Self.hopByHop.contains(lowercased) && !named.contains(lowercased)
        }
    }

    /// Writes the fields the filter adds after those kept: the transfer codings as content codings.
    func finish<Sink: HeaderSink>(to sink: inout Sink) {
        // `chunked` is the framing's, wherever it stood; any other coding is in the bytes that pass.
        let kept = codings.filter { !RawHTTP.equalsIgnoringCase($0, "chunked") && !RawHTTP.equalsIgnoringCase($0, "identity") }
        if !kept.isEmpty { sink.add(name: "Content-Encoding", value: kept.joined(separator: ", ")) }
    }

    /// RFC 9110 7.6.1: the fields of one connection, never forwarded (either way).
    static let hopByHop: HeaderNames = ["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"]

    /// `close` or `keep-alive`, in any case: a `Connection` option that names no field.
    private static func namesNoField(_ option: UnsafeBufferPointer<UInt8>) -> Bool {
        let close: StaticString = "close", keepAlive: StaticString = "keep-alive"
        return close.withUTF8Buffer { RawHTTP.sameToken(option, $0) } || keepAlive.withUTF8Buffer { RawHTTP.sameToken(option, $0) }
    }

    /// The lowercased field names that `Connection` values list (`close` and `keep-alive`, the options nearly every
    /// `Connection` carries, name no field and are skipped without building a set).
    static func connectionNamed(_ values: [String]) -> Set<String> {
        var names = Set<String>()
        for value in values {
            // Over the bytes (through `Substring`s, the `keep-alive` of every proxied answer cost 700 instructions).
            var value = value
            value.withUTF8 { bytes in
                RawHTTP.forEachMember(of: bytes, separatedBy: UInt8(ascii: ",")) { member in
                    let option = UnsafeBufferPointer(rebasing: bytes[member])
                    guard !option.isEmpty, !Self.namesNoField(option) else { return }
                    names.insert(String(decoding: option, as: UTF8.self).lowercased())
                }
            }
        }
        return names
    }
}

/// Where the door writes a head's fields: NIO's header list, HTTP types' fields, or bytes on the wire.
protocol HeaderSink {
    mutating func add(name: String, value: String)
    /// Adds one of the client's fields as it came (bytes on the wire take the line's bytes as they are).
    mutating func pass<Field: ClientField>(_ field: Field)
    /// Adds lines already written as HTTP/1.1 bytes (`UpstreamForwarder.SiwaLines.rendered`), when this sink writes
    /// bytes; false when it does not (the lines are then added one by one).
    mutating func addRendered(_ lines: [UInt8]) -> Bool
}

extension HeaderSink {
    mutating func pass<Field: ClientField>(_ field: Field) {
        add(name: field.name, value: field.value)
    }

    mutating func addRendered(_ lines: [UInt8]) -> Bool { false }
}
