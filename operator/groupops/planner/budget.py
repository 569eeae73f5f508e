"""The disruption budget of one Kafka cluster: how many policies may move partitions at once and
how many partitions the fleet may move per minute, worst-off groups first.

Stage: pure planner core, as a PodDisruptionBudget is for evictions. The controller keeps one
`DisruptionBudget` per ConsumerGroupCluster that sets a budget (`controller/clusters.py`); each
policy's plan step (`controller/decide.py`) asks it before publishing a rebalance the policy
chose, and every run tells it whether the policy's published plan still has partitions in flight
(`settle`, `note_in_flight`). No clock and no I/O: callers pass the time (monotonic seconds).

The rules (docs/design.md §15):

1. *What it holds back*: only rebalances a policy chooses (lag, imbalance, the interval, uneven
   counts). Failover, drains, scaling, new partitions and spec changes are never held; they still
   count: a handoff is in flight and its moves are spent whatever started it (`note_in_flight`,
   `note_moves`), as evictions a PDB did not allow still count against it.
2. *Handoffs*: a policy is in flight from the plan that moved its partitions until a run sees its
   published plan with nothing releasing. A choice is granted only while fewer than
   `max_handoffs` other policies are in flight.
3. *Moves per minute*: the partitions moved over the last 60 s plus this rebalance's must stay
   within `max_partitions_per_minute`; a rebalance larger than the whole allowance is granted
   when nothing moved for 60 s (else it could never run; `maxMovesPerRebalance` is how a policy
   makes its steps smaller).
4. *Worst-off first*: a request is granted only when the waiting policies further from their
   goal (a larger `badness`; equal badness: the smaller key) leave room for it: a handoff slot
   and the minute's moves beyond what they asked for. Waiters ask again on each run; one that has
   not asked for `stale_after` seconds (deleted, settled, no longer wanting) is forgotten. When a
   handoff settles, only the waiters that now fit are woken (`next_up`).
5. *A new leader learns first*: until `learning_until` nothing is granted (requests queue as
   waiters). The budget lives in the leader's memory; a new leader learns which handoffs are in
   flight from each policy's first run (`note_in_flight`), which comes within a tick of leading.

Worked example (max_handoffs 2, 100 partitions per minute): a and b are granted 40 moves each at
t=0 (2 in flight, 80 moved). c (badness 3.0) asks for 30 moves at t=5: held (2 in flight). d
(badness 1.5) asks too: held. b settles at t=20: c asks again: 1 in flight, but 80 + 30 > 100:
held. At t=61 the first 80 have left the minute: c is granted (worst-off); d asks at t=62 and
waits for a's or c's handoff to settle.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["MOVE_WINDOW_S", "BudgetLimits", "BudgetUse", "DisruptionBudget", "Verdict"]

MOVE_WINDOW_S = 60.0
"""The window of `max_partitions_per_minute`."""

PolicyKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class BudgetLimits:
    """None: no limit of that kind."""

    max_handoffs: int | None = None
    max_partitions_per_minute: int | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """A request's answer; `reason` says why a held rebalance waits (None when granted)."""

    granted: bool
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class BudgetUse:
    """What status shows of the budget now."""

    in_flight: int
    moved_last_minute: int
    waiting: int
    limits: BudgetLimits


@dataclass(slots=True)
class _Waiter:
    badness: float
    asked_at: float
    moves: int = 0


