/// Carries a value that is used by one task at a time into another task (an HTTP/2 stream's reader, handed from the
/// task that read the answer's head to the one that writes its body, `UpstreamForwarder.forwardOverHTTP2`).
struct Unchecked<Value>: @unchecked Sendable {
    var value: Value
    init(_ value: Value) { self.value = value }
}
