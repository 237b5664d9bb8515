import Foundation
import Synchronization

/// A JWS in compact serialization (`header.payload.signature`), split and decoded but not verified.
public struct CompactJWS: Sendable {
    /// The protected header fields Sign in with Apple uses.
    public struct Header: Sendable, Decodable {
        /// Algorithm.
        public var alg: String?
        /// Key id.
        public var kid: String?
        /// Type.
        public var typ: String?

        private enum CodingKeys: String, CodingKey {
            case alg, kid, typ
        }

        /// A member that is not a string counts as absent (and so fails the check that needs it, by name).
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            alg = try? container.decodeIfPresent(String.self, forKey: .alg)
            kid = try? container.decodeIfPresent(String.self, forKey: .kid)
            typ = try? container.decodeIfPresent(String.self, forKey: .typ)
        }
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
    public let payload: [UInt8]
    /// `header.payload` as sent: what the signature covers.
    public let signingInput: Substring.UTF8View
    /// The decoded signature bytes.
    public let signature: [UInt8]

    /// Splits and decodes a token.
    public init(_ token: String) throws(ParseFailure) {
        guard token.utf8.count <= Self.maximumSize else { throw .tooLarge(token.utf8.count) }
        // Work on the contiguous UTF-8 bytes: no per-Character iteration, no copies before decoding.
        var token = token
        token.makeContiguousUTF8()
        let decoded = token.utf8.withContiguousStorageIfAvailable { bytes -> Result<([UInt8], [UInt8], [UInt8], Int), ParseFailure> in
            var dots = (0, 0)
            var dotCount = 0
            for index in bytes.indices where bytes[index] == UInt8(ascii: ".") {
                dotCount += 1
                if dotCount == 1 { dots.0 = index } else if dotCount == 2 { dots.1 = index } else { break }
            }
            guard dotCount == 2 else { return .failure(.wrongPartCount(dotCount + 1)) }
            let header = UnsafeBufferPointer(rebasing: bytes[0..<dots.0])
            let payload = UnsafeBufferPointer(rebasing: bytes[(dots.0 + 1)..<dots.1])
            let signature = UnsafeBufferPointer(rebasing: bytes[(dots.1 + 1)...])
            guard let headerData = Base64URL.decodeToArray(bytes: header), let payloadData = Base64URL.decodeToArray(bytes: payload),
                let signatureData = Base64URL.decodeToArray(bytes: signature)
            else { return .failure(.notBase64URL) }
            return .success((headerData, payloadData, signatureData, dots.1))
        }
        guard let decoded else { throw .notBase64URL }
        let (headerData, payload, signature, signedLength): ([UInt8], [UInt8], [UInt8], Int)
        switch decoded {
        case .success(let parts): (headerData, payload, signature, signedLength) = parts
        case .failure(let failure): throw failure
        }
        guard let header = HeaderCache.shared.header(for: headerData) else { throw .headerNotJSON }
        self.header = header
        self.payload = payload
        self.signature = signature
        signingInput = token[..<token.utf8.index(token.utf8.startIndex, offsetBy: signedLength)].utf8
    }
}

/// Headers already read, by their bytes. Foundation's JSONDecoder, not a parser of our own, reads every header,
/// which arrives before anything is verified; but it costs more than the rest of a token's parse on Linux, and
/// Apple's headers repeat (one per key), so each distinct header is decoded once. Bounded: a flood of distinct
/// headers only empties the cache, it cannot grow it.
final class HeaderCache: Sendable {
    static let shared = HeaderCache()
    private static let capacity = 32
    private let entries = Mutex<[[UInt8]: CompactJWS.Header]>([:])

    func header(for bytes: [UInt8]) -> CompactJWS.Header? {
        if let cached = entries.withLock({ $0[bytes] }) { return cached }
        guard let header = try? JSONDecoder().decode(CompactJWS.Header.self, from: Data(bytes)) else { return nil }
        entries.withLock { entries in
            if entries.count >= Self.capacity { entries.removeAll(keepingCapacity: true) }
            entries[bytes] = header
        }
        return header
    }
}
