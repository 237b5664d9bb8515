/// A fixed set of lowercased header names, asked of every field of every request and answer the front passes
/// (`AnswerFilter.hopByHop`, `UpstreamForwarder.forgeable`). A name that shares its length and last byte with no
/// member is told apart by one bit, without hashing it: hashing each field's name was about 2 % of a proxied
/// request's instructions (callgrind). `HeaderNamesTests` holds it to `Set.contains` on generated names.
struct HeaderNames: Sendable, ExpressibleByArrayLiteral {
    let names: Set<String>
    /// Bit `last & 63` of word `count & 63` is set when some member has that length and last byte.
    private let shapes: [UInt64]

    init(_ names: some Sequence<String>) {
        self.names = Set(names)
        var shapes = [UInt64](repeating: 0, count: 64)
        for name in self.names {
            guard let last = name.utf8.last else { continue }
            shapes[name.utf8.count & 63] |= 1 << UInt64(last & 63)
        }
        self.shapes = shapes
    }

    init(arrayLiteral names: String...) {
        self.init(names)
    }

    func contains(_ name: String) -> Bool {
        // The last byte from the string's bytes (the `UTF8View`'s `last` walked back through its indices).
        var copy = name
        guard let last = copy.withUTF8({ $0.last }) else { return names.contains(name) }
        guard shapes[name.utf8.count & 63] & (1 << UInt64(last & 63)) != 0 else { return false }
        return names.contains(name)
    }
}