@dataclass(slots=True)
class DisruptionBudget:
    """One cluster's budget. Not thread-safe: the caller holds a lock around each call."""

    limits: BudgetLimits
    stale_after: float = 30.0
    learning_until: float = 0.0
    _in_flight: dict[PolicyKey, float] = field(default_factory=dict)
    _moves: deque[tuple[float, int]] = field(default_factory=deque)
    _waiters: dict[PolicyKey, _Waiter] = field(default_factory=dict)
    _prepaid: dict[PolicyKey, int] = field(default_factory=dict)
    """Moves a grant counted ahead, per policy: its plans' hand-overs are not counted again."""

    def request(self, key: PolicyKey, *, moves: int, badness: float, now: float) -> Verdict:
        """A rebalance `key` chose, moving `moves` partitions: granted (its handoff is then in
        flight and its moves spent) or held, with the reason. `badness`: how far the policy is
        from its goal (time lag over its goal, else imbalance); larger goes first."""
        self._expire(now)
        reason = self._held_by(key, moves=moves, badness=badness, now=now)
        if reason is not None:
            self._waiters[key] = _Waiter(badness, now, moves)
            return Verdict(False, reason)
        self._waiters.pop(key, None)
        self._in_flight[key] = now
        self.note_moves(moves, now=now)
        self._prepaid[key] = self._prepaid.get(key, 0) + moves
        return Verdict(True)

    def note_in_flight(self, key: PolicyKey, *, now: float) -> None:
        """`key`'s published plan has partitions releasing (whatever started it)."""
        self._in_flight.setdefault(key, now)

    def note_moves(self, moves: int, *, now: float, key: PolicyKey | None = None) -> None:
        """Partitions a published plan of `key` handed over; what its grant counted ahead is not
        counted again."""
        prepaid = self._prepaid.get(key, 0) if key is not None else 0
        if key is not None and prepaid:
            self._prepaid[key] = prepaid - min(prepaid, moves)
            moves -= min(prepaid, moves)
        if moves > 0:
            self._moves.append((now, moves))

    def settle(self, key: PolicyKey) -> bool:
        """`key` has nothing in flight (its plan has nothing releasing, or it stopped). True when
        that freed a handoff: the waiters should ask again."""
        self._prepaid.pop(key, None)
        return self._in_flight.pop(key, None) is not None

    def forget(self, key: PolicyKey) -> bool:
        """`key` is gone (deleted, moved to another cluster, standing down)."""
        self._waiters.pop(key, None)
        return self.settle(key)

    def waiting(self, *, now: float) -> list[PolicyKey]:
        """The waiters, worst-off first."""
        self._expire(now)
        return sorted(self._waiters, key=lambda k: (-self._waiters[k].badness, k))

    def use(self, *, now: float) -> BudgetUse:
        self._expire(now)
        return BudgetUse(
            in_flight=len(self._in_flight),
            moved_last_minute=sum(count for _, count in self._moves),
            waiting=len(self._waiters),
            limits=self.limits,
        )

    def in_flight(self) -> frozenset[PolicyKey]:
        return frozenset(self._in_flight)

    def _held_by(self, key: PolicyKey, *, moves: int, badness: float, now: float) -> str | None:
        if now < self.learning_until:
            return (
                f"the operator leads since moments ago and learns the handoffs in flight for "
                f"{self.learning_until - now:.0f} s more"
            )
        limit = self.limits.max_handoffs
        others = len(self._in_flight) - (key in self._in_flight)
        if limit is not None and others >= limit:
            return f"{others} of {limit} handoffs in flight (disruptionBudget.maxHandoffsInFlight)"
        per_minute = self.limits.max_partitions_per_minute
        moved = sum(count for _, count in self._moves)
        if per_minute is not None and moved > 0 and moved + moves > per_minute:
            return (
                f"{moved} partitions moved in the last minute, {moves} more would pass {per_minute} "
                "(disruptionBudget.maxPartitionsMovedPerMinute)"
            )
        ahead = sorted(
            (-waiter.badness, other, waiter.moves)
            for other, waiter in self._waiters.items()
            if other != key and (-waiter.badness, other) < (-badness, key)
        )
        if not ahead:
            return None
        # Worse-off waiters go first only as far as the budget is theirs to use: with more free
        # slots (and moves) than they need, this request fits beside them.
        slots_left = None if limit is None else limit - others - len(ahead)
        moves_left = None if per_minute is None else per_minute - moved - sum(m for _, _, m in ahead)
        if (slots_left is not None and slots_left < 1) or (moves_left is not None and moves_left < moves):
            first = ahead[0][1]
            return (
                f"{len(ahead)} policies further from their goal go first ({first[0]}/{first[1]} the furthest)"
            )
        return None

    def next_up(self, *, now: float) -> list[PolicyKey]:
        """The waiters the budget would grant now, worst-off first: the ones to wake when a
        handoff settles (waking every waiter would have all of them ask, and all but these wait)."""
        self._expire(now)
        limit, per_minute = self.limits.max_handoffs, self.limits.max_partitions_per_minute
        slots = None if limit is None else limit - len(self._in_flight)
        moves = None if per_minute is None else per_minute - sum(count for _, count in self._moves)
        quiet_minute = moves is not None and moves == per_minute
        chosen: list[PolicyKey] = []
        for key in self.waiting(now=now):
            waiter = self._waiters[key]
            if slots is not None and slots < 1:
                break
            alone = quiet_minute and not chosen  # larger than the allowance: it runs alone (rule 3)
            if moves is not None and waiter.moves > moves and not alone:
                break
            chosen.append(key)
            slots = None if slots is None else slots - 1
            moves = None if moves is None else moves - waiter.moves
        return chosen

    def _expire(self, now: float) -> None:
        while self._moves and self._moves[0][0] <= now - MOVE_WINDOW_S:
            self._moves.popleft()
        for key in [k for k, w in self._waiters.items() if w.asked_at < now - self.stale_after]:
            del self._waiters[key]
