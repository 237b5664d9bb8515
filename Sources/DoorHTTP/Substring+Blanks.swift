extension Substring {
    /// Without leading and trailing spaces and tabs (the blanks HTTP allows around list items and cookie pairs).
    /// Read by byte (blanks are ASCII, so the ends found are the ends of characters).
    package var trimmingBlanks: Substring {
        let bytes = utf8
        let kept: (UInt8) -> Bool = { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\t") }
        guard let first = bytes.firstIndex(where: kept), let last = bytes.lastIndex(where: kept) else { return self[endIndex...] }
        return self[first..<bytes.index(after: last)]
    }
}
