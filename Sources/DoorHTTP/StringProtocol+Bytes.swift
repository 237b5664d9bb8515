extension StringProtocol {
    /// Whether `needle`'s bytes occur in this text's UTF-8, compared exactly or, with `caseInsensitive`, with ASCII
    /// letters folded (a field's token such as `text/html`, a query's `access_token`). A byte search over the UTF-8
    /// views, nothing copied: Foundation's `contains` and `lowercased` go through `NSString`, which was a tenth of a
    /// refusal's time on the byte path.
    package func containsBytes(_ needle: String, caseInsensitive: Bool = false) -> Bool {
        let fold: (UInt8) -> UInt8 = caseInsensitive ? { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") ? $0 | 0x20 : $0 } : { $0 }
        let text = utf8
        let wanted = needle.utf8
        guard let first = wanted.first.map(fold) else { return true }
        var start = text.startIndex
        while let found = text[start...].firstIndex(where: { fold($0) == first }) {
            if text[found...].starts(with: wanted, by: { fold($0) == fold($1) }) { return true }
            start = text.index(after: found)
        }
        return false
    }
}
