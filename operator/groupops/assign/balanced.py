"""`balanced`: count balance, then the lowest max member lag per capacity, then the fewest moves.

Guarantees, in priority order:

1. Count balance. The count vector is decreasingly minimal for the subscriptions: no chain of
   hand-overs between subscribers can take a partition from a member holding c to one holding
   c - 2 or fewer (see `balanced_fill`). Equal subscriptions: every count is P // n or one more.
   Unequal subscriptions: as even as they allow (the highest count as low as possible, then the
   next, ...), Kafka's sticky notion of balance extended from single moves to chains. Never
   traded for anything below.
2. The move cap. With `options.max_moves = K`, at most K previously owned partitions change owner,
   except for moves that (1) forces: a previous owner that no longer subscribes to the topic, or
   that holds more than its balanced count, loses partitions whatever K says; and an owned
   partition that no longer exists (topic deleted, or beyond its count) is dropped, a revoked
   move as `stats` counts it. Those forced moves
   count against K; when they alone exceed K the result has exactly those (the start from the
   owned partitions makes no other) and no move for lag. Otherwise the K - forced moves left go,
   one exchange at a time, to whatever lowers the max member lag most (a swap costs two). A
   binding cap leaves work for the next call, which goes on from there.
3. The lowest max member lag we can find, a member's lag being the sum of its partitions' lag
   divided by its `capacity`. The problem is NP-hard (scheduling under cardinality limits), so
   this is a heuristic, with two safety nets: whenever the `lag` strategy's own answer is
   count-balanced in the sense of (1) and within the move cap, `balanced` is never worse than it
   (its answer is a candidate, and wins outright when strictly lower); and the search stops
   only at a local optimum, a step limit or within 0.01 % of `stats.lower_bound`.
4. The fewest moves from `owned` (previous owners by invariants.previous_owners): among the
   candidates whose max lag is lowest, counting everything within 0.01 % of the lower bound as
   equal, the one with the fewest moves. The fresh candidates never look at `owned`, and the
   sticky one starts from it and improves only until it reaches their max lag, so an unchanged
   group whose `owned` is this strategy's previous output (no cap binding) gets it back: 0 moves.

When (1) and "never worse than lag" conflict. `lag` balances each topic on its own; over several
topics, with unequal subscriptions or unequal capacities its counts can break (1), and it can
then reach a max lag that no count-balanced assignment reaches. Count balance wins: `balanced`
is promised to match `lag` only when `lag`'s answer is count-balanced. Two examples. Unequal
subscriptions: A on t0 and t1, B on t1 only, t0 two partitions of lag 0, t1 two of lag 100:
`lag` gives A both of t0 and one of t1 (3 partitions, max 100); the only balanced split gives B
both of t1 (max 200). Unequal capacities: A (capacity 100) and B (1) on t0..t3, one partition of
lag 1 each: `lag` gives all four to A (max 0.04), count balance puts two on B (max 2).

Algorithm. (a) Fresh: count quotas first (equal subscriptions: P // n each, the P % n smallest
partitions one each to the members finishing them first; unequal: a lag-blind water-filling per
topic made balanced by chains of hand-overs, which also fixes how many partitions of each topic
each subscription class gets), then longest-processing-time first under those quotas: partitions
in decreasing lag, each to the member with room that would finish it first (numpy batches; per
class when subscriptions differ). A member that took a huge partition sits out and ends with
the smallest ones, which the `lag` strategy's strict rounds cannot do. (b) Bounded local
improvement of the most loaded member by swaps and count-keeping moves (`balanced_search`).
(c) The `lag` strategy's answer, improved the same way, when it is count-balanced and better
than (a). (d) If anything was owned: keep every owned partition whose owner still subscribes,
within its quota (over-quota members let go of the partitions closest to their excess lag), fill
the rest in (LPT; unequal subscriptions: greedy, then chains) and improve until reaching the best
of (a-c), within the cap; with equal subscriptions and no cap, if that falls short, again with
every member letting go of 2, 5, 15 and then 40 % of its load and count. Then the best: fewest
moves beyond the cap, lowest max lag, fewest moves. Fresh candidates are relabelled among
interchangeable members (same subscriptions and capacity) to keep as many owned partitions as
possible. Cost: O(P log P) numpy for sorting and dealing, plus at most 8 n + 1000 search steps,
each over the partitions of a few members. Deterministic; no state across calls (the output is
built with the cyclic garbage collector paused, and its setting restored).

Worked example: C0 and C1 on t0 and t1 (two partitions each), lags t0 [90, 10], t1 [80, 20].
Quotas 2 and 2. LPT: 90 to C0 (tie: lower index), 80 to C1, 20 to C1 (finishes at 100, C0 at
110), 10 to C0. Result C0 [t0p0, t0p1] (100), C1 [t1p0, t1p1] (100): max 100, the lower bound
200 / 2. `lag` restarts per topic: C0 [t0p0, t1p0] (170), C1 [t0p1, t1p1] (30). With C1 of
capacity 3: 90 to C1 (finishes at 30), 80 to C1 too (56.7 against C0's 80); C1 is full, so 20
and 10 go to C0. Result C0 [t0p1, t1p1] (30), C1 [t0p0, t1p0] (170 / 3 = 56.7), optimal under
the quotas; the lower bound is 200 / 4 = 50.
"""

