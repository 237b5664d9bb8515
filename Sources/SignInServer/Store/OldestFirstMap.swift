/// A map of at most `capacity` keys which, to make room, forgets the key set longest ago: bounded without forgetting
/// everything at once (the session cache's maps; when they were emptied whole on filling up, every visitor then missed
/// together and asked the database at the same moment).
struct OldestFirstMap<Value> {
    let capacity: Int
    private var slots: [String: Slot] = [:]
    /// Keys in the order they were set, each with the stamp it was set with; a record whose key has since been removed
    /// or set again no longer matches its slot and is skipped. Records before `head` are spent.
    private var order: [(key: String, stamp: UInt64)] = []
    private var head = 0
    private var stamp: UInt64 = 0
    /// The key found last by `value(for:)` and its value, forgotten with any change of the map: a session's requests
    /// come in runs, and comparing its key costs a fraction of hashing it (a session's hash, 64 characters: 730
    /// instructions a look-up in callgrind's count).
    private var last: (key: String, value: Value)?

    private struct Slot {
        var value: Value
        var stamp: UInt64
    }

    init(capacity: Int) {
        self.capacity = capacity
    }

    var count: Int { slots.count }

    subscript(key: String) -> Value? { slots[key]?.value }

    /// The value of `key`, as `self[key]` gives it, from memory when it was the key found last.
    mutating func value(for key: String) -> Value? {
        if let last, last.key == key { return last.value }
        guard let value = slots[key]?.value else { return nil }
        last = (key, value)
        return value
    }

    /// Sets `value` for `key` as the newest key; when the map was full, first forgets the oldest key, which it returns.
    @discardableResult
    mutating func set(_ value: Value, for key: String) -> (key: String, value: Value)? {
        guard capacity > 0 else { return nil }
        last = nil
        let evicted = slots[key] == nil && slots.count >= capacity ? removeOldest() : nil
        stamp &+= 1
        slots[key] = Slot(value: value, stamp: stamp)
        order.append((key, stamp))
        // Spent and stale records are dropped once they outnumber the live ones, so `order` stays within twice the map;
        // in place, so that its storage is kept rather than allocated again.
        if order.count > 2 * slots.count + 64 {
            let live = slots
            order.removeSubrange(..<head)
            order.removeAll { live[$0.key]?.stamp != $0.stamp }
            head = 0
        }
        return evicted
    }

    /// Changes the value of `key` in place, keeping its age; nothing when it is not there.
    mutating func modify(_ key: String, _ change: (inout Value) -> Void) {
        guard var slot = slots[key] else { return }
        last = nil
        change(&slot.value)
        slots[key] = slot
    }

    /// Forgets `key`; what it held.
    @discardableResult
    mutating func remove(_ key: String) -> Value? {
        last = nil
        return slots.removeValue(forKey: key)?.value
    }

    /// Forgets every key.
    mutating func removeAll() {
        last = nil
        slots.removeAll(keepingCapacity: true)
        order.removeAll(keepingCapacity: true)
        head = 0
    }

    private mutating func removeOldest() -> (key: String, value: Value)? {
        while head < order.count {
            let record = order[head]
            head += 1
            if let slot = slots[record.key], slot.stamp == record.stamp {
                slots.removeValue(forKey: record.key)
                return (record.key, slot.value)
            }
        }
        return nil
    }
}
