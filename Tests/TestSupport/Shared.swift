import Synchronization

/// A value that concurrent tasks of a test read and change.
public final class Shared<Value: Sendable>: Sendable {
    private let state: Mutex<Value>

    public init(_ value: Value) {
        state = Mutex(value)
    }

    public var value: Value { state.withLock { $0 } }

    public func change(_ body: (inout Value) -> Void) {
        state.withLock { body(&$0) }
    }
}