from __future__ import annotations

import numpy as np

from groupops.assign import lag as lag_strategy
from groupops.assign.balanced_fill import (
    balance_counts,
    count_only,
    fill_greedy,
    fill_lpt,
    order_by_lag,
    split_by_class,
)
from groupops.assign.balanced_problem import IntArray, Problem, build_problem, to_assignment
from groupops.assign.balanced_search import improve
from groupops.model import Assignment, GroupInput, kafka_string_key

NAME = "balanced"

__all__ = ["NAME", "assign", "solve"]

# The search stops this close (relative) to the lower bound: closer is not worth more steps.
_CLOSE_ENOUGH = 1e-4
# Shares of the load and count each member lets go of in successive sticky attempts (0: keep all).
_RELEASES = (0.0, 0.02, 0.05, 0.15, 0.4)
# A partition of at least this share of a member's ceiling is kept by it when releasing.
_HUGE = 0.5
# How many overlaps per fresh bin the relabelling considers.
_RELABEL_CHOICES = 3


def assign(group: GroupInput) -> Assignment:
    problem = build_problem(group)
    return to_assignment(group, problem, solve(problem))


def solve(problem: Problem) -> IntArray:
    """The owner (member index) of every partition of `problem`, per the module's guarantees."""
    if problem.partition_count == 0 or len(problem.active()) == 0:
        return np.zeros(problem.partition_count, dtype=np.int64)
    floor = problem.lower_bound() * (1 + _CLOSE_ENOUGH)
    steps = 8 * len(problem.active()) + 1000
    fresh = _fresh(problem)
    improve(problem, fresh, floor=floor, max_steps=steps)
    candidates = [_relabelled(problem, fresh)]
    lag_answer = (
        _balanced_lag_answer(problem, fresh) if problem.max_lag(fresh) > problem.lower_bound() else None
    )
    if lag_answer is not None and problem.max_lag(lag_answer) < problem.max_lag(fresh):
        improved = lag_answer.copy()
        improve(problem, improved, floor=floor, max_steps=steps)
        candidates.append(_relabelled(problem, improved))
    if (problem.previous >= 0).any():
        best = min(problem.max_lag(owner) for owner in candidates)
        # Keep as much as possible first; release more only if that cannot reach the best.
        releases = _RELEASES if problem.uniform and problem.max_moves is None else _RELEASES[:1]
        for release in releases:
            sticky = _sticky(problem, target=best, release=release)
            improve(
                problem,
                sticky,
                target=best,
                floor=floor,
                budget=problem.max_moves,
                mind_moves=True,
                max_steps=steps,
            )
            candidates.insert(0, sticky)
            if problem.max_lag(sticky) <= max(best, floor):
                break
    cap = problem.max_moves

    def beyond_cap(owner: IntArray) -> int:
        return 0 if cap is None else max(0, problem.moves(owner) - cap)

    def rank(index: int) -> tuple[int, float, int, int]:
        owner = candidates[index]
        return (beyond_cap(owner), max(floor, problem.max_lag(owner)), problem.moves(owner), index)

    chosen = candidates[min(range(len(candidates)), key=rank)]
    # The rank counts everything within the floor as equal, so a `lag` answer strictly lower but
    # within 0.01 % of the bound can lose to `fresh` on the index: the promise forbids that.
    lag_lower = lag_answer is not None and problem.max_lag(lag_answer) < problem.max_lag(chosen)
    if problem.max_lag(chosen) <= problem.max_lag(fresh) and not lag_lower:
        return chosen
    # Chosen for fewer moves within the floor (or under the cap): `lag` must still not beat it.
    if lag_answer is None and problem.max_lag(fresh) <= problem.lower_bound():
        lag_answer = _balanced_lag_answer(problem, fresh)
    if lag_answer is None or problem.max_lag(chosen) <= problem.max_lag(lag_answer) or beyond_cap(lag_answer):
        return chosen
    ceiling = problem.max_lag(lag_answer)
    fitting = [
        i for i, owner in enumerate(candidates) if problem.max_lag(owner) <= ceiling and not beyond_cap(owner)
    ]
    if not fitting:
        return _relabelled(problem, lag_answer)
    return candidates[min(fitting, key=lambda i: (problem.moves(candidates[i]), i))]


