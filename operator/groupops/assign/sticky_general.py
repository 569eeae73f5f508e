"""Kafka's GeneralAssignmentBuilder: the sticky assignment when members subscribe to different
topics, step by step as AbstractStickyAssignor (kafka-clients 4.x) numbers them.

1. Keep every owned partition (settled as in `sticky_core`) whose topic the member still
   subscribes to (rack-aware: with a replica in its rack); dropping any means "revocation
   required" (owned partitions of topics not in the metadata are dropped silently, those beyond
   their topic's count as `_drops_stale_claim` says).
2. Partitions are ordered by topic (fewest potential members first, then name), then number.
3. Rack-aware only: each unassigned partition goes to the member with the fewest partitions
   (ties: smaller member id) among its topic's subscribers in a replica's rack or without rack.
4. Each remaining unassigned partition goes to the subscriber with the fewest partitions (ties:
   smaller member id).
5. Balance: topics with one subscriber and members that cannot change are set aside. Then,
   repeatedly over the newly assigned partitions (unless revocation was required) and then over
   all partitions: a partition whose owner has two or more partitions more than the member that
   held it in an older generation goes back to that member; otherwise, if its owner has two or
   more more than some subscriber of its topic, it goes to the subscriber with the fewest (ties:
   smaller id). Kafka's partition-movement bookkeeping may move a different partition of the
   same topic instead, to undo an earlier move rather than start a new one. If the result is not
   more balanced (sum of pairwise count differences) than before step 5, step 5 is undone.

How it runs fast: step 4 over a run of partitions with one set of eligible members is a water
filling whose sequence of receivers is computed in closed form (level by level, members in id
order). Step 5 never evaluates Kafka's expensive `isBalanced()`: whenever a move applies, the
assignment is provably not balanced, and when none applies the loop changes nothing, so the
next partition that would move is found by a vectorized scan over the list.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

import numpy as np

from groupops.assign.java_compat import JavaHashSet, topic_partition_hash
from groupops.assign.sticky_core import DEFAULT_GENERATION, BoolArray, IntArray, StickyProblem

__all__ = ["build_general"]

_INT32 = 1 << 32
_MAX_CHUNK = 1 << 16
_NONE = np.iinfo(np.int64).max // 4


def build_general(problem: StickyProblem) -> IntArray:
    """The owner of every partition (-1: none) as Kafka's general builder decides it."""
    if len(problem.members) == 0 or problem.total == 0:
        return np.full(problem.total, -1, dtype=np.int64)
    return _General(problem).build()


@dataclass(slots=True)
class _Movements:
    """`PartitionMovements`: the net move (first owner -> current owner) of every moved
    partition, and per topic the partitions each (from, to) pair moved, as Java HashSets."""

    topic_of: IntArray
    offsets: IntArray
    topic_hash: list[int]
    pair_of: dict[int, tuple[int, int]] = field(default_factory=dict)
    by_topic: dict[int, dict[tuple[int, int], JavaHashSet[int]]] = field(default_factory=dict)

    def partition_to_move(self, g: int, owner: int, new_owner: int) -> int:
        """`getTheActualPartitionToBeMoved`: prefer undoing a move of this topic from the new
        owner to the partition's first owner."""
        pairs = self.by_topic.get(int(self.topic_of[g]))
        if pairs is None:
            return g
        source = self.pair_of[g][0] if g in self.pair_of else owner
        reverse = pairs.get((new_owner, source))
        return g if reverse is None else reverse.first()

    def move(self, g: int, old_owner: int, new_owner: int) -> None:
        if g in self.pair_of:
            source, _ = self._forget(g)
            if source != new_owner:
                self._record(g, (source, new_owner))
        else:
            self._record(g, (old_owner, new_owner))

    def _record(self, g: int, pair: tuple[int, int]) -> None:
        t = int(self.topic_of[g])
        self.pair_of[g] = pair
        java_hash = topic_partition_hash(self.topic_hash[t], g - int(self.offsets[t]))
        self.by_topic.setdefault(t, {}).setdefault(pair, JavaHashSet()).add(g, java_hash)

    def _forget(self, g: int) -> tuple[int, int]:
        pair = self.pair_of.pop(g)
        t = int(self.topic_of[g])
        pairs = self.by_topic[t]
        pairs[pair].remove(g)
        if not len(pairs[pair]):
            del pairs[pair]
        if not pairs:
            del self.by_topic[t]
        return pair


