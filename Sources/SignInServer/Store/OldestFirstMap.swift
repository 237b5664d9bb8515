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

    private struct Slot {
        var value: Value
        var stamp: UInt64
    }

    init(capacity: Int) {
        self.capacity = capacity
    }

    var count: Int { slots.count }

    subscript(key: String) -> Value? { slots[key]?.value }

    /// Sets `value` for `key` as the newest key, first forgetting the oldest ones while the map is full (each passed to
    /// `evicted`).
    mutating func set(_ value: Value, for key: String, evicted: (String, Value) -> Void = { _, _ in }) {
        guard capacity > 0 else { return }
        if slots[key] == nil {
            while slots.count >= capacity, let oldest = removeOldest() { evicted(oldest.0, oldest.1) }
        }
        stamp &+= 1
        slots[key] = Slot(value: value, stamp: stamp)
        order.append((key, stamp))
        // Spent and stale records are dropped once they outnumber the live ones, so `order` stays within twice the map.
        if order.count > 2 * slots.count + 64 {
            order = order[head...].filter { slots[$0.key]?.stamp == $0.stamp }
            head = 0
        }
    }

    /// Changes the value of `key` in place, keeping its age; nothing when it is not there.
    mutating func modify(_ key: String, _ change: (inout Value) -> Void) {
        guard var slot = slots[key] else { return }
        change(&slot.value)
        slots[key] = slot
    }

    /// Forgets `key`; what it held.
    @discardableResult
    mutating func remove(_ key: String) -> Value? {
        slots.removeValue(forKey: key)?.value
    }

    /// Forgets every key.
    mutating func removeAll() {
        slots.removeAll(keepingCapacity: true)
        order.removeAll(keepingCapacity: true)
        head = 0
    }

    private mutating func removeOldest() -> (String, Value)? {
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