def _balanced_lag_answer(problem: Problem, fresh: IntArray) -> IntArray | None:
    """The `lag` strategy's answer if its counts are balanced as `fresh`'s are."""
    seed = _lag_candidate(problem)
    if not np.array_equal(np.sort(problem.counts(seed)), np.sort(problem.counts(fresh))):
        return None
    return seed


def _fresh(problem: Problem) -> IntArray:
    """Count quotas first (equal subscriptions: P // n or one more; unequal: from a count-only
    pass made balanced, per member and per topic and class), then LPT under those quotas."""
    owner = np.full(problem.partition_count, -1, dtype=np.int64)
    loads = np.zeros(problem.member_count, dtype=np.float64)
    pool = order_by_lag(problem, np.arange(problem.partition_count))
    if problem.uniform:
        # Every member takes P // n, then the P % n smallest partitions go one each to the
        # members that finish them first: exactly the within-one counts.
        active = problem.active()
        low, extra = divmod(problem.partition_count, len(active))
        room = np.zeros(problem.member_count, dtype=np.int64)
        room[active] = low
        fill_lpt(problem, owner, loads, pool[: len(pool) - extra], room)
        room[active] = 1
        fill_lpt(problem, owner, loads, pool[len(pool) - extra :], room)
        return owner
    # Unequal: quotas per member and per (topic, class) from a count-only pass, then within
    # each class (whose members subscribe alike) the same LPT under the quotas.
    quota_owner = count_only(problem)
    quotas = problem.counts(quota_owner)
    target = split_by_class(problem, quota_owner)
    for k in range(problem.class_topics.shape[0]):
        room = np.where(problem.class_of == k, quotas, 0)
        fill_lpt(problem, owner, loads, pool[target[pool] == k], room)
    return owner


def _sticky(problem: Problem, *, target: float, release: float) -> IntArray:
    """Owned partitions kept where the owner still subscribes, within its count quota; with
    `release` > 0 (equal subscriptions only) every member also lets go of its largest partitions
    until its lag is at most (1 - release) x target x capacity, and of its smallest until it has
    room for `release` of its quota, so the fill has material to even the loads out with. The
    rest is filled in by LPT under the quotas (unequal subscriptions: greedy, then balanced)."""
    owner = np.full(problem.partition_count, -1, dtype=np.int64)
    previous = problem.previous
    held = np.flatnonzero(previous >= 0)
    owners = previous[held]
    still = (problem.class_of[owners] >= 0) & problem.class_topics[
        np.maximum(problem.class_of[owners], 0), problem.topic_of[held]
    ]
    owner[held[still]] = owners[still]
    loads = problem.loads(owner)
    if not problem.uniform:
        fill_greedy(problem, owner, loads, order_by_lag(problem, np.flatnonzero(owner < 0)))
        balance_counts(problem, owner, loads)
        return owner
    room = _shed_to_quota(problem, owner, loads)
    if release > 0:
        room += _release(problem, owner, loads, room, ceiling=(1 - release) * target, share=release)
    fill_lpt(problem, owner, loads, order_by_lag(problem, np.flatnonzero(owner < 0)), room)
    return owner


def _release(
    problem: Problem, owner: IntArray, loads: np.ndarray, room: IntArray, *, ceiling: float, share: float
) -> IntArray:
    """Unassign, per member, the largest partitions down to `ceiling` x capacity (but never one
    of half the ceiling or more: the member keeps it and lets its others go), then the smallest
    until its room is `share` of its count. Returns how many each released."""
    released = np.zeros(problem.member_count, dtype=np.int64)
    by_owner = np.argsort(owner, kind="stable")
    first = int(np.searchsorted(owner[by_owner], 0))
    by_owner = by_owner[first:]
    bounds = np.searchsorted(owner[by_owner], np.arange(problem.member_count + 1))
    for member in problem.active().tolist():
        mine = by_owner[bounds[member] : bounds[member + 1]]
        if len(mine) == 0:
            continue
        mine = mine[np.argsort(-problem.lag[mine], kind="stable")]
        if problem.lag[mine[0]] >= _HUGE * ceiling * float(problem.capacity[member]):
            mine = mine[1:]  # a huge partition stays: nobody else could take it, trade its company
        if len(mine) == 0:
            continue
        running = float(loads[member]) - np.cumsum(problem.lag[mine])
        largest = int(np.searchsorted(-running, -ceiling * float(problem.capacity[member])) + 1)
        largest = min(largest if loads[member] > ceiling * problem.capacity[member] else 0, len(mine))
        wanted = int(np.ceil(share * (len(mine) + room[member]))) - int(room[member])
        smallest = max(0, min(wanted - largest, len(mine) - largest))
        out = np.concatenate([mine[:largest], mine[len(mine) - smallest :]])
        owner[out] = -1
        loads[member] -= float(problem.lag[out].sum())
        released[member] = len(out)
    return released


