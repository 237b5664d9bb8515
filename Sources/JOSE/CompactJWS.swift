import Foundation

/// A JWS in compact serialization (`header.payload.signature`), split and decoded but not verified.
public struct CompactJWS: Sendable {
    /// The protected header fields Sign in with Apple uses.
    public struct Header: Sendable {
        /// Algorithm.
        public var alg: String?
        /// Key id.
        public var kid: String?
        /// Type.
        public var typ: String?
    }

    /// Why a string is not a compact JWS.
    public enum ParseFailure: Error, Sendable {
        /// More than `maximumSize` bytes.
        case tooLarge(Int)
        /// Not three parts.
        case wrongPartCount(Int)
        /// A part is not base64url.
        case notBase64URL
        /// The header is not a JSON object.
        case headerNotJSON
    }

    /// The largest token accepted; Apple's are about 1 KiB.
    public static let maximumSize = 16 * 1024

    /// The decoded header.
    public let header: Header
    /// The decoded payload bytes (JSON).
    public let payload: Data
    /// `header.payload` as sent: what the signature covers.
    public let signingInput: Substring.UTF8View
    /// The decoded signature bytes.
    public let signature: Data

    /// Splits and decodes a token.
    public init(_ token: String) throws(ParseFailure) {
        guard token.utf8.count <= Self.maximumSize else { throw .tooLarge(token.utf8.count) }
        // Split the UTF-8 bytes: splitting the String by Character runs grapheme breaking over the whole token.
        let parts = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .wrongPartCount(parts.count) }
        guard let headerData = Base64URL.decode(utf8: parts[0]), let payload = Base64URL.decode(utf8: parts[1]),
            let signature = Base64URL.decode(utf8: parts[2])
        else { throw .notBase64URL }
        guard let fields = try? ParsedJSON.parse(headerData).objectValue else { throw .headerNotJSON }
        header = Header(alg: fields["alg"]?.stringValue, kid: fields["kid"]?.stringValue, typ: fields["typ"]?.stringValue)
        self.payload = payload
        self.signature = signature
        signingInput = token[..<parts[1].endIndex].utf8
    }
}
