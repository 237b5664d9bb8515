extension StringProtocol {
    /// Whether `needle`'s bytes occur in this text's UTF-8, compared exactly or, with `caseInsensitive`, with ASCII
    /// letters folded (a field's token such as `text/html`, a query's `access_token`). A byte search: Foundation's
    /// `contains` and `lowercased` go through `NSString`, which was a tenth of a refusal's time on the byte path.
    package func containsBytes(_ needle: String, caseInsensitive: Bool = false) -> Bool {
        let wanted = Array(needle.utf8)
        guard let first = wanted.first else { return true }
        let fold: (UInt8) -> UInt8 = caseInsensitive ? { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") ? $0 | 0x20 : $0 } : { $0 }
        let head = fold(first)
        let bytes = Array(utf8)
        guard bytes.count >= wanted.count else { return false }
        var start = 0
        while start + wanted.count <= bytes.count {
            if fold(bytes[start]) == head {
                var index = 1
                while index < wanted.count, fold(bytes[start + index]) == fold(wanted[index]) { index += 1 }
                if index == wanted.count { return true }
            }
            start += 1
        }
        return false
    }
}
