import Foundation
import JOSE


/// The HTTP/1.1 the byte-level proxy path (`RawFrontPath`) reads itself: a strict subset, so that whatever it
/// accepts means one thing to siwa, to NIO's parser and to the upstream. A request head is read only when its
/// method is upper-case letters, its target origin-form, its version HTTP/1.1 or 1.0, with exactly one `Host`, at most one
/// `Cookie`, at most one `Content-Length` (digits) and no `Transfer-Encoding`, `Expect` or `Upgrade`, every line
/// ending in CRLF, names of token characters and values of visible ASCII; so where it ends, body included, is
/// known. Of those, a `GET` without a body may go to the upstream from here; the others are handed to NIO's parser
/// one at a time, and anything outside the subset with the rest of the connection. A response head is read with
/// its framing (`Content-Length`, chunked, or to the end of the connection); one that is not well-formed is a
/// broken upstream (502), never guessed at.
package enum RawHTTP {
    /// The longest request head taken here; a longer one goes to NIO's parser, with its own limits.
    package static let requestHeadLimit = 16 * 1024
    /// The longest response head read (a longer one is a broken upstream).
    package static let responseHeadLimit = 64 * 1024
    /// The longest body the byte path passes on (whole, with its head); a longer one goes to the handlers, which stream it.
    package static let smallBodyLimit = 64 * 1024
    /// The most header lines of a request head taken here (a response's are limited by its length only).
    package static let headerCountLimit = 100
    /// The methods taken (NIO's parser knows them all; `CONNECT` and unknown ones are left to it whole).
    package static let methods: Set<String> = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

    /// One header line of a head: its name lowercased, where the line is (from the head's first byte, CRLF
    /// excluded) and where its value is (blanks around it excluded).
    package struct Line: Equatable {
        package let name: String
        package let line: Range<Int>
        package let value: Range<Int>
    }

    /// A header field read whole: its name lowercased, its value. A struct, not a tuple: an array or optional of
    /// tuples is copied and destroyed through the run time's generic witnesses, on every request that carries them.
    package struct Field: Equatable {
        package let name: String
        package let value: String
    }

    /// A request head taken whole.
    package struct RequestHead {
        package let method: String
        /// Bytes of the head, CRLF CRLF included.
        package let length: Int
        /// The body's length (`Content-Length`); nil without one.
        package let contentLength: Int?
        /// As sent: `/path?query`.
        package let target: String
        package let lines: [Line]
        package let host: String
        package let cookie: String?
        /// The value of its one `Authorization` field (a bearer token the byte path reads from memory, or another
        /// scheme it passes on); nil without one.
        package let authorization: String?
        /// It carries two `Authorization` fields, or its query names `access_token`: a token presented where the door
        /// refuses it, which the handlers answer (`BearerCredential`), never the byte path.
        package let mayHoldToken: Bool
        /// `Connection` values (`close`, and the names of the headers that stay on this hop).
        package let connection: [String]
        /// The `X-Forwarded-*`, `X-Original-URI` and `X-Original-Method` fields, as the handlers read them from a trusted
        /// proxy (otherwise ignored).
        package let forwarded: [Field]
        /// HTTP/1.0 (else HTTP/1.1): only a check is answered here then; anything else goes to the codecs.
        package let isHTTP10: Bool

        /// Whether the connection ends after the answer: HTTP/1.1 unless `Connection` lists `close`, HTTP/1.0 unless it
        /// lists `keep-alive` (RFC 9112 §9.3).
        package var closesAfter: Bool { isHTTP10 ? !listsToken(connection, "keep-alive") : listsToken(connection, "close") }

        /// A `GET` without a body: what may pass to the upstream from here.
        package var isBodilessGET: Bool { method == "GET" && contentLength == nil }

        /// No body follows the head: no `Content-Length`, or 0 (a request with a transfer coding is not taken at all),
        /// as Envoy's `ext_authz` sends its checks whatever the original method.
        package var hasNoBody: Bool { (contentLength ?? 0) == 0 }

        /// Whether the byte path may pass it to the upstream when `available` bytes of it (head included) have come:
        /// a request of any method but `HEAD` (whose answer has no body, whatever its framing says) without a body,
        /// or with a body of known length, at most `smallBodyLimit`, that has come whole with its head.
        package func isTakeable(available: Int) -> Bool {
            // The upstream's answer may be re-chunked for the client, which HTTP/1.0 does not read.
            guard method != "HEAD", !isHTTP10 else { return false }
            guard let contentLength else { return true }
            return contentLength <= smallBodyLimit && available >= length + contentLength
        }

        /// Whether a request of this method may be sent again when a reused connection failed before any answer:
        /// an idempotent one (RFC 9110 §9.2.2), as a proxy may.
        package var isIdempotent: Bool { method == "GET" || method == "PUT" || method == "DELETE" || method == "OPTIONS" }
    }

    package enum RequestParse {
        /// More bytes are needed to decide.
        case incomplete
        /// Not for this path: NIO's parser and the handlers take it.
        case notTaken
        case head(RequestHead)
    }

    /// What ends a request line of the subset.
    private static let requestVersion: [UInt8] = Array(" HTTP/1.1\r\n".utf8)

    /// Reads a request head at the start of `bytes`.
    package static func request(_ bytes: UnsafeRawBufferPointer) -> RequestParse {
        // The method: upper-case letters, then SP and the target's slash (known at the first bytes).
        var index = 0
        while index < bytes.count, (0x41...0x5A).contains(bytes[index]) { index += 1 }
        guard index <= 20 else { return .notTaken }
        if index == bytes.count { return .incomplete }
        guard index > 0, bytes[index] == UInt8(ascii: " ") else { return .notTaken }
        let methodEnd = index
        if index + 1 < bytes.count, bytes[index + 1] != UInt8(ascii: "/") { return .notTaken }
        let end: Int
        switch headEnd(bytes, limit: requestHeadLimit) {
        case .at(let found): end = found
        case .malformed: return .notTaken
        case .notYet: return bytes.count > requestHeadLimit ? .notTaken : .incomplete
        }
        // Request line: method SP target SP HTTP/1.1 CRLF.
        let method = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[0..<methodEnd]), as: UTF8.self)
        guard methods.contains(method) else { return .notTaken }
        let targetStart = methodEnd + 1
        index = targetStart
        while index < end, bytes[index] != UInt8(ascii: " ") {
            guard (0x21...0x7E).contains(bytes[index]) else { return .notTaken }
            index += 1
        }
        guard index > targetStart, bytes[targetStart] == UInt8(ascii: "/") else { return .notTaken }
        let target = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[targetStart..<index]), as: UTF8.self)
        // HTTP/1.1, or HTTP/1.0 (nginx's auth_request asks in it unless told otherwise): the minor digit is at 8.
        let version = requestVersion
        let versionStart = index
        guard versionStart + version.count <= end,
            version.indices.allSatisfy({ bytes[versionStart + $0] == version[$0] || ($0 == 8 && bytes[versionStart + $0] == UInt8(ascii: "0")) })
        else { return .notTaken }
        let isHTTP10 = bytes[index + 8] == UInt8(ascii: "0")
        index += version.count
        guard let lines = headerLines(bytes, from: index, end: end, allowsObsText: false, limit: headerCountLimit) else { return .notTaken }
        var host: String?
        var cookie: String?
        var authorization: String?
        var authorizations = 0
        var contentLength: Int?
        var connection: [String] = []
        var forwarded: [Field] = []
        for line in lines {
            let value = { String(decoding: UnsafeRawBufferPointer(rebasing: bytes[line.value]), as: UTF8.self) }
            // Each name compared only with those of its length: a `String` that differs from another costs a call
            // to the standard library's comparison, eight of them a line in a plain `switch` over the names.
            let name = line.name
            switch name.utf8.count {
            case 17 where name == "transfer-encoding", 7 where name == "upgrade", 6 where name == "expect":
                return .notTaken
            case 14 where name == "content-length":
                let digits = bytes[line.value]
                // No tab anywhere in the line: NIO's parser refuses a tab after the digits (found by the request
                // fuzz target), so a length the two would read apart is left to it.
                guard contentLength == nil, (1...18).contains(digits.count), digits.allSatisfy({ (0x30...0x39).contains($0) }),
                    !bytes[line.line].contains(0x09)
                else { return .notTaken }
                contentLength = digits.reduce(0) { $0 * 10 + Int($1 - 0x30) }
            case 4 where name == "host":
                guard host == nil else { return .notTaken }
                host = value()
            case 6 where name == "cookie":
                guard cookie == nil else { return .notTaken }
                cookie = value()
            case 13 where name == "authorization":
                authorizations += 1
                authorization = value()
            case 10 where name == "connection":
                connection.append(value())
            case 12...:
                if name.hasPrefix("x-forwarded-") || name == "x-original-uri" || name == "x-original-method" {
                    // Room for a proxy's usual few at once (grown one by one, the array was made three times).
                    if forwarded.isEmpty { forwarded.reserveCapacity(4) }
                    forwarded.append(Field(name: name, value: value()))
                }
            default:
                break
            }
        }
        guard let host, !host.isEmpty else { return .notTaken }
        return .head(
            RequestHead(
                method: method, length: end, contentLength: contentLength, target: target, lines: lines, host: host, cookie: cookie,
                authorization: authorizations == 1 ? authorization : nil, mayHoldToken: authorizations > 1 || Self.queryMayHoldToken(target), connection: connection, forwarded: forwarded, isHTTP10: isHTTP10
            )
        )
    }

    /// Whether `target`'s query may name `access_token` (in any case or percent-encoding): a look for the letters,
    /// the exact reading is `BearerCredential`'s.
    package static func queryMayHoldToken(_ target: String) -> Bool {
        guard let mark = queryMark(target) else { return false }
        let query = target[target.index(after: mark)...]
        guard query.utf8.contains(UInt8(ascii: "%")) else { return query.containsBytes("access_token", caseInsensitive: true) }
        return (query.removingPercentEncoding ?? String(query)).containsBytes("access_token", caseInsensitive: true)
    }

    /// Where the query of `target` starts: its first `?`, found over the bytes (the `UTF8View`'s `firstIndex` walked
    /// its indices, 40 instructions a byte, three times a request of the byte path).
    package static func queryMark(_ target: String) -> String.Index? {
        var copy = target
        guard let offset = copy.withUTF8({ $0.firstIndex(of: UInt8(ascii: "?")) }) else { return nil }
        return target.utf8.index(target.utf8.startIndex, offsetBy: offset)
    }

    /// A response head read whole, with the framing of the body that follows.
    package struct ResponseHead {
        package let length: Int
        package let status: Int
        /// The status line's reason phrase, as sent.
        package let reason: Range<Int>
        package let lines: [Line]
        package let framing: Framing
        /// The upstream keeps the connection open after this answer.
        package let keepAlive: Bool
        package let connection: [String]
        /// The transfer codings other than a final `chunked` (`gzip` of `gzip, chunked`), as sent; nil for none.
        package let codings: String?
    }

    /// Where the body of a response ends.
    package enum Framing: Equatable {
        case none
        case length(Int)
        case chunked
        /// At the end of the connection.
        case close
    }

    package enum ResponseParse {
        case incomplete
        case invalid(String)
        case head(ResponseHead)
    }

    /// `HTTP/1.`, the first seven bytes of a status line, as the low seven bytes of a little-endian word
    /// (`RawHTTPWordTests.wordTests` spells it out).
    package static let statusLineStart: UInt64 = 0x002E_312F_5054_5448

    /// Reads a response head at the start of `bytes` (the answer to a GET).
    package static func response(_ bytes: UnsafeRawBufferPointer) -> ResponseParse {
        let end: Int
        switch headEnd(bytes, limit: responseHeadLimit) {
        case .at(let found): end = found
        case .malformed: return .invalid("a line not ending in CRLF")
        case .notYet: return bytes.count > responseHeadLimit ? .invalid("response head longer than \(responseHeadLimit) bytes") : .incomplete
        }
        // Status line: HTTP/1.x SP 3DIGIT SP reason CRLF (the reason may be empty, its SP too).
        guard end >= 14, UInt64(littleEndian: bytes.loadUnaligned(as: UInt64.self)) & 0x00FF_FFFF_FFFF_FFFF == Self.statusLineStart, bytes[7] == UInt8(ascii: "0") || bytes[7] == UInt8(ascii: "1"),
            bytes[8] == UInt8(ascii: " "), (9...11).allSatisfy({ (0x30...0x39).contains(bytes[$0]) })
        else { return .invalid("malformed status line") }
        let minor = bytes[7] == UInt8(ascii: "1") ? 1 : 0
        let status = (9...11).reduce(0) { $0 * 10 + Int(bytes[$1] - 0x30) }
        var index = 12
        if bytes[index] == UInt8(ascii: " ") { index += 1 }
        let reasonStart = index
        while bytes[index] != UInt8(ascii: "\r") {
            guard bytes[index] == 0x09 || bytes[index] >= 0x20, bytes[index] != 0x7F else { return .invalid("malformed status line") }
            index += 1
        }
        guard bytes[index + 1] == UInt8(ascii: "\n"), status >= 100 else { return .invalid("malformed status line") }
        let reason = reasonStart..<index
        guard let lines = headerLines(bytes, from: index + 2, end: end, allowsObsText: true, limit: .max) else { return .invalid("malformed header line") }
        var length: Int?
        var transferEncoding: [String] = []
        var connection: [String] = []
        for line in lines {
            // Made only for the fields read here: most of an answer's are not.
            let value = { String(decoding: UnsafeRawBufferPointer(rebasing: bytes[line.value]), as: UTF8.self) }
            let name = line.name
            switch name.utf8.count {
            case 14 where name == "content-length":
                let value = value()
                // A second Content-Length, even an equal one, is refused, as NIO's parser refuses it on the handlers'
                // carrier: one behaviour for every carrier.
                guard length == nil else { return .invalid("two Content-Length fields") }
                guard !value.isEmpty, value.utf8.count <= 18, value.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let parsed = Int(value)
                else { return .invalid("bad Content-Length") }
                length = parsed
            case 17 where name == "transfer-encoding":
                transferEncoding.append(value())
            case 10 where name == "connection":
                connection.append(value())
            default:
                break
            }
        }
        let codings = !transferEncoding.isEmpty
        if codings, length != nil { return .invalid("both Transfer-Encoding and Content-Length") }
        let (codingList, chunked) = transferCodings(transferEncoding)
        if codingList.contains(where: { equalsIgnoringCase($0, "chunked") }) { return .invalid("chunked before another transfer coding") }
        let closes = listsClose(connection)
        let framing: Framing
        if status < 200 || status == 204 || status == 304 {
            framing = .none
        } else if codings {
            framing = chunked ? .chunked : .close
        } else if let length {
            framing = .length(length)
        } else {
            framing = .close
        }
        let keepAlive = minor == 1 && !closes && framing != .close
        return .head(
            ResponseHead(
                length: end, status: status, reason: reason, lines: lines, framing: framing, keepAlive: keepAlive, connection: connection,
                codings: codingList.isEmpty ? nil : codingList.joined(separator: ", ")
            )
        )
    }

    /// The transfer codings `Transfer-Encoding` values list before a final `chunked` (`gzip` of `gzip, chunked`),
    /// and whether it ends in `chunked`: the bytes of a body siwa relays are still in those codings.
    package static func transferCodings(_ values: [String]) -> (codings: [Substring], chunked: Bool) {
        var codings = values.flatMap { commaList($0) }
        let chunked = codings.last.map { equalsIgnoringCase($0, "chunked") } ?? false
        if chunked { codings.removeLast() }
        return (codings, chunked)
    }

    /// Whether `Connection` values list the token `close` (read by byte: an answer's `Connection: keep-alive` is read
    /// on every proxied request).
    package static func listsClose(_ connection: [String]) -> Bool {
        listsToken(connection, "close")
    }

    /// Whether `Connection` values list `token` (lower case), in any case: the members of `commaList`, read here over
    /// the bytes (every proxied answer's `Connection: keep-alive` is read so; through `Substring`s it cost 1,250
    /// instructions a request).
    package static func listsToken(_ connection: [String], _ token: StaticString) -> Bool {
        token.withUTF8Buffer { token in
            connection.contains { value in
                var value = value
                return value.withUTF8 { bytes in
                    var found = false
                    forEachMember(of: bytes, separatedBy: UInt8(ascii: ",")) { member in
                        found = found || sameToken(UnsafeBufferPointer(rebasing: bytes[member]), token)
                    }
                    return found
                }
            }
        }
    }

    /// Calls `body` with where each member of a list in `bytes` lies, members separated by `separator` and trimmed of
    /// blanks (SP, HTAB), empty ones included, in order: the one walk over a list's bytes (`Connection` values, field
    /// values' comma lists, a `Cookie` value's pairs).
    package static func forEachMember(of bytes: UnsafeBufferPointer<UInt8>, separatedBy separator: UInt8, _ body: (Range<Int>) -> Void) {
        let isBlank = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        var start = 0
        while true {
            var end = start
            while end < bytes.count, bytes[end] != separator { end += 1 }
            var low = start
            var high = end
            while low < high, isBlank(bytes[low]) { low += 1 }
            while high > low, isBlank(bytes[high - 1]) { high -= 1 }
            body(low..<high)
            guard end < bytes.count else { return }
            start = end + 1
        }
    }

    /// Whether `bytes` are `token` (ASCII, lower case) in any case.
    @inline(__always)
    package static func sameToken(_ bytes: UnsafeBufferPointer<UInt8>, _ token: UnsafeBufferPointer<UInt8>) -> Bool {
        bytes.count == token.count && sameIgnoringCase(bytes, token)
    }

    /// Whether `bytes` are `lowercase` (ASCII, lower case, as long) in any case.
    @inline(__always)
    private static func sameIgnoringCase(_ bytes: UnsafeBufferPointer<UInt8>, _ lowercase: UnsafeBufferPointer<UInt8>) -> Bool {
        for offset in 0..<lowercase.count {
            let want = lowercase[offset]
            guard (0x61...0x7A).contains(want) ? bytes[offset] | 0x20 == want : bytes[offset] == want else { return false }
        }
        return true
    }

    /// The non-empty members of a comma-separated field value, trimmed of blanks.
    package static func commaList(_ value: String) -> [Substring] {
        var members: [Substring] = []
        forEachCommaMember(value) { members.append($0) }
        return members
    }

    /// Calls `body` with each non-empty member of a comma-separated field value, trimmed of blanks. Read by byte,
    /// with nothing allocated: `split` on a `String` walks grapheme clusters, and these run on every proxied request.
    package static func forEachCommaMember(_ value: String, _ body: (Substring) -> Void) {
        // The bytes of a copy are walked; the members are cut from `value` at the same places (separators and blanks
        // are ASCII, so every place is a character's edge).
        var copy = value
        copy.withUTF8 { bytes in
            forEachMember(of: bytes, separatedBy: UInt8(ascii: ",")) { member in
                guard !member.isEmpty else { return }
                let utf8 = value.utf8
                body(Substring(utf8[utf8.index(utf8.startIndex, offsetBy: member.lowerBound)..<utf8.index(utf8.startIndex, offsetBy: member.upperBound)]))
            }
        }
    }

    /// Whether `text` is `lowercase` (ASCII, lower case) in any case.
    package static func equalsIgnoringCase(_ text: Substring, _ lowercase: StaticString) -> Bool {
        guard text.utf8.count == lowercase.utf8CodeUnitCount else { return false }
        // Through the bytes themselves (the view's indices cost more than the comparison), as `sameToken` compares.
        var text = text
        return lowercase.withUTF8Buffer { expected in text.withUTF8 { sameToken($0, expected) } }
    }

    /// Where the head ends.
    enum HeadEnd: Equatable {
        /// After this many bytes (its CRLF CRLF included).
        case at(Int)
        /// Not within the bytes so far.
        case notYet
        /// A line ends in a bare LF or a CR stands alone: not the subset, whatever follows.
        case malformed
    }

    static func headEnd(_ bytes: UnsafeRawBufferPointer, limit: Int) -> HeadEnd {
        let searched = min(bytes.count, limit)
        var index = 0
        while index < searched {
            // Eight bytes at a time to the next that may be CR or LF: a head is mostly text, and this was a byte loop
            // over every byte of both heads of a proxied request (callgrind: 3,000 instructions of its 95,000).
            index = Self.skipping(bytes, from: index, before: searched, Self.lineEndMask)
            guard index < searched else { break }
            switch bytes[index] {
            case UInt8(ascii: "\n"):
                guard index > 0, bytes[index - 1] == UInt8(ascii: "\r") else { return .malformed }
                if index >= 3, bytes[index - 2] == UInt8(ascii: "\n") { return .at(index + 1) }
            case UInt8(ascii: "\r"):
                if index + 1 < bytes.count, bytes[index + 1] != UInt8(ascii: "\n") { return .malformed }
            default:
                break
            }
            index += 1
        }
        return .notYet
    }

    /// The bytes of `word` (eight bytes of a head, loaded as they lie) below 0x0E, which may be CR or LF: each such
    /// byte's high bit set. Exact up to the first such byte (a borrow may flag bytes after it), and none when none is.
    @inline(__always)
    static func lineEndMask(_ word: UInt64) -> UInt64 {
        let word = UInt64(littleEndian: word)
        return (word &- 0x0E0E_0E0E_0E0E_0E0E) & ~word & 0x8080_8080_8080_8080
    }

    /// The bytes of `word` that are not visible ASCII or SP (0x20 to 0x7E, what most of a field value is), flagged as
    /// `lineEndMask` flags its own: exact up to the first, none when all are.
    @inline(__always)
    static func nonTextMask(_ word: UInt64) -> UInt64 {
        let word = UInt64(littleEndian: word)
        let below20 = (word &- 0x2020_2020_2020_2020) & ~word & 0x8080_8080_8080_8080
        let del = word ^ 0x7F7F_7F7F_7F7F_7F7F
        let isDel = (del &- 0x0101_0101_0101_0101) & ~del & 0x8080_8080_8080_8080
        return (word & 0x8080_8080_8080_8080) | below20 | isDel
    }

    /// Where the first byte a mask flags lies in its word (0 to 7).
    @inline(__always)
    static func firstFlagged(_ mask: UInt64) -> Int { mask.trailingZeroBitCount >> 3 }

    /// From `index`, eight bytes at a time while `mask` flags none of them: the first flagged byte's place, or where
    /// fewer than eight bytes are left before `limit`.
    @inline(__always)
    static func skipping(_ bytes: UnsafeRawBufferPointer, from index: Int, before limit: Int, _ mask: (UInt64) -> UInt64) -> Int {
        var index = index
        while index + 8 <= limit {
            let flagged = mask(bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self))
            if flagged != 0 { return index + firstFlagged(flagged) }
            index += 8
        }
        return index
    }

    /// The header lines from `start` to the head's end (`end`, after CRLF CRLF); nil for anything outside the subset:
    /// a line not ending in CRLF, a folded line, a name that is not a token, a control character in a value
    /// (bytes above 0x7F only where `allowsObsText`), too many lines.
    static func headerLines(_ bytes: UnsafeRawBufferPointer, from start: Int, end: Int, allowsObsText: Bool, limit: Int) -> [Line]? {
        var lines: [Line] = []
        lines.reserveCapacity(16)
        var index = start
        while index < end - 2 {
            let lineStart = index
            while index < end, isTokenByte(bytes[index]) { index += 1 }
            guard index > lineStart, index < end, bytes[index] == UInt8(ascii: ":") else { return nil }
            // The closure is given a constant: a `var` it captured (`index`) would be checked for exclusive access
            // at run time at every use in this function, each byte of the head (callgrind: 7,000 instructions a
            // proxied request in swift_beginAccess).
            let nameLength = index - lineStart
            let name = Self.knownName(bytes, at: lineStart, count: nameLength) ?? String(unsafeUninitializedCapacity: nameLength) { out in
                for offset in 0..<nameLength {
                    let byte = bytes[lineStart + offset]
                    out[offset] = (0x41...0x5A).contains(byte) ? byte + 0x20 : byte
                }
                return nameLength
            }
            index += 1
            while bytes[index] == UInt8(ascii: " ") || bytes[index] == 0x09 { index += 1 }
            let valueStart = index
            while true {
                // Eight bytes at a time while they are plain text (the head's CR LF CR LF lies ahead, `end` after it).
                index = Self.skipping(bytes, from: index, before: end, Self.nonTextMask)
                let byte = bytes[index]
                if byte == UInt8(ascii: "\r") { break }
                guard byte == 0x09 || (byte >= 0x20 && byte != 0x7F), allowsObsText || byte < 0x80 else { return nil }
                index += 1
            }
            // The value without the blanks after it.
            var valueEnd = index
            while valueEnd > valueStart, bytes[valueEnd - 1] == UInt8(ascii: " ") || bytes[valueEnd - 1] == 0x09 { valueEnd -= 1 }
            guard bytes[index + 1] == UInt8(ascii: "\n") else { return nil }
            lines.append(Line(name: name, line: lineStart..<index, value: valueStart..<valueEnd))
            guard lines.count <= limit else { return nil }
            index += 2
        }
        return index == end - 2 ? lines : nil
    }

    /// A field name the byte path reads often (the fields of browsers, proxies and common upstreams), lowercased: its
    /// bytes as four little-endian words (`loweredWord`'s), and the literal.
    struct KnownName {
        let count: Int
        let words: (UInt64, UInt64, UInt64, UInt64)
        let name: String
    }

    /// The known names, by length (`knownByLength`): a name made of a literal, not a new `String` (one a line cost 300
    /// instructions, more for names over 15 bytes, which are allocated; a literal is compared with the same literal by
    /// identity).
    static let knownNames: [KnownName] = {
        let names = [
            "host", "cookie", "authorization", "content-length", "content-type", "connection", "user-agent", "accept",
            "accept-encoding", "accept-language", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-forwarded-uri",
            "x-forwarded-method", "x-forwarded-port", "x-original-uri", "x-original-method", "x-real-ip", "origin", "referer",
            "sec-fetch-mode", "sec-fetch-site", "sec-fetch-dest", "sec-fetch-user", "upgrade-insecure-requests", "cache-control",
            "pragma", "if-none-match", "if-modified-since", "x-requested-with", "transfer-encoding", "expect", "upgrade", "te",
            "keep-alive", "forwarded", "via", "priority", "date", "server", "content-encoding", "etag", "last-modified",
            "set-cookie", "vary", "location", "expires", "age", "www-authenticate", "access-control-request-method",
            "access-control-allow-origin", "x-content-type-options", "x-frame-options", "strict-transport-security",
            "content-security-policy", "referrer-policy", "accept-ranges", "x-siwa-assertion",
        ]
        return names.filter { (1...32).contains($0.utf8.count) }.sorted { $0.utf8.count < $1.utf8.count }.map { name in
            let bytes = Array(name.utf8)
            let words = bytes.withUnsafeBytes { raw in
                (0..<4).map { index in index * 8 < raw.count ? loweredWord(raw, at: index * 8, count: min(8, raw.count - index * 8)) : 0 }
            }
            return KnownName(count: bytes.count, words: (words[0], words[1], words[2], words[3]), name: name)
        }
    }()

    /// Where the known names of each length lie in `knownNames`.
    static let knownByLength: [Range<Int>] = (0...32).map { length in
        let first = knownNames.firstIndex { $0.count == length } ?? 0
        let end = knownNames.lastIndex { $0.count == length }.map { $0 + 1 } ?? 0
        return first..<max(first, end)
    }

    /// The `count` bytes (1 to 8) at `index` as a little-endian word, the rest zero, with upper-case ASCII letters
    /// lowered (a field name's bytes are tokens, below 0x80).
    @inline(__always)
    static func loweredWord(_ bytes: UnsafeRawBufferPointer, at index: Int, count: Int) -> UInt64 {
        var word: UInt64 = 0
        if index + 8 <= bytes.count {
            word = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self))
            if count < 8 { word &= (1 << (UInt64(count) * 8)) - 1 }
        } else {
            for offset in 0..<count { word |= UInt64(bytes[index + offset]) << (UInt64(offset) * 8) }
        }
        // A byte's high bit set where it is at least 0x41, and where it is at least 0x5B: an upper-case letter in between.
        let seven = word & 0x7F7F_7F7F_7F7F_7F7F
        let upper = (seven &+ 0x3F3F_3F3F_3F3F_3F3F) & ~(seven &+ 0x2525_2525_2525_2525) & ~word & 0x8080_8080_8080_8080
        return word | (upper >> 2)
    }

    /// The known name (`knownNames`) the `count` bytes at `start` spell in any case; nil for any other name.
    @inline(__always)
    static func knownName(_ bytes: UnsafeRawBufferPointer, at start: Int, count: Int) -> String? {
        guard count <= 32 else { return nil }
        let candidates = knownByLength[count]
        guard !candidates.isEmpty else { return nil }
        let first = loweredWord(bytes, at: start, count: min(count, 8))
        for index in candidates where knownNames[index].words.0 == first {
            let known = knownNames[index]
            var offset = 8
            var same = true
            while same, offset < count {
                let word = switch offset {
                case 8: known.words.1
                case 16: known.words.2
                default: known.words.3
                }
                same = loweredWord(bytes, at: start + offset, count: min(8, count - offset)) == word
                offset += 8
            }
            if same { return known.name }
        }
        return nil
    }

    /// RFC 9110 §5.6.2: a token (a field name, a method), not empty. For a `String` and a `Substring` each, not
    /// `some StringProtocol`: called from another module, the generic one went unspecialised, each byte through the
    /// protocol's witnesses (over a tenth of what siwa spent reading an HTTP/2 head).
    package static func isToken(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy(isTokenByte)
    }

    /// `isToken` of a part of a string.
    package static func isToken(_ text: Substring) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy(isTokenByte)
    }

    /// RFC 9110 tchar.
    @inlinable
    package static func isTokenByte(_ byte: UInt8) -> Bool {
        // One bit a byte, 0x00 to 0x3F then 0x40 to 0x7F (`RawHTTPWordTests.tokenBytes` holds them to the RFC's list).
        switch byte {
        case 0..<64: (0x03FF_6CFA_0000_0000 as UInt64) >> byte & 1 == 1
        case 64..<128: (0x57FF_FFFF_C7FF_FFFE as UInt64) >> (byte &- 64) & 1 == 1
        default: false
        }
    }
}