def _shed_to_quota(problem: Problem, owner: IntArray, loads: np.ndarray) -> IntArray:
    """Equal subscriptions: give the P % n extra places to the members owning the most (then the
    least loaded); members above their quota release partitions, each release as close as
    possible to the lag that brings the member to the group's mean. Returns room left."""
    active = problem.active()
    counts = problem.counts(owner)
    low, extra = divmod(problem.partition_count, len(active))
    order = active[np.lexsort((active, loads[active] / problem.capacity[active], -counts[active]))]
    quota = np.zeros(problem.member_count, dtype=np.int64)
    quota[active] = low
    quota[order[:extra]] += 1
    over = np.flatnonzero(counts > quota)
    if len(over):
        mean = float(problem.lag.sum()) / float(problem.capacity[active].sum())
        by_owner = np.argsort(owner, kind="stable")
        bounds = np.searchsorted(owner[by_owner], np.arange(problem.member_count + 1))
        for member in over.tolist():
            mine = by_owner[bounds[member] : bounds[member + 1]]
            excess = int(counts[member] - quota[member])
            surplus = max(0.0, float(loads[member]) - mean * float(problem.capacity[member])) / excess
            released = mine[np.lexsort((mine, np.abs(problem.lag[mine] - surplus)))[:excess]]
            owner[released] = -1
            loads[member] -= float(problem.lag[released].sum())
            counts[member] -= excess
    return quota - counts


def _lag_candidate(problem: Problem) -> IntArray:
    """The `lag` strategy's answer as an owner array (its own per-topic function, its member
    order: by member id, Java string order)."""
    by_id = sorted(range(problem.member_count), key=lambda i: kafka_string_key(problem.members[i].member_id))
    order = np.array(by_id, dtype=np.int64)
    owner = np.empty(problem.partition_count, dtype=np.int64)
    for t in range(len(problem.topics)):
        subscribers = order[
            (problem.class_of[order] >= 0) & problem.class_topics[np.maximum(problem.class_of[order], 0), t]
        ]
        begin, end = problem.offsets[t], problem.offsets[t + 1]
        owner[begin:end] = subscribers[
            lag_strategy.assign_topic(
                problem.lag[begin:end].astype(np.int64),
                len(subscribers),
                problem.capacity[subscribers].tolist(),
            )
        ]
    return owner


def _relabelled(problem: Problem, owner: IntArray) -> IntArray:
    """`owner` with whole member lists exchanged between interchangeable members (same
    subscriptions and capacity) so that as many partitions as possible stay with their previous
    owner; max lag and the sorted counts are unchanged. Greedy on the largest overlaps."""
    held = problem.previous >= 0
    if not held.any():
        return owner
    n = problem.member_count
    pairs, overlap = np.unique(owner[held] * n + problem.previous[held], return_counts=True)
    bins, members = pairs // n, pairs % n
    same = (problem.class_of[bins] == problem.class_of[members]) & (
        problem.capacity[bins] == problem.capacity[members]
    )
    bins, members, overlap = bins[same], members[same], overlap[same]
    order = np.lexsort((members, -overlap, bins))
    first_of_bin = np.r_[0, np.flatnonzero(np.diff(bins[order])) + 1]
    rank_in_bin = np.arange(len(order)) - np.repeat(first_of_bin, np.diff(np.r_[first_of_bin, len(order)]))
    keep = order[rank_in_bin < _RELABEL_CHOICES]
    keep = keep[np.lexsort((members[keep], bins[keep], -overlap[keep]))]
    mapping = np.full(n, -1, dtype=np.int64)
    used = np.zeros(n, dtype=np.bool_)
    for b, m in zip(bins[keep].tolist(), members[keep].tolist(), strict=True):
        if mapping[b] < 0 and not used[m]:
            mapping[b] = m
            used[m] = True
    kinds: dict[tuple[int, float], list[int]] = {}
    for i in range(n):
        kinds.setdefault((int(problem.class_of[i]), float(problem.capacity[i])), []).append(i)
    for group in kinds.values():
        free = [m for m in group if not used[m]]
        for b, m in zip([b for b in group if mapping[b] < 0], free, strict=True):
            mapping[b] = m
    return mapping[owner]
