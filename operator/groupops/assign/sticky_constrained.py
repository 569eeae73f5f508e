"""Kafka's ConstrainedAssignmentBuilder: the sticky assignment when every member subscribes to
the same topics, step by step as AbstractStickyAssignor (kafka-clients 4.x) numbers them.

With P partitions and N members, minQuota = P // N, maxQuota = ceil(P / N), and exactly P % N
members end with maxQuota.

1. Reassign owned partitions, members in the subscriptions' iteration order. A member's owned
   partitions (rack-aware: only those with a replica in its rack) are sorted by partition number,
   then topic; partitions claimed twice in one generation are dropped. Fewer than minQuota: keep
   them all, the member is "unfilled". At least maxQuota while fewer than P % N members have
   taken maxQuota: keep the first maxQuota. Otherwise keep the first minQuota and, while members
   at maxQuota are still wanted, the member may take one more later. The rest is revoked.
2. Rack-aware only: partitions (those with the fewest members near their replicas first) go
   round robin to unfilled members in a replica's rack, then to members that may take one more.
3. Round robin over the remaining partitions in (topic, partition) order: unfilled members in
   member-id order until each has minQuota, then one each to the members that may take one more,
   in the order they became eligible.

Step 3 runs as whole-array operations: the round robin's sequence of receivers is known in
advance (pass r serves every unfilled member still r or more short), so no per-partition loop.

A partition assigned to a member other than the one that had it revoked, or claimed twice in one
generation, is "transferring ownership": the cooperative assignor withholds it for one round.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from groupops.assign.invariants import InvariantViolation
from groupops.assign.sticky_core import BoolArray, IntArray, RackInfo, StickyProblem

__all__ = ["ConstrainedResult", "build_constrained"]


@dataclass(slots=True)
class ConstrainedResult:
    owner: IntArray
    transferring: BoolArray


def build_constrained(problem: StickyProblem) -> ConstrainedResult:
    n = len(problem.members)
    total = problem.total
    owner = np.full(total, -1, dtype=np.int64)
    transferring = np.zeros(total, dtype=np.bool_)
    if n == 0 or total == 0:
        return ConstrainedResult(owner, transferring)
    min_quota, extra_members = divmod(total, n)
    max_quota = min_quota + (1 if extra_members else 0)
    revoked_from = np.full(total, -1, dtype=np.int64)

    # Step 1: owned partitions, sorted by (partition, topic) per member.
    member = problem.claim_member[problem.held]
    partition = problem.claim_partition[problem.held]
    racks = problem.racks
    if racks is not None and len(partition):
        mismatch = racks.mismatch(member, partition)
        revoked_from[partition[mismatch]] = member[mismatch]
        member, partition = member[~mismatch], partition[~mismatch]
    if len(partition):
        valid = ~problem.multiple[partition]
        member, partition = member[valid], partition[valid]
    topic_of = problem.topic_of(partition)
    order = np.lexsort((topic_of, partition - problem.offsets[topic_of], member))
    member, partition = member[order], partition[order]
    owned_count = np.bincount(member, minlength=n)
    first_claim = np.concatenate(([0], np.cumsum(owned_count)[:-1]))

    keep = owned_count.copy()
    under_min: list[int] = []
    may_take_one: list[int] = []
    at_max = 0
    for m in problem.iteration:
        count = int(owned_count[m])
        if count < min_quota:
            under_min.append(m)
        elif count >= max_quota and at_max < extra_members:
            at_max += 1
            if at_max == extra_members:
                may_take_one.clear()
            keep[m] = max_quota
        else:
            keep[m] = min_quota
            if at_max < extra_members:
                may_take_one.append(m)
    rank_in_member = np.arange(len(partition), dtype=np.int64) - first_claim[member]
    kept = rank_in_member < keep[member]
    owner[partition[kept]] = member[kept]
    revoked_from[partition[~kept]] = member[~kept]
    counts = keep.copy()

    by_id = problem.id_rank.tolist()
    under_min.sort(key=by_id.__getitem__)
    may_take_one.sort(key=by_id.__getitem__)
    unassigned = np.flatnonzero(owner < 0)

    # Step 2: rack-aware round robin.
    if racks is not None and len(unassigned):
        unassigned = unassigned[np.argsort(racks.consumers_near(unassigned), kind="stable")]
        state = _RackRoundRobin(
            racks,
            under_min,
            may_take_one,
            counts=counts,
            quotas=(min_quota, max_quota, extra_members),
            at_max=at_max,
        )
        receivers = state.run(unassigned)
        placed = receivers >= 0
        owner[unassigned[placed]] = receivers[placed]
        _mark_transfers(transferring, revoked_from, problem.multiple, unassigned[placed], receivers[placed])
        unassigned = unassigned[~placed]
        under_min, may_take_one, at_max = state.remaining_under_min(), state.may_take_one, state.at_max

    # Step 3: round robin.
    receivers = _round_robin_receivers(under_min, may_take_one, counts, min_quota, len(unassigned))
    owner[unassigned] = receivers
    _mark_transfers(transferring, revoked_from, problem.multiple, unassigned, receivers)
    return ConstrainedResult(owner, transferring)


def _mark_transfers(
    transferring: BoolArray,
    revoked_from: IntArray,
    multiple: BoolArray,
    partitions: IntArray,
    receivers: IntArray,
) -> None:
    """`assignNewPartition`: revoked from someone else, or claimed twice in one generation."""
    previous = revoked_from[partitions]
    moving = ((previous >= 0) & (previous != receivers)) | multiple[partitions]
    transferring[partitions[moving]] = True


def _round_robin_receivers(
    under_min: list[int], may_take_one: list[int], counts: IntArray, min_quota: int, needed: int
) -> IntArray:
    """The members `assignRoundRobin` serves, in order, for `needed` partitions.

    Pass r (r = 1, 2, ...) serves, in list order, every unfilled member at least r short of
    minQuota. Then each member that may take one more gets one, first those listed before the
    round robin, then the unfilled ones in the order they reached minQuota (by shortfall, then
    list position)."""
    members = np.array(under_min, dtype=np.int64)
    short = min_quota - counts[members] if len(members) else np.zeros(0, dtype=np.int64)
    pieces: list[IntArray] = []
    done = 0
    for low, high in zip([0, *sorted(set(short.tolist()))], sorted(set(short.tolist())), strict=False):
        active = members[short > low]
        pieces.append(np.tile(active, high - low))
        done += len(active) * (high - low)
        if done >= needed:
            break
    reached = members[np.argsort(short, kind="stable")]
    pieces.append(np.array(may_take_one, dtype=np.int64))
    pieces.append(reached)
    receivers = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    if len(receivers) < needed:
        raise InvariantViolation("sticky: partitions left over after every member reached its quota")
    return receivers[:needed]


class _RackRoundRobin:
    """`assignRackAwareRoundRobin`, one partition at a time.

    The unfilled list only shrinks during this step, so positions in it are kept as their
    original (sorted) positions; per rack, the positions still unfilled. Kafka's cursor into the
    list becomes "the first position at or after `cursor`, wrapping", which is the same member.
    """

    def __init__(
        self,
        racks: RackInfo,
        under_min: list[int],
        may_take_one: list[int],
        *,
        counts: IntArray,
        quotas: tuple[int, int, int],
        at_max: int,
    ) -> None:
        self.racks = racks
        self.under_min = under_min
        self.alive = [True] * len(under_min)
        self.by_rack: dict[str, list[int]] = {}
        for position, m in enumerate(under_min):
            rack = racks.member_rack[m]
            if rack is not None:
                self.by_rack.setdefault(rack, []).append(position)
        self.may_take_one = list(may_take_one)
        self.counts = counts
        self.min_quota, self.max_quota, self.extra_members = quotas
        self.at_max = at_max
        self.cursor = 0

    def remaining_under_min(self) -> list[int]:
        return [m for m, alive in zip(self.under_min, self.alive, strict=True) if alive]

    def run(self, partitions: IntArray) -> IntArray:
        receivers = np.full(len(partitions), -1, dtype=np.int64)
        for i, g in enumerate(partitions.tolist()):
            replica_racks = self.racks.partition_racks(g)
            if not replica_racks:
                continue
            m = self._from_under_min(replica_racks)
            if m < 0 and self.may_take_one:
                m = self._from_may_take_one(replica_racks)
            if m >= 0:
                self.counts[m] += 1
                receivers[i] = m
        return receivers

    def _from_under_min(self, replica_racks: frozenset[str]) -> int:
        best_position = -1
        best_distance = len(self.under_min)
        for rack in replica_racks:
            positions = self.by_rack.get(rack)
            if not positions:
                continue
            at = bisect_left(positions, self.cursor)
            position = positions[at] if at < len(positions) else positions[0]
            distance = (position - self.cursor) % len(self.under_min)
            if distance < best_distance:
                best_position, best_distance = position, distance
        if best_position < 0:
            return -1
        m = self.under_min[best_position]
        count = int(self.counts[m]) + 1
        if count >= self.min_quota:
            self.alive[best_position] = False
            own_rack = self.racks.member_rack[m]
            assert own_rack is not None
            self.by_rack[own_rack].remove(best_position)
            if count < self.max_quota and self.at_max < self.extra_members:
                self.may_take_one.append(m)
        # Kafka's next index is the member after this one (or this slot, if it left the list),
        # modulo the list's length: the first live position after this one, wrapping.
        self.cursor = best_position + 1
        return m

    def _from_may_take_one(self, replica_racks: frozenset[str]) -> int:
        for index, m in enumerate(self.may_take_one):
            rack = self.racks.member_rack[m]
            if rack is not None and rack in replica_racks:
                if int(self.counts[m]) + 1 == self.max_quota:
                    del self.may_take_one[index]
                    self.at_max += 1
                    if self.at_max == self.extra_members:
                        self.may_take_one.clear()
                return m
        return -1
