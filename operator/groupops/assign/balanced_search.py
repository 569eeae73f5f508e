"""`balanced`, step 3: bounded local improvement of the most loaded member.

Called only by `groupops.assign.balanced`. Repeatedly takes the member with the largest lag per
capacity (a) and looks, among the few lightest members sharing a topic with it, then the few
holding the smallest partitions (b), for the
exchange that leaves max(a, b) lowest: a swap (x from a to b, y from b to a, x > y), or a single
move of x when a holds exactly one partition more than b (counts stay a permutation of each
other, so count balance is kept). Each exchange strictly lowers the sorted vector of member lags,
so the search ends. At a local optimum one compound step is tried: x from a to a partner b with
as many partitions, and the smallest partition of a member holding one more to a. The search
also stops at a target (the best max lag another candidate reached), at the lower bound, after
`max_steps`, or when the move budget is spent: an exchange costs one move per partition leaving
its previous owner and refunds one per partition returning to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from groupops.assign.balanced_problem import BoolArray, FloatArray, IntArray, Problem

__all__ = ["improve"]

# At most this many of the lightest members are tried as partners of the most loaded one per
# step; the search stops trying once an exchange brings it below the runner-up.
_PARTNERS = 6
# At a local optimum, at most this many members one partition fuller are tried as donors.
_DONORS = 64


@dataclass(frozen=True, slots=True)
class _Exchange:
    """An exchange with one partner: the resulting max(a, b), its move cost, the position of x in
    a's list and of y in b's list (-1: a single move, nothing comes back)."""

    result: float
    cost: int
    partner: int
    x_at: int
    y_at: int


@dataclass(frozen=True, slots=True)
class _Compound:
    """x (at x_at in a's list) from a to `partner`, z (at z_at in the donor's list) to a."""

    result: float
    partner: int
    x_at: int
    donor: int
    z_at: int


def improve(
    problem: Problem,
    owner: IntArray,
    *,
    target: float | None = None,
    floor: float = 0.0,
    budget: int | None = None,
    mind_moves: bool = False,
    max_steps: int,
) -> None:
    """Lower the max member lag of `owner` (changed in place) by exchanges, as the module says.

    target: stop once the max is at or below it. floor: stop at or below it (a lower bound).
    budget: the number of moves from the previous owners the result may have at most.
    mind_moves: prefer, between equally good exchanges, the one costing fewer moves. Off for the
    fresh candidates, so that they do not depend on `owned` at all (which keeps an unchanged
    group's answer unchanged: see `balanced`).
    """
    if len(problem.active()) < 2 or problem.partition_count == 0:
        return
    stop = max(floor, -np.inf if target is None else target)
    loads = problem.loads(owner)
    if float((loads / problem.capacity).max()) <= stop:
        return
    _Search(problem, owner, loads, budget=budget, mind_moves=mind_moves or budget is not None).run(
        stop, max_steps
    )


@dataclass
class _Search:
    problem: Problem
    owner: IntArray
    loads: FloatArray
    budget: int | None
    mind_moves: bool
    weighted: FloatArray = field(init=False)
    counts: IntArray = field(init=False)
    parts: list[IntArray] = field(init=False)
    by_lag: dict[int, IntArray] = field(init=False, default_factory=dict)
    partner_ok: BoolArray = field(init=False)
    partners_of_class: BoolArray = field(init=False)
    spent: int = field(init=False)
    smallest: FloatArray = field(init=False)

    def __post_init__(self) -> None:
        problem = self.problem
        self.weighted = self.loads / problem.capacity
        self.counts = problem.counts(self.owner)
        by_owner = np.argsort(self.owner, kind="stable")
        bounds = np.searchsorted(self.owner[by_owner], np.arange(problem.member_count + 1))
        self.parts = [by_owner[bounds[i] : bounds[i + 1]] for i in range(problem.member_count)]
        self.partner_ok = problem.class_of >= 0
        classes = problem.class_topics.astype(np.int64)
        shares_topic = (classes @ classes.T) > 0
        # Row c: the members a member of subscription class c may exchange with (fixed all along).
        self.partners_of_class = self.partner_ok[None, :] & shares_topic[:, np.maximum(problem.class_of, 0)]
        self.spent = problem.moves(self.owner)
        self.smallest = np.full(problem.member_count, np.inf)
        for member in np.flatnonzero(self.counts).tolist():
            self._refresh_smallest(member)

    def run(self, stop: float, max_steps: int) -> None:
        for _ in range(max_steps):
            heaviest = int(np.argmax(self.weighted))
            peak = float(self.weighted[heaviest])
            if peak <= stop:
                return
            best = self._best_exchange(heaviest, peak)
            if best is None:
                return
            if isinstance(best, _Compound):
                self._apply_compound(heaviest, best)
            else:
                self._apply(heaviest, best)

    def _best_exchange(self, heaviest: int, peak: float) -> _Exchange | _Compound | None:
        partners = self._partners(heaviest, self.weighted)
        if not partners:
            return None
        others = self.weighted.copy()
        others[heaviest] = -np.inf
        runner_up = float(others.max())
        best: _Exchange | None = None
        # The lightest members first; then those holding the smallest partitions, which matter
        # when a's lag is mostly one huge partition and only trading its others down helps.
        for partner in partners + self._partners(heaviest, self.smallest):
            found = self._exchange_with(heaviest, partner)
            if found is not None and (best is None or (found.result, found.cost) < (best.result, best.cost)):
                best = found
            if best is not None and best.result <= runner_up:
                break
        if best is None or best.result >= peak:
            return self._compound(heaviest, peak, partners)
        return best

    def _compound(self, a: int, peak: float, partners: list[int]) -> _Compound | None:
        """At a local optimum: a hands x to a partner b holding as many partitions as a, and a
        donor d holding one more hands a its smallest partition z (counts stay a permutation).
        The best such pair (x, d) over the partners and the donors with the smallest z."""
        problem = self.problem
        level = self.counts[a]
        donors = np.flatnonzero((self.counts == level + 1) & self.partner_ok)
        smallest: list[tuple[float, int, int]] = []
        for d in donors.tolist()[:_DONORS]:
            positions = self._sorted_positions(d)
            if not problem.uniform:
                ids = self.parts[d][positions]
                positions = positions[problem.class_topics[problem.class_of[a], problem.topic_of[ids]]]
            if len(positions):
                z_at = int(positions[0])
                smallest.append((float(problem.lag[self.parts[d][z_at]]), d, z_at))
        if not smallest:
            return None
        best: _Compound | None = None
        for z, d, z_at in sorted(smallest)[:_PARTNERS]:
            room_d = float(self.loads[d]) - z
            for b in partners:
                if self.counts[b] != level or b == d:
                    continue
                mine = self.parts[a]
                x_at = np.arange(len(mine))
                if not problem.uniform:
                    x_at = np.flatnonzero(problem.class_topics[problem.class_of[b], problem.topic_of[mine]])
                x = problem.lag[mine[x_at]]
                result = np.maximum(
                    np.maximum(
                        (float(self.loads[a]) - x + z) / problem.capacity[a],
                        (self.loads[b] + x) / problem.capacity[b],
                    ),
                    room_d / problem.capacity[d],
                )
                valid = np.flatnonzero((x > z) & (result < peak))
                if len(valid) == 0:
                    continue
                pick = int(valid[np.lexsort((x_at[valid], result[valid]))[0]])
                found = _Compound(float(result[pick]), b, int(x_at[pick]), d, z_at)
                if best is None or found.result < best.result:
                    best = found
        if best is not None and self.mind_moves and self.budget is not None:
            x_id, z_id = self.parts[a][best.x_at], self.parts[best.donor][best.z_at]
            cost = int(
                self._cost(np.array([x_id]), a, best.partner)[0]
                + self._cost(np.array([z_id]), best.donor, a)[0]
            )
            if cost > self.budget - self.spent:
                return None
        return best

    def _partners(self, heaviest: int, by: FloatArray) -> list[int]:
        """The members lowest in `by` (then by index) sharing a topic with `heaviest`."""
        eligible = self.partners_of_class[self.problem.class_of[heaviest]].copy()
        eligible[heaviest] = False
        candidates = np.flatnonzero(eligible)
        # A stable sort of ascending indices breaks ties by index: a handful of members, so one
        # sort costs less than narrowing them down first.
        order = np.argsort(by[candidates], kind="stable")[:_PARTNERS]
        partners: list[int] = candidates[order].tolist()
        return partners

    def _refresh_smallest(self, member: int) -> None:
        held = self.parts[member]
        self.smallest[member] = float(self.problem.lag[held].min()) if len(held) else np.inf

    def _sorted_positions(self, member: int) -> IntArray:
        cached = self.by_lag.get(member)
        if cached is None:
            cached = np.argsort(self.problem.lag[self.parts[member]], kind="stable")
            self.by_lag[member] = cached
        return cached

    def _exchange_with(self, a: int, b: int) -> _Exchange | None:
        """The exchange between a (heaviest) and b leaving max(a, b) lowest, within the budget."""
        problem = self.problem
        c_a, c_b = float(problem.capacity[a]), float(problem.capacity[b])
        load_a, load_b = float(self.loads[a]), float(self.loads[b])
        room = (load_a / c_a) * c_b - load_b  # b may gain strictly less than this
        if room <= 0:
            return None
        even = (load_a * c_b - load_b * c_a) / (c_a + c_b)  # the shift that evens a and b out
        mine, theirs = self.parts[a], self.parts[b]
        y_at = self._sorted_positions(b)
        x_at: IntArray | None = None  # None: every partition of a
        if not problem.uniform:
            x_at = np.flatnonzero(problem.class_topics[problem.class_of[b], problem.topic_of[mine]])
            y_at = y_at[problem.class_topics[problem.class_of[a], problem.topic_of[theirs[y_at]]]]
        x_ids = mine if x_at is None else mine[x_at]
        n = len(x_ids)
        if n == 0:
            return None
        x_lag = problem.lag[x_ids]
        # Candidates in blocks of n, one per x: a swap with each of the two y nearest to evening
        # a and b out (positions in `y_at`), then the single move of x when counts allow it.
        shifts: list[FloatArray] = []
        nears: list[IntArray | None] = []
        if len(y_at):
            y_lag = problem.lag[theirs[y_at]]
            slot = np.searchsorted(y_lag, x_lag - even)
            for near in (np.maximum(slot - 1, 0), np.minimum(slot, len(y_lag) - 1)):
                shifts.append(x_lag - y_lag[near])
                nears.append(near)
        if self.counts[a] == self.counts[b] + 1:
            shifts.append(x_lag)
            nears.append(None)
        if not shifts:
            return None
        shift = np.concatenate(shifts) if len(shifts) > 1 else shifts[0]
        valid = (shift > 0) & (shift < room)
        cost: IntArray | None = None
        if self.mind_moves:
            x_cost = self._cost(x_ids, a, b)
            cost = np.concatenate(
                [x_cost if near is None else x_cost + self._cost(theirs[y_at[near]], b, a) for near in nears]
            )
            if self.budget is not None:
                valid &= cost <= self.budget - self.spent
        chosen = np.flatnonzero(valid)
        if len(chosen) == 0:
            return None
        result = np.maximum((load_a - shift[chosen]) / c_a, (load_b + shift[chosen]) / c_b)
        # Without costs, the first lowest result: what the stable sort by (result, cost) picks.
        pick = int(np.argmin(result)) if cost is None else int(np.lexsort((cost[chosen], result))[0])
        block, position = divmod(int(chosen[pick]), n)
        y_near = nears[block]
        return _Exchange(
            float(result[pick]),
            0 if cost is None else int(cost[chosen[pick]]),
            b,
            position if x_at is None else int(x_at[position]),
            -1 if y_near is None else int(y_at[y_near[position]]),
        )

    def _cost(self, ids: IntArray, giver: int, taker: int) -> IntArray:
        """Moves added by handing `ids` from giver to taker: +1 leaving its previous owner, -1 back."""
        previous = self.problem.previous[ids]
        cost: IntArray = (previous == giver).astype(np.int64) - (previous == taker).astype(np.int64)
        return cost

    def _apply_compound(self, a: int, compound: _Compound) -> None:
        """x from a to b, then z from the donor to a, as two single moves."""
        z_id = int(self.parts[compound.donor][compound.z_at])
        x_id = int(self.parts[a][compound.x_at])
        cost = self._cost(np.array([x_id]), a, compound.partner)[0]
        self._apply(a, _Exchange(0.0, int(cost), compound.partner, compound.x_at, -1))
        cost = self._cost(np.array([z_id]), compound.donor, a)[0]
        z_at = int(np.flatnonzero(self.parts[compound.donor] == z_id)[0])
        self._apply(compound.donor, _Exchange(0.0, int(cost), a, z_at, -1))

    def _apply(self, a: int, exchange: _Exchange) -> None:
        b = exchange.partner
        lag = self.problem.lag
        x = int(self.parts[a][exchange.x_at])
        self.owner[x] = b
        shift = float(lag[x])
        if exchange.y_at >= 0:
            y = int(self.parts[b][exchange.y_at])
            self.owner[y] = a
            shift -= float(lag[y])
            self.parts[a][exchange.x_at] = y
            self.parts[b][exchange.y_at] = x
        else:
            self.parts[a] = np.delete(self.parts[a], exchange.x_at)
            self.parts[b] = np.append(self.parts[b], x)
            self.counts[a] -= 1
            self.counts[b] += 1
        self.by_lag.pop(a, None)
        self.by_lag.pop(b, None)
        self._refresh_smallest(a)
        self._refresh_smallest(b)
        self.loads[a] -= shift
        self.loads[b] += shift
        capacity = self.problem.capacity
        self.weighted[a] = self.loads[a] / capacity[a]
        self.weighted[b] = self.loads[b] / capacity[b]
        self.spent += exchange.cost
