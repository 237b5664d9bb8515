/// Comparison of secrets (CSRF tokens, binding hashes) whose time does not depend on where they differ.
enum ConstantTime {
    /// True when `a` and `b` are the same bytes; the time taken depends only on their lengths.
    static func equals(_ a: String, _ b: String) -> Bool {
        let left = Array(a.utf8), right = Array(b.utf8)
        guard left.count == right.count else { return false }
        return zip(left, right).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }
}