/// A chunked body read as it passes: where its data is, and where it ends (after its trailers).
package struct ChunkedFraming {
    private enum State {
        case size, sizeExtension, sizeLF, data, dataCR, dataLF, trailerStart, trailerLine, trailerLF, finalLF, done
    }

    package init() {}

    private var state = State.size
    private var size = 0
    private var sawDigit = false

    package enum Progress: Equatable {
        /// All of it belongs to the body, which goes on.
        case more
        /// The body ends after this many bytes.
        case ended(Int)
        case invalid
    }

    /// Reads `bytes`, the body's next; `data` is given the ranges of `bytes` that are chunk data, in order, and
    /// `trailer` those that are the trailer section's field lines, each line's CRLF included (a line may be split
    /// between two calls).
    package mutating func consume(
        _ bytes: UnsafeRawBufferPointer, data: (Range<Int>) -> Void = { _ in }, trailer: (Range<Int>) -> Void = { _ in }
    ) -> Progress {
        var index = 0
        // Where the trailer bytes of this call began.
        var trailerFrom: Int? = (state == .trailerLine || state == .trailerLF) ? 0 : nil
        defer { if let from = trailerFrom, from < index, state != .done { trailer(from..<min(index, bytes.count)) } }
        while index < bytes.count {
            let byte = bytes[index]
            switch state {
            case .size:
                if let digit = FormEncoding.hexValue(byte).map(Int.init) {
                    guard size < 1 << 40 else { return .invalid }
                    size = size * 16 + digit
                    sawDigit = true
                } else if byte == UInt8(ascii: ";") || byte == UInt8(ascii: " ") || byte == 0x09 {
                    guard sawDigit else { return .invalid }
                    state = .sizeExtension
                } else if byte == UInt8(ascii: "\r") {
                    guard sawDigit else { return .invalid }
                    state = .sizeLF
                } else {
                    return .invalid
                }
            case .sizeExtension:
                if byte == UInt8(ascii: "\r") {
                    state = .sizeLF
                } else if byte == UInt8(ascii: "\n") || (byte < 0x20 && byte != 0x09) {
                    return .invalid
                }
            case .sizeLF:
                guard byte == UInt8(ascii: "\n") else { return .invalid }
                state = size == 0 ? .trailerStart : .data
                sawDigit = false
            case .data:
                let taken = min(size, bytes.count - index)
                data(index..<(index + taken))
                size -= taken
                index += taken
                if size == 0 { state = .dataCR }
                continue
            case .dataCR:
                guard byte == UInt8(ascii: "\r") else { return .invalid }
                state = .dataLF
            case .dataLF:
                guard byte == UInt8(ascii: "\n") else { return .invalid }
                state = .size
            case .trailerStart:
                if byte == UInt8(ascii: "\r") {
                    if let from = trailerFrom, from < index { trailer(from..<index) }
                    trailerFrom = nil
                    state = .finalLF
                } else {
                    guard byte != UInt8(ascii: "\n") else { return .invalid }
                    if trailerFrom == nil { trailerFrom = index }
                    state = .trailerLine
                }
            case .trailerLine:
                if byte == UInt8(ascii: "\r") {
                    state = .trailerLF
                } else if byte == UInt8(ascii: "\n") {
                    return .invalid
                }
            case .trailerLF:
                guard byte == UInt8(ascii: "\n") else { return .invalid }
                state = .trailerStart
            case .finalLF:
                guard byte == UInt8(ascii: "\n") else { return .invalid }
                state = .done
                return .ended(index + 1)
            case .done:
                return .ended(index)
            }
            index += 1
        }
        return .more
    }
}