class _General:
    def __init__(self, problem: StickyProblem) -> None:
        self.p = problem
        self.n = len(problem.members)
        self.topic_of = problem.all_topic_of()
        topic_count = len(problem.topics)
        signatures: dict[frozenset[int], int] = {}
        self.class_of = np.array(
            [signatures.setdefault(s, len(signatures)) for s in problem.subscribed], dtype=np.int64
        )
        self.class_topics = np.zeros((len(signatures), topic_count), dtype=np.bool_)
        for topics, k in signatures.items():
            self.class_topics[k, list(topics)] = True
        self.class_members = [np.flatnonzero(self.class_of == k) for k in range(len(signatures))]
        self.consumers = self.class_topics[self.class_of].sum(axis=0)
        self.member_of_rank = np.argsort(problem.id_rank)
        self.owner = np.full(problem.total, -1, dtype=np.int64)
        self.size = np.zeros(self.n, dtype=np.int64)
        self.revocation_required = False
        # Set by step 5: who takes part, older owners, moves, per-class and per-topic minimums.
        self.active = np.ones(self.n, dtype=np.bool_)
        self.previous = np.full(problem.total, -1, dtype=np.int64)
        self.movements = _Movements(self.topic_of, problem.offsets, problem.topic_hash)
        self.class_min_key = np.full(len(signatures), _NONE, dtype=np.int64)
        self.topic_min = np.full(topic_count, _NONE, dtype=np.int64)
        self.misplaced = 0

    # Steps 1 and 2.
    def build(self) -> IntArray:
        p = self.p
        member = p.claim_member[p.held]
        partition = p.claim_partition[p.held]
        keep = self.class_topics[self.class_of[member], self.topic_of[partition]]
        if p.racks is not None:
            racks = p.racks
            keep &= ~racks.mismatch(member, partition)
        self.revocation_required = not bool(keep.all()) or self._drops_stale_claim()
        self.owner[partition[keep]] = member[keep]
        self.size = np.bincount(member[keep], minlength=self.n).astype(np.int64)
        initializing = int(self.size.max()) == 0

        topic_order = np.lexsort((np.arange(len(p.topics)), self.consumers))
        sorted_all = np.concatenate(
            [np.arange(p.offsets[t], p.offsets[t + 1], dtype=np.int64) for t in topic_order.tolist()]
        )
        unassigned = sorted_all[self.owner[sorted_all] < 0]
        self._assign_unassigned(unassigned)
        return self._balance(sorted_all, unassigned, initializing=initializing)

    def _drops_stale_claim(self) -> bool:
        """Step 1 for owned partitions beyond their topic's count: Kafka keeps one in its owner's
        list unless the owner no longer subscribes to the topic or (rack-aware) has a rack, and
        dropping it then also means "revocation required"."""
        p = self.p
        if len(p.stale_member) == 0:
            return False
        dropped = ~self.class_topics[self.class_of[p.stale_member], p.stale_topic]
        if p.racks is not None:
            dropped |= p.racks.member_rack_index[p.stale_member] >= 0
        return bool(dropped.any())

    # Steps 3 and 4.
    def _assign_unassigned(self, unassigned: IntArray) -> None:
        remaining = self._assign_within_racks(unassigned) if self.p.racks is not None else unassigned
        if len(remaining) == 0:
            return
        # Topics with the same subscribers share a key; a run of equal keys is one water filling.
        keys: dict[bytes, int] = {}
        topic_key = np.array(
            [keys.setdefault(col.tobytes(), len(keys)) for col in self.class_topics.T], dtype=np.int64
        )
        run_key = topic_key[self.topic_of[remaining]]
        starts = np.flatnonzero(np.diff(run_key, prepend=-1))
        ends = np.append(starts[1:], len(remaining))
        by_rank = np.argsort(self.p.id_rank)
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            run = remaining[start:end]
            eligible_classes = self.class_topics[:, int(self.topic_of[run[0]])]
            eligible = by_rank[eligible_classes[self.class_of[by_rank]]]
            receivers = self._water_fill(eligible, len(run))
            self.owner[run] = receivers
            self.size += np.bincount(receivers, minlength=self.n)

    def _water_fill(self, eligible: IntArray, count: int) -> IntArray:
        """Receivers of `count` partitions handed one by one to the eligible member with the
        fewest partitions, ties to the smaller id (`eligible` is in id order): the `count`
        smallest (level, id) slots, where a member holding s partitions has slots s, s+1, ..."""
        sizes = self.size[eligible]
        low = int(sizes.min())
        lo, hi = low, low + count - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if int(np.maximum(mid + 1 - sizes, 0).sum()) >= count:
                hi = mid
            else:
                lo = mid + 1
        level = lo
        bounds = [*sorted({v for v in sizes.tolist() if v < level}), level]
        pieces: list[IntArray] = []
        for a, b in itertools.pairwise(bounds):
            pieces.append(np.tile(eligible[sizes <= a], b - a))
        filled = sum(len(x) for x in pieces)
        pieces.append(eligible[sizes <= level][: count - filled])
        return np.concatenate(pieces)

    def _assign_within_racks(self, unassigned: IntArray) -> IntArray:
        """Step 3, one partition at a time: members are grouped in cells (subscription, rack),
        each a heap by (count, id); a partition takes the best top among its eligible cells."""
        racks = self.p.racks
        assert racks is not None
        cells: dict[tuple[int, str | None], list[tuple[int, int, int]]] = {}
        for m in range(self.n):
            key = (int(self.class_of[m]), racks.member_rack[m])
            cells.setdefault(key, []).append((int(self.size[m]), int(self.p.id_rank[m]), m))
        for heap in cells.values():
            heapq.heapify(heap)
        classes_of_topic = [
            np.flatnonzero(self.class_topics[:, t]).tolist() for t in range(len(self.p.topics))
        ]
        left: list[int] = []
        for g in unassigned.tolist():
            replica_racks = racks.partition_racks(g)
            best: tuple[int, int, int] | None = None
            best_cell: list[tuple[int, int, int]] | None = None
            for k in classes_of_topic[int(self.topic_of[g])]:
                for rack in (None, *replica_racks):
                    cell = cells.get((k, rack))
                    if cell and (best is None or cell[0] < best):
                        best, best_cell = cell[0], cell
            if best is None or best_cell is None:
                left.append(g)
                continue
            size, rank, m = best
            heapq.heapreplace(best_cell, (size + 1, rank, m))
            self.owner[g] = m
            self.size[m] += 1
        return np.array(left, dtype=np.int64)

    # Step 5.
    def _balance(self, sorted_all: IntArray, unassigned: IntArray, *, initializing: bool) -> IntArray:
        p = self.p
        movable_topic = self.consumers >= 2
        all_movable = sorted_all[movable_topic[self.topic_of[sorted_all]]]
        new_movable = unassigned[movable_topic[self.topic_of[unassigned]]]
        max_size = (self.class_topics[self.class_of] * p.counts[None, :]).sum(axis=1)
        holds_movable = np.bincount(
            self.owner[(self.owner >= 0) & movable_topic[self.topic_of]], minlength=self.n
        )
        self.active = (self.size < max_size) | (holds_movable > 0)
        self.previous = self._previous_owners()
        self._refresh_minimums(range(len(self.class_members)))

        before_owner, before_size = self.owner.copy(), self.size.copy()
        self._reassign(new_movable, all_movable, before_size, initializing=initializing)
        if self.misplaced:
            # Kafka's answer would leave a partition with a member not subscribed to its topic
            # (an older-generation owner that dropped the topic took it back): unusable. Redo the
            # balancing without such returns, which is what Kafka does for every other group.
            self.owner, self.size, self.misplaced = before_owner, before_size.copy(), 0
            self.movements = _Movements(self.topic_of, p.offsets, p.topic_hash)
            subscribed = self.previous >= 0
            subscribed[subscribed] = self.class_topics[
                self.class_of[self.previous[subscribed]], self.topic_of[np.flatnonzero(subscribed)]
            ]
            self.previous[~subscribed] = -1
            self._refresh_minimums(range(len(self.class_members)))
            self._reassign(new_movable, all_movable, before_size, initializing=initializing)
        return self.owner

    def _reassign(
        self, new_movable: IntArray, all_movable: IntArray, before_size: IntArray, *, initializing: bool
    ) -> None:
        """Step 5 proper: balance the new partitions, then all; undo it unless it helped."""
        before_owner = self.owner.copy()
        if not self.revocation_required:
            self._perform_reassignments(new_movable)
        performed = self._perform_reassignments(all_movable)
        undo = performed and not initializing
        if undo and _balance_score(self.size[self.active]) >= _balance_score(before_size[self.active]):
            self.owner, self.size, self.misplaced = before_owner, before_size.copy(), 0
            self._refresh_minimums(range(len(self.class_members)))

    def _previous_owners(self) -> IntArray:
        """`prevAssignment`: for each partition, the member of the highest older generation
        (older than the group's newest; no generation counts as -1 once some member has one)
        that claimed it, the first in iteration order on ties. A member set aside in step 5
        would make Kafka fail (NullPointerException); it is left out here."""
        p = self.p
        previous = np.full(p.total, -1, dtype=np.int64)
        newest = p.max_generation
        older = np.array(
            [
                (has and gen < newest) or (not has and newest > DEFAULT_GENERATION)
                for gen, has in zip(p.generation, p.has_generation, strict=True)
            ],
            dtype=bool,
        )
        if not older.any() or len(p.claim_member) == 0:
            return previous
        claims = np.flatnonzero(older[p.claim_member])
        if len(claims) == 0:
            return previous
        members = p.claim_member[claims]
        partitions = p.claim_partition[claims]
        visit_rank = np.empty(self.n, dtype=np.int64)
        visit_rank[p.iteration] = np.arange(self.n, dtype=np.int64)
        generations = np.array(p.generation, dtype=np.int64)[members]
        order = np.lexsort((visit_rank[members], -generations, partitions))
        partitions, members = partitions[order], members[order]
        first = np.ones(len(partitions), dtype=bool)
        first[1:] = partitions[1:] != partitions[:-1]
        partitions, members = partitions[first], members[first]
        usable = self.active[members]
        previous[partitions[usable]] = members[usable]
        return previous

    def _refresh_minimums(self, classes: range | list[int]) -> None:
        """Per subscription class, its member first in Kafka's sorted set (count, then id),
        as count * n + id rank; per topic, the fewest partitions any subscriber holds. Members
        set aside (a class is set aside whole: only an empty subscription is) do not count."""
        for k in classes:
            members = self.class_members[k]
            if len(members) == 0 or not self.active[members[0]]:
                continue
            self.class_min_key[k] = (self.size[members] * self.n + self.p.id_rank[members]).min()
        class_min_size = np.where(self.class_min_key < _NONE, self.class_min_key // self.n, _NONE)
        self.topic_min = np.where(self.class_topics, class_min_size[:, None], _NONE).min(axis=0)

    def _perform_reassignments(self, partitions: IntArray) -> bool:
        """`performReassignments`. Kafka checks `isBalanced()` before every partition; that
        check is needed here only where it can say "balanced" while a move applies: when some
        partition sits with a member not subscribed to its topic (Kafka's move back to an older
        owner can put it there), or when the move about to happen is such a move."""
        performed = False
        while True:
            modified = False
            position = 0
            while position < len(partitions):
                found = self._next_move(partitions, position)
                if found < 0:
                    break
                g = int(partitions[found])
                if (self.misplaced or self._returns_to_non_subscriber(g)) and self._is_balanced():
                    break
                self._move(g)
                modified = performed = True
                position = found + 1
            if not modified:
                return performed

    def _next_move(self, partitions: IntArray, position: int) -> int:
        """Index of the first partition at or after `position` that Kafka would move now."""
        chunk = 256
        has_previous = bool((self.previous >= 0).any())
        while position < len(partitions):
            part = partitions[position : position + chunk]
            owner_size = self.size[self.owner[part]]
            moves: BoolArray = owner_size > self.topic_min[self.topic_of[part]] + 1
            if has_previous:
                previous = self.previous[part]
                known = previous >= 0
                moves |= known & (owner_size > self.size[np.where(known, previous, 0)] + 1)
            hits = np.flatnonzero(moves)
            if len(hits):
                return position + int(hits[0])
            position += len(part)
            chunk = min(chunk * 4, _MAX_CHUNK)
        return -1

    def _subscribes(self, member: int, g: int) -> bool:
        return bool(self.class_topics[self.class_of[member], self.topic_of[g]])

    def _returns_to_non_subscriber(self, g: int) -> bool:
        previous = int(self.previous[g])
        return (
            previous >= 0
            and self.size[self.owner[g]] > self.size[previous] + 1
            and not self._subscribes(previous, g)
        )

    def _is_balanced(self) -> bool:
        """Kafka's `isBalanced()`, in full: counts within one, or no member short of all its
        topics' partitions could take one from a member holding two or more more. Per topic, the
        largest count among its partitions' owners, and the largest among the others."""
        sizes = self.size[self.active]
        if int(sizes.min()) >= int(sizes.max()) - 1:
            return True
        starts = self.p.offsets[:-1]
        owner_size = self.size[self.owner]
        top = np.maximum.reduceat(owner_size, starts)
        positions = np.arange(self.p.total, dtype=np.int64)
        first_top = np.minimum.reduceat(
            np.where(owner_size == top[self.topic_of], positions, self.p.total), starts
        )
        top_owner = self.owner[first_top]
        runner_up = np.maximum.reduceat(
            np.where(self.owner != top_owner[self.topic_of], owner_size, -1), starts
        )
        max_size = (self.class_topics[self.class_of] * self.p.counts[None, :]).sum(axis=1)
        short = np.flatnonzero(self.active & (self.size != max_size))
        for chunk in np.array_split(short, max(1, len(short) * len(starts) // (1 << 20))):
            best_other = np.where(top_owner[None, :] == chunk[:, None], runner_up[None, :], top[None, :])
            mine = self.class_topics[self.class_of[chunk]]
            if bool((np.where(mine, best_other, -1).max(axis=1, initial=-1) > self.size[chunk] + 1).any()):
                return False
        return True

    def _move(self, g: int) -> None:
        owner = int(self.owner[g])
        previous = int(self.previous[g])
        if previous >= 0 and self.size[owner] > self.size[previous] + 1:
            new_owner = previous
        else:
            classes = np.flatnonzero(self.class_topics[:, int(self.topic_of[g])])
            best = int(self.class_min_key[classes].min())
            new_owner = int(self.member_of_rank[best % self.n])
        moved = self.movements.partition_to_move(g, owner, new_owner)
        old_owner = int(self.owner[moved])
        self.movements.move(moved, old_owner, new_owner)
        self.misplaced += int(self._subscribes(old_owner, moved)) - int(self._subscribes(new_owner, moved))
        self.owner[moved] = new_owner
        self.size[old_owner] -= 1
        self.size[new_owner] += 1
        self._refresh_minimums(sorted({int(self.class_of[old_owner]), int(self.class_of[new_owner])}))


def _balance_score(sizes: IntArray) -> int:
    """`getBalanceScore`: sum of |a - b| over all pairs, wrapped to a Java int as Kafka's is."""
    ordered = np.sort(sizes)
    n = len(ordered)
    weights = 2 * np.arange(n, dtype=np.int64) - n + 1
    score = int((ordered * weights).sum()) % _INT32
    return score - _INT32 if score >= _INT32 // 2 else score
