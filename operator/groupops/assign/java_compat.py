"""Java collection behaviour that Kafka's sticky assignors depend on, reproduced exactly.

Kafka's AbstractStickyAssignor iterates `java.util.HashMap`s keyed by member id and takes the
first element of `java.util.HashSet`s of TopicPartitions. Those orders look arbitrary but are
fully determined by `String.hashCode`, `TopicPartition.hashCode`, the insertion order and the
table capacity (JDK 8 and later: no per-process hash seed for String keys). We reproduce them so
that the sticky strategies give Kafka's answer to the partition, not merely an equally good one.

What is not reproduced: a hash bucket holding nine or more keys in a table of 64 buckets or more
is turned into a red-black tree by the JDK, which reorders that bucket. Callers can see whether
that happened (`HashOrder.treeified`, `JavaHashSet.treeified`); with member ids and partitions
of real groups it does not.

Used by `groupops.assign.sticky_core` and `groupops.assign.sticky_general` only.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "HashOrder",
    "JavaHashSet",
    "java_hashmap_order",
    "java_string_hash",
    "spread",
    "topic_partition_hash",
]

_INITIAL_CAPACITY = 16
_TREEIFY_THRESHOLD = 8
_MIN_TREEIFY_CAPACITY = 64
_MASK32 = 0xFFFFFFFF


def _to_int32(value: int) -> int:
    value &= _MASK32
    return value - (1 << 32) if value >= 1 << 31 else value


def java_string_hash(text: str) -> int:
    """`String.hashCode()`: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, as a Java int."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK32
    return _to_int32(h)


def topic_partition_hash(topic_hash: int, partition: int) -> int:
    """`TopicPartition.hashCode()` given `topic.hashCode()`: 31 * (31 + partition) + topic hash."""
    return _to_int32(31 * (31 + partition) + topic_hash)


def spread(h: int) -> int:
    """`HashMap.hash()`: the key's hash with its high half folded into the low half (non-negative)."""
    h &= _MASK32
    return h ^ (h >> 16)


@dataclass(frozen=True, slots=True)
class HashOrder:
    """Iteration order of a HashMap filled by `put` in a given order: `order[i]` is the insertion
    index of the i-th key iterated. `treeified` is True when a bucket became a tree (order of that
    bucket then not reproduced)."""

    order: list[int]
    capacity: int
    treeified: bool


def java_hashmap_order(hashes: Sequence[int]) -> HashOrder:
    """Iteration order of `new HashMap<>()` after `put` of distinct keys with these `hashCode()`s
    in this order. Iteration walks buckets in index order and each bucket in insertion order
    (resizes split buckets without reordering them)."""
    spreads = [spread(h) for h in hashes]
    capacity = _INITIAL_CAPACITY
    buckets: dict[int, int] = {}
    treeified = False
    for size, s in enumerate(spreads, start=1):
        index = s & (capacity - 1)
        buckets[index] = buckets.get(index, 0) + 1
        if buckets[index] > _TREEIFY_THRESHOLD:
            if capacity < _MIN_TREEIFY_CAPACITY:
                capacity = _grow(capacity)
                buckets = _count(spreads[:size], capacity)
            else:
                treeified = True
        if size > capacity * 3 // 4:
            capacity = _grow(capacity)
            buckets = _count(spreads[:size], capacity)
    order = sorted(range(len(spreads)), key=lambda i: (spreads[i] & (capacity - 1), i))
    return HashOrder(order=order, capacity=capacity, treeified=treeified)


def _grow(capacity: int) -> int:
    return capacity * 2


def _count(spreads: Sequence[int], capacity: int) -> dict[int, int]:
    counts: dict[int, int] = {}
    for s in spreads:
        index = s & (capacity - 1)
        counts[index] = counts.get(index, 0) + 1
    return counts


K = TypeVar("K", bound=Hashable)


class JavaHashSet(Generic[K]):
    """A `java.util.HashSet` whose only observable order is `first()` (`iterator().next()`).

    Keys carry their Java `hashCode()`; the set keeps Java's capacity (16, doubled past 3/4 full
    or when a small table gets a bucket of nine), never shrinks, and orders each bucket by
    insertion, as the JDK's linked buckets do.
    """

    __slots__ = ("_capacity", "_keys", "treeified")

    def __init__(self) -> None:
        self._capacity = _INITIAL_CAPACITY
        self._keys: dict[K, int] = {}
        self.treeified = False

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: K) -> bool:
        return key in self._keys

    def add(self, key: K, java_hash: int) -> None:
        if key in self._keys:
            return
        s = spread(java_hash)
        self._keys[key] = s
        index = s & (self._capacity - 1)
        in_bucket = sum(1 for other in self._keys.values() if other & (self._capacity - 1) == index)
        if in_bucket > _TREEIFY_THRESHOLD:
            if self._capacity < _MIN_TREEIFY_CAPACITY:
                self._capacity = _grow(self._capacity)
            else:
                self.treeified = True
        if len(self._keys) > self._capacity * 3 // 4:
            self._capacity = _grow(self._capacity)

    def remove(self, key: K) -> None:
        self._keys.pop(key, None)

    def first(self) -> K:
        """The element `iterator().next()` returns: lowest bucket, earliest inserted in it."""
        mask = self._capacity - 1
        best: K | None = None
        best_index = -1
        for key, s in self._keys.items():
            index = s & mask
            if best is None or index < best_index:
                best, best_index = key, index
        if best is None:
            raise KeyError("first() of an empty set")
        return best
