"""`balanced`, steps 1-2: a count-balanced start, fresh or from the owned partitions.

Called only by `groupops.assign.balanced`. Every function here works on an owner array (member
index per partition, -1 while unassigned) and keeps `loads` (sum of lag per member) in step.

Count balance means the count vector is *decreasingly minimal*: no chain of hand-overs can take
a partition from a member holding c to one holding c - 2 or fewer, where a hand-over moves a
partition to another subscriber of its topic (member i hands a t-partition to j, j hands a
u-partition to k, ...). With equal subscriptions that is "every count within one of P / n". It is
also the count vector Kafka's sticky assignors call balanced, strengthened from single moves to
chains; all such vectors are permutations of one another (Frank and Murota, discrete decreasing
minimisation on M-convex sets), so two assignments are equally count-balanced exactly when their
sorted count vectors are equal, which is how `balanced` compares candidates.

- `fill_lpt` (equal subscriptions): longest-processing-time first under count limits: partitions
  in decreasing lag, each to the member with room left that would finish it first, lowest
  (lag + partition) / capacity. A member that took a big partition early sits out until the
  others catch up and, its room unused, ends up with the smallest partitions - which dealing
  strict rounds (one per member per round, as `lag` does per topic) cannot do: on heavy-tailed
  lag, rounds leave the member with the largest partition ~50 % above the bound. Dealt in
  batches of half the members with room (numpy), or one by one from a heap when few have room.
- `count_only` + `split_by_class` (unequal subscriptions): quotas from a lag-blind water-filling
  per topic made balanced by `balance_counts`; each topic's partitions then split between its
  subscription classes in those numbers, interleaved by lag; `fill_lpt` then runs per class.
- `fill_greedy` (sticky start, unequal subscriptions): each unowned partition to the subscriber
  with the fewest partitions, then the lowest (lag + partition) / capacity; one heap per class.
- `balance_counts`: hand-over chains from the fullest members to the emptiest reachable ones
  until none is left (breadth-first search over members and topics, by subscription class).
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from groupops.assign.balanced_problem import BoolArray, FloatArray, IntArray, Problem

__all__ = [
    "balance_counts",
    "count_only",
    "fill_greedy",
    "fill_lpt",
    "order_by_lag",
    "pick_to_move",
    "split_by_class",
]

# Below this many members with room, a Python heap beats a numpy call per batch.
_NUMPY_BATCH_MIN_MEMBERS = 48


def order_by_lag(problem: Problem, ids: IntArray) -> IntArray:
    """`ids` in decreasing lag, equal lag in increasing global index (topic, then partition)."""
    ids = np.sort(ids)
    return ids[np.argsort(-problem.lag[ids], kind="stable")]


def fill_lpt(problem: Problem, owner: IntArray, loads: FloatArray, pool: IntArray, room: IntArray) -> None:
    """Give every partition of `pool` (in decreasing lag) to a member with room left, the one that
    would finish it first: lowest (lag + partition) / capacity, ties to the lower index."""
    room = room.copy()
    capacity = problem.capacity
    position = 0
    while position < len(pool):
        takers = np.flatnonzero(room > 0)
        if len(takers) == 0:
            raise AssertionError("balanced: partitions left but no member has room")
        if len(takers) < _NUMPY_BATCH_MIN_MEMBERS:
            _lpt_in_python(problem, owner, loads, pool[position:], room)
            return
        chunk = pool[position : position + max(1, len(takers) // 2)]
        finish = (loads[takers] + problem.lag[chunk[0]]) / capacity[takers]
        chosen = takers[np.lexsort((takers, finish))[: len(chunk)]]
        owner[chunk] = chosen
        loads[chosen] += problem.lag[chunk]
        room[chosen] -= 1
        position += len(chunk)


def _lpt_in_python(
    problem: Problem, owner: IntArray, loads: FloatArray, pool: IntArray, room: IntArray
) -> None:
    """`fill_lpt` one partition at a time from a heap keyed by lag per capacity."""
    capacity = problem.capacity.tolist()
    load_list = loads.tolist()
    room_list = room.tolist()
    heap = [(load_list[i] / capacity[i], i) for i, left in enumerate(room_list) if left > 0]
    heapq.heapify(heap)
    chosen: list[int] = []
    for lag in problem.lag[pool].tolist():
        _, member = heap[0]
        chosen.append(member)
        load_list[member] += lag
        room_list[member] -= 1
        if room_list[member]:
            heapq.heapreplace(heap, (load_list[member] / capacity[member], member))
        else:
            heapq.heappop(heap)
    owner[pool] = np.array(chosen, dtype=np.int64)
    loads[:] = load_list


def fill_greedy(problem: Problem, owner: IntArray, loads: FloatArray, pool: IntArray) -> None:
    """Each partition of `pool` (in decreasing lag) to the subscriber of its topic with the fewest
    partitions, then the lowest (lag + partition) / capacity, then the lower index. Python, one
    heap per subscription class: for the few partitions a sticky start leaves unowned."""
    capacity = problem.capacity.tolist()
    load_list = loads.tolist()
    count_list = problem.counts(owner).tolist()
    heaps: list[list[tuple[int, float, int]]] = [[] for _ in range(problem.class_topics.shape[0])]
    for i in problem.active().tolist():
        heaps[int(problem.class_of[i])].append((count_list[i], load_list[i] / capacity[i], i))
    for heap in heaps:
        heapq.heapify(heap)
    classes_of_topic = [
        np.flatnonzero(problem.class_topics[:, t]).tolist() for t in range(len(problem.topics))
    ]
    chosen: list[int] = []
    for topic, lag in zip(problem.topic_of[pool].tolist(), problem.lag[pool].tolist(), strict=True):
        best, best_key = -1, (0, 0.0, 0)
        for k in classes_of_topic[topic]:
            count, _, member = heaps[k][0]
            key = (count, (load_list[member] + lag) / capacity[member], member)
            if best < 0 or key < best_key:
                best, best_key = k, key
        member = best_key[2]
        chosen.append(member)
        load_list[member] += lag
        count_list[member] += 1
        heapq.heapreplace(heaps[best], (count_list[member], load_list[member] / capacity[member], member))
    if chosen:
        owner[pool] = np.array(chosen, dtype=np.int64)
    loads[:] = load_list


def count_only(problem: Problem) -> IntArray:
    """A count-balanced owner array that ignores lag: topics with the fewest subscribers first,
    each topic's partitions water-filled onto its subscribers with the fewest partitions (ties to
    the lower index), then `balance_counts`. Numpy per topic; for quotas, not for placement."""
    owner = np.full(problem.partition_count, -1, dtype=np.int64)
    counts = np.zeros(problem.member_count, dtype=np.int64)
    eligible = [_subscribers(problem, t) for t in range(len(problem.topics))]
    for t in sorted(range(len(problem.topics)), key=lambda t: (len(eligible[t]), t)):
        members = eligible[t]
        size = int(problem.offsets[t + 1] - problem.offsets[t])
        held = counts[members]
        low, high = int(held.min()), int(held.min()) + size
        while low < high:  # the highest level L with sum(max(0, L - held)) <= size
            middle = (low + high + 1) // 2
            if int(np.maximum(0, middle - held).sum()) <= size:
                low = middle
            else:
                high = middle - 1
        gives = np.maximum(0, low - held)
        left = size - int(gives.sum())
        at_level = np.flatnonzero(held + gives == low)
        gives[at_level[:left]] += 1
        owner[problem.offsets[t] : problem.offsets[t + 1]] = np.repeat(members, gives)
        counts[members] += gives
    balance_counts(problem, owner, np.zeros(problem.member_count, dtype=np.float64))
    return owner


def split_by_class(problem: Problem, quota_owner: IntArray) -> IntArray:
    """For each partition, the subscription class it goes to: as many of each topic per class as
    in `quota_owner`, the topic's partitions (in decreasing lag) interleaved between its classes
    in proportion, so each class gets its share of large and small ones."""
    classes = problem.class_of[quota_owner]
    target = np.empty(problem.partition_count, dtype=np.int64)
    for t in range(len(problem.topics)):
        begin, end = int(problem.offsets[t]), int(problem.offsets[t + 1])
        present, amounts = np.unique(classes[begin:end], return_counts=True)
        if len(present) == 1:
            target[begin:end] = present[0]
            continue
        slots = np.repeat(present, amounts)
        positions = np.concatenate([(np.arange(n) + 0.5) / n for n in amounts.tolist()])
        by_lag = begin + np.argsort(-problem.lag[begin:end], kind="stable")
        target[by_lag] = slots[np.lexsort((slots, positions))]
    return target


def _subscribers(problem: Problem, topic: int) -> IntArray:
    return np.flatnonzero(
        (problem.class_of >= 0) & problem.class_topics[np.maximum(problem.class_of, 0), topic]
    )


def pick_to_move(
    problem: Problem, loads: FloatArray, candidates: IntArray, *, giver: int, taker: int, k: int
) -> IntArray:
    """The k partitions of `candidates` (held by `giver`) best handed to `taker`: first those that
    cost no move (back to their previous owner, then not previously the giver's), then those
    closest to the lag that would even the two members out."""
    previous = problem.previous[candidates]
    cost = (previous == giver).astype(np.int64) - (previous == taker).astype(np.int64)
    c_giver, c_taker = problem.capacity[giver], problem.capacity[taker]
    even = max(0.0, (loads[giver] * c_taker - loads[taker] * c_giver) / (c_giver + c_taker)) / k
    distance = np.abs(problem.lag[candidates] - even)
    return candidates[np.lexsort((candidates, distance, cost))[:k]]


def balance_counts(problem: Problem, owner: IntArray, loads: FloatArray) -> None:
    """Hand partitions along chains until the count vector is decreasingly minimal (see module).

    Works tier by tier: from the members holding the most (M), a breadth-first search finds the
    members reachable by hand-overs; if one holds M - 2 or fewer, partitions flow to it along
    the path found and the search restarts. Otherwise the reachable set is closed (nothing it
    holds can leave it) and final, and the search goes on among the other members.
    """
    counts = problem.counts(owner)
    topic_count = len(problem.topics)
    members_of_class = [np.flatnonzero(problem.class_of == k) for k in range(problem.class_topics.shape[0])]
    classes_of_topic = [np.flatnonzero(problem.class_topics[:, t]).tolist() for t in range(topic_count)]
    held = _holdings(problem, owner)
    done = problem.class_of < 0
    while not done.all():
        remaining = ~done
        top = int(counts[remaining].max())
        sources = np.flatnonzero(remaining & (counts == top))
        parent, visited = _reachable(sources, held, classes_of_topic, members_of_class, remaining)
        low = np.flatnonzero(visited & (counts <= top - 2))
        if len(low) == 0:
            done |= visited
            continue
        target = int(low[np.lexsort((low, counts[low]))[0]])
        path: list[tuple[int, int, int]] = []
        node = target
        while node in parent:
            giver, topic = parent[node]
            path.append((giver, node, topic))
            node = giver
        path.reverse()
        amount = min([(top - int(counts[target])) // 2, *(held[g][t] for g, _, t in path)])
        for giver, taker, topic in path:
            begin, end = problem.offsets[topic], problem.offsets[topic + 1]
            mine = begin + np.flatnonzero(owner[begin:end] == giver)
            moved = pick_to_move(problem, loads, mine, giver=giver, taker=taker, k=amount)
            owner[moved] = taker
            shift = float(problem.lag[moved].sum())
            loads[giver] -= shift
            loads[taker] += shift
            held[giver][topic] -= amount
            if held[giver][topic] == 0:
                del held[giver][topic]
            held[taker][topic] = held[taker].get(topic, 0) + amount
        counts[path[0][0]] -= amount
        counts[target] += amount


def _holdings(problem: Problem, owner: IntArray) -> list[dict[int, int]]:
    """held[i][t]: how many partitions of topic t member i holds."""
    topic_count = max(1, len(problem.topics))
    pairs, numbers = np.unique(owner * topic_count + problem.topic_of, return_counts=True)
    holders = pairs // topic_count
    cuts = np.searchsorted(holders, np.arange(problem.member_count + 1))
    topics = (pairs % topic_count).tolist()
    amounts = numbers.tolist()
    return [
        dict(zip(topics[cuts[i] : cuts[i + 1]], amounts[cuts[i] : cuts[i + 1]], strict=True))
        for i in range(problem.member_count)
    ]


def _reachable(
    sources: IntArray,
    held: list[dict[int, int]],
    classes_of_topic: list[list[int]],
    members_of_class: list[IntArray],
    remaining: BoolArray,
) -> tuple[dict[int, tuple[int, int]], BoolArray]:
    """Breadth-first search over hand-overs; parent[j] = (giver, topic) of the first hand-over
    reaching j. A class is expanded once: all its members subscribe to the same topics, so once
    every class is expanded everything reachable is visited and the search stops."""
    visited = np.zeros(len(remaining), dtype=np.bool_)
    visited[sources] = True
    parent: dict[int, tuple[int, int]] = {}
    expanded: set[int] = set()
    queue = deque(sources.tolist())
    while queue and len(expanded) < len(members_of_class):
        giver = queue.popleft()
        for topic in sorted(held[giver]):
            for k in classes_of_topic[topic]:
                if k in expanded:
                    continue
                expanded.add(k)
                fresh = members_of_class[k][remaining[members_of_class[k]] & ~visited[members_of_class[k]]]
                visited[fresh] = True
                for member in fresh.tolist():
                    parent[member] = (giver, topic)
                    queue.append(member)
    return parent, visited
