"""The operator's half of the fenced two-epoch handoff: published plan + target + Leases -> the
next plan to publish.

Stage: after `target.compute_target`, before the controller writes the plan ConfigMap. Pure: the
caller reads the Leases, judges expiry with a `LeaseClock`, fences what `identities_to_fence`
names, and publishes `next_plan(...).published` when `changed`.

The promise, in priority order:
1. never two holders: no partition is held by two identities at once, whatever plans they have
   applied, acknowledged or skipped, as long as a replica stops consuming when it cannot renew
   its Lease within the lease duration (the runtime's self-fencing) and only ever applies newer
   plans;
2. epochs are monotonic: a new plan always has a higher epoch than the previous one and than
   every epoch any Lease mentions (a plan ConfigMap recreated from scratch still goes forward);
3. progress: once every replica applies and acknowledges each plan, the published assignment
   reaches the target within two epochs (a moving partition leaves first, enters next).

Rules of `next_plan`, in the order they are applied (E = previous epoch, N = the new one):
1. A Lease whose `released_through` R >= e voids its holder's holdings under plans <= e (it
   released everything on exit, or the operator fenced it). `expired` identities count as
   R = F >= E (`fence_epoch`): the caller fenced them before calling.
2. A pending release (p left A's set in plan s) settles when A acknowledged an epoch >= s or
   R_A >= s - 1; p is then free.
3. p in A's set that the target gives elsewhere (or to nobody) leaves A's set in N and becomes a
   pending release (A, N), unless R_A >= E: then A holds nothing and p is free at once.
4. p enters its target owner B's set in N when it is free; a pending release of p from B itself
   simply returns it to B (only B is involved).
5. Publish N only when something changed, or when an identity of the target has R >= E (it
   applies only plans newer than R, so it needs one to consume again).

Resync (docs/design.md §7): the rules above are sound only when the plan read is the newest plan
of an unbroken lineage, because they grant from what that plan says each identity holds. The
plan read is *not* to be trusted when it was lost (the ConfigMap deleted or unreadable), or a
Lease shows a newer epoch than it (acknowledged or voided: an older plan was restored, or another
operator published meanwhile), or a live report holds a partition that the plan neither gives to
that identity nor has it releasing (a hand edit, or two writers). In an unbroken lineage none of
these can happen: a partition leaves an identity's set only as a pending release, which settles
only once the identity acknowledged (its report then no longer holds it) or was voided (its
report is then not live). Then `next_plan` publishes a *resync* plan N instead, with
`barrier = N`: each identity keeps only what it reports holding and the target still gives it
(it gains nothing), nothing is releasing, and nothing is granted until every identity that may
hold something (a held Lease or a live report) acknowledged N or was voided through N - 1. Then
every such identity holds exactly its set in N (a replica drops what a plan does not give it,
and it cannot apply a lost plan older than N any more), so N is an unbroken lineage again and
the rules above resume from it. Resync costs one epoch and one round of acknowledgements; it
never grants a partition that a live identity may still hold.

Worked example: plan 4 = {A: [t-0, t-1], B: []}, target {A: [t-0], B: [t-1]}. Plan 5 = {A: [t-0],
B: []}, t-1 releasing from A since 5. A applies 5 (stops t-1, commits, releases) and acks 5; the
next call settles the release and publishes plan 6 = {A: [t-0], B: [t-1]}. Had A's Lease expired
instead, the operator fences it through 5, and plan 6 is the same.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from groupops.model import MemberId, Plan, TopicPartition
from groupops.planner.plan_format import LeaseRecord, PublishedPlan, Release

__all__ = [
    "DEFAULT_LEASE_DURATION_S",
    "HandoffError",
    "HandoffResult",
    "HeardThrough",
    "LeaseClock",
    "MemberState",
    "Move",
    "barrier_pending",
    "fence_epoch",
    "identities_to_fence",
    "lineage_broken",
    "next_plan",
    "predicted_plan",
]


class HandoffError(ValueError):
    """The target cannot be published: it gives one partition to two identities."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberState:
    """One identity's Lease as the handoff reads it: the epoch it acknowledged, what it reports
    owning then, and the epoch through which its holdings are void (see the module's rule 1)."""

    acked_epoch: int | None = None
    partitions: tuple[TopicPartition, ...] = ()
    released_through: int | None = None
    held: bool = True
    """Whether a process holds the Lease now. An unheld Lease that never had a live report
    (the replica never started) cannot hold anything and never holds a resync barrier back."""

    @classmethod
    def from_record(cls, record: LeaseRecord, *, held: bool = True) -> MemberState:
        return cls(
            acked_epoch=record.acked_epoch,
            partitions=record.partitions,
            released_through=record.released_through,
            held=held,
        )

    def void_through(self) -> int:
        return -1 if self.released_through is None else self.released_through

    def acked(self) -> int:
        return -1 if self.acked_epoch is None else self.acked_epoch

    def report_is_live(self) -> bool:
        """Whether `partitions` may still be held: the report is newer than the last void."""
        return self.acked_epoch is not None and self.acked() > self.void_through()

    def passed_barrier(self, barrier: int) -> bool:
        """Holds nothing beyond its set in the resync plan `barrier`: it acknowledged that plan
        (or a newer one), it was voided through the plan before, or it could never hold."""
        if self.acked() >= barrier or self.void_through() >= barrier - 1:
            return True
        return not self.held and not self.report_is_live()


@dataclass(frozen=True, slots=True, kw_only=True)
class Move:
    """A release that settled: `partition` left `source`; `target` is where the target plan puts
    it (None: nowhere). `duration_s` is wall-clock time since the release was published."""

    partition: TopicPartition
    source: MemberId
    target: MemberId | None
    duration_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class HandoffResult:
    """`published` is the plan to publish (the previous one, same epoch, when `changed` is
    False); `completed` the releases that settled in this step; `waiting` maps every partition
    still being released to the identity the plan waits for."""

    published: PublishedPlan
    changed: bool
    completed: tuple[Move, ...] = ()
    waiting: Mapping[TopicPartition, MemberId] = field(default_factory=dict)
    resync: str | None = None
    """Why the published plan is a resync plan (None: it is not one)."""


def next_plan(
    previous: PublishedPlan,
    target: Mapping[MemberId, Sequence[TopicPartition]],
    members: Mapping[MemberId, MemberState],
    *,
    expired: Collection[MemberId] = (),
    strategy: str | None = None,
    now: float = 0.0,
) -> HandoffResult:
    """The next plan towards `target` (every identity that takes part, possibly with an empty
    list). `members` holds the Lease of each identity that has one; `expired` names identities
    the caller has just fenced through `fence_epoch(previous, members)`. `now` is wall-clock
    seconds, used only to time the moves. Raises HandoffError when `target` gives a partition twice."""
    epoch = previous.epoch
    states = _effective_states(members, expired, fence_epoch(previous, members))
    target_owner = _target_owners(target)
    new_epoch = 1 + max([epoch, *(max(s.acked(), s.void_through()) for s in states.values())])
    next_strategy = previous.plan.strategy if strategy is None else strategy
    broken = lineage_broken(previous, states)
    if broken is not None or barrier_pending(previous, states):
        reason = broken or f"waiting for every replica to acknowledge the resync plan {previous.barrier}"
        return _resync(
            previous,
            target,
            states,
            new_epoch=new_epoch,
            strategy=next_strategy,
            reason=reason,
            lineage_intact=broken is None,
        )

    # Rule 2: settle pending releases.
    releasing: dict[TopicPartition, Release] = {}
    completed: list[Move] = []
    for tp, release in previous.releasing.items():
        if _settled(release, states.get(release.identity)):
            completed.append(
                Move(
                    partition=tp,
                    source=release.identity,
                    target=target_owner.get(tp),
                    duration_s=max(0.0, now - release.since),
                )
            )
        else:
            releasing[tp] = release

    # Rule 3: partitions leaving their owner.
    sets: dict[MemberId, set[TopicPartition]] = {identity: set() for identity in target}
    for identity, partitions in previous.plan.assignment.items():
        void = states.get(identity, _NO_LEASE).void_through() >= epoch
        for tp in partitions:
            if target_owner.get(tp) == identity:
                sets[identity].add(tp)
            elif not void:
                releasing[tp] = Release(identity=identity, epoch=new_epoch, since=now)

    # Rule 4: free partitions enter their target owner.
    for tp, owner in target_owner.items():
        if tp in sets[owner]:
            continue
        pending = releasing.get(tp)
        if pending is None:
            sets[owner].add(tp)
        elif pending.identity == owner:
            del releasing[tp]
            sets[owner].add(tp)

    assignment = {identity: tuple(sorted(sets[identity])) for identity in sorted(target)}
    waiting = {tp: release.identity for tp, release in sorted(releasing.items())}
    needs_new_epoch = any(states.get(identity, _NO_LEASE).void_through() >= epoch for identity in target)
    changed = (
        epoch == 0
        or needs_new_epoch
        or assignment != _normalised(previous.plan.assignment)
        or releasing != dict(previous.releasing)
        or next_strategy != previous.plan.strategy
        or previous.barrier is not None
    )
    if not changed:
        return HandoffResult(published=previous, changed=False, completed=tuple(completed), waiting=waiting)
    published = PublishedPlan(
        plan=Plan(epoch=new_epoch, strategy=next_strategy, assignment=assignment), releasing=releasing
    )
    _check(published)
    return HandoffResult(published=published, changed=True, completed=tuple(completed), waiting=waiting)


def lineage_broken(previous: PublishedPlan, members: Mapping[MemberId, MemberState]) -> str | None:
    """Why `previous` cannot be trusted as the newest plan of an unbroken lineage (None: it can).
    See "Resync" in the module docstring."""
    if previous.lost:
        return f"the plan of epoch {previous.epoch} could not be read"
    epoch = previous.epoch
    for identity, state in sorted(members.items()):
        newest = max(state.acked(), state.void_through())
        if newest > epoch:
            return f"{identity}'s Lease mentions epoch {newest}, newer than the plan read ({epoch})"
        if not state.report_is_live():
            continue
        if previous.barrier is not None and state.acked() < previous.barrier:
            continue  # a report from before the resync: what its barrier waits for
        own = set(previous.plan.assignment.get(identity, ()))
        for tp in state.partitions:
            release = previous.releasing.get(tp)
            if tp not in own and (release is None or release.identity != identity):
                return (
                    f"{identity} reports holding {tp}, which plan {epoch} neither gives it nor has "
                    "it releasing"
                )
    return None


def barrier_pending(previous: PublishedPlan, members: Mapping[MemberId, MemberState]) -> bool:
    """A resync plan whose barrier some identity has not passed yet."""
    barrier = previous.barrier
    return barrier is not None and not all(state.passed_barrier(barrier) for state in members.values())


def _resync(
    previous: PublishedPlan,
    target: Mapping[MemberId, Sequence[TopicPartition]],
    states: Mapping[MemberId, MemberState],
    *,
    new_epoch: int,
    strategy: str,
    reason: str,
    lineage_intact: bool,
) -> HandoffResult:
    """The resync plan (see the module docstring): every identity keeps only what it reports
    holding and its target still gives it; nothing releasing; a barrier at its own epoch."""
    sets: dict[MemberId, tuple[TopicPartition, ...]] = {}
    for identity in sorted(target):
        state = states.get(identity, _NO_LEASE)
        reported = set(state.partitions) if state.report_is_live() else set()
        sets[identity] = tuple(sorted(reported.intersection(target[identity])))
    claimed: dict[TopicPartition, MemberId] = {}
    for identity, partitions in sets.items():  # two live reports of one partition: the first keeps it
        kept = []
        for tp in partitions:
            if tp not in claimed:
                claimed[tp] = identity
                kept.append(tp)
        sets[identity] = tuple(kept)
    waiting = {
        tp: identity
        for identity, state in sorted(states.items())
        if state.report_is_live()
        for tp in state.partitions
        if claimed.get(tp) != identity
    }
    unchanged = (
        previous.barrier is not None
        and previous.barrier == previous.epoch
        and not previous.lost
        and not previous.releasing
        and _normalised(sets) == _normalised(previous.plan.assignment)
        and strategy == previous.plan.strategy
        and lineage_intact
    )
    if unchanged:
        return HandoffResult(published=previous, changed=False, waiting=waiting, resync=reason)
    published = PublishedPlan(
        plan=Plan(epoch=new_epoch, strategy=strategy, assignment=sets), releasing={}, barrier=new_epoch
    )
    _check(published)
    return HandoffResult(published=published, changed=True, waiting=waiting, resync=reason)


def predicted_plan(
    previous: PublishedPlan,
    target: Mapping[MemberId, Sequence[TopicPartition]],
    *,
    strategy: str | None = None,
) -> HandoffResult:
    """`delivery: native`: Kafka's generations fence the partitions, so the prediction is
    published in one epoch, with nothing released first (nobody consumes by it)."""
    _target_owners(target)  # a partition given twice is a bug, as in next_plan
    assignment = {identity: tuple(sorted(tps)) for identity, tps in sorted(target.items())}
    next_strategy = previous.plan.strategy if strategy is None else strategy
    changed = (
        previous.epoch == 0
        or bool(previous.releasing)
        or assignment != _normalised(previous.plan.assignment)
        or next_strategy != previous.plan.strategy
    )
    if not changed:
        return HandoffResult(published=previous, changed=False)
    published = PublishedPlan(
        plan=Plan(epoch=previous.epoch + 1, strategy=next_strategy, assignment=assignment)
    )
    _check(published)
    return HandoffResult(published=published, changed=True)


_NO_LEASE = MemberState()


def _effective_states(
    members: Mapping[MemberId, MemberState], expired: Collection[MemberId], epoch: int
) -> dict[MemberId, MemberState]:
    states = dict(members)
    for identity in expired:
        state = states.get(identity, _NO_LEASE)
        states[identity] = MemberState(
            acked_epoch=state.acked_epoch,
            partitions=state.partitions,
            released_through=max(epoch, state.void_through()),
        )
    return states


def _target_owners(target: Mapping[MemberId, Sequence[TopicPartition]]) -> dict[TopicPartition, MemberId]:
    owners: dict[TopicPartition, MemberId] = {}
    for identity, partitions in target.items():
        for tp in partitions:
            if tp in owners and owners[tp] != identity:
                raise HandoffError(f"target gives {tp} to both {owners[tp]} and {identity}")
            owners[tp] = identity
    return owners


def _settled(release: Release, state: MemberState | None) -> bool:
    if state is None:
        return False
    return state.acked() >= release.epoch or state.void_through() >= release.epoch - 1


def _normalised(
    assignment: Mapping[MemberId, Iterable[TopicPartition]],
) -> dict[MemberId, tuple[TopicPartition, ...]]:
    return {identity: tuple(sorted(tps)) for identity, tps in sorted(assignment.items())}


def _check(published: PublishedPlan) -> None:
    """A broken promise here is a bug in this module: fail loudly rather than publish it."""
    seen: dict[TopicPartition, MemberId] = {}
    for identity, partitions in published.plan.assignment.items():
        for tp in partitions:
            if tp in seen:
                raise AssertionError(f"handoff bug: {tp} in the sets of {seen[tp]} and {identity}")
            if tp in published.releasing:
                raise AssertionError(f"handoff bug: {tp} in {identity}'s set while being released")
            seen[tp] = identity


def fence_epoch(previous: PublishedPlan, members: Mapping[MemberId, MemberState]) -> int:
    """The epoch to fence through: the newest one the plan or any Lease mentions, so that a fence
    voids even a report newer than a stale plan read (and the next plan is still newer)."""
    return max([previous.epoch, *(max(s.acked(), s.void_through()) for s in members.values())])


def identities_to_fence(
    previous: PublishedPlan,
    members: Mapping[MemberId, MemberState],
    judged_expired: Iterable[MemberId],
) -> list[MemberId]:
    """The identities the operator must fence (compare-and-swap `fence_annotations(F)` onto
    their Lease, F = `fence_epoch(previous, members)`) before calling `next_plan` with them as
    `expired`: those judged expired that may hold something (a non-empty set, a pending release,
    a live report, a held Lease a resync barrier waits for) and are not yet void through F.
    Sorted."""
    through = fence_epoch(previous, members)
    holders = {identity for identity, tps in previous.plan.assignment.items() if tps}
    holders.update(release.identity for release in previous.releasing.values())
    holders.update(
        identity for identity, state in members.items() if state.report_is_live() and state.partitions
    )
    if previous.barrier is not None:
        holders.update(
            identity for identity, state in members.items() if not state.passed_barrier(previous.barrier)
        )
    return sorted(
        identity
        for identity in set(judged_expired) & holders
        if members.get(identity, _NO_LEASE).void_through() < through
    )


DEFAULT_LEASE_DURATION_S = 4
"""Seconds a replica's Lease lives without renewal (operator and runtime default): a crashed
replica's partitions move to another about this long after its last renewal."""


class HeardThrough:
    """How far a hearing source that reports late has told its observers every heartbeat it
    answered: a monotonic moment, moved forward by each report they apply (the answering process,
    docs/design.md §7.5 "silence is judged only as far as the answerer has reported"). A clock
    that follows it judges no silence past that moment, whatever the time."""

    __slots__ = ("moment",)

    def __init__(self, moment: float = float("-inf")) -> None:
        self.moment = moment

    def advance(self, moment: float) -> None:
        self.moment = max(self.moment, moment)


class LeaseClock:
    """Judges Lease expiry by the observer's own clock, as leader election does: a Lease is
    expired when the observer has seen it unchanged (same renewTime or resourceVersion, or still
    absent) for its duration. A fresh observer (an operator that just restarted) waits a full
    duration before judging anyone, which is what keeps a restart safe. `now` is monotonic seconds.

    An observer may also note each Lease's `lifetime` (its duration while held, None when nobody
    holds it): `next_expiry` then says when the next held Lease runs out if nothing changes, so
    a controller can wake exactly then instead of polling. Two observers of one clock (a watch
    and a periodic read) may race on one entry; the loser only records a later change, which can
    delay a judgement of expiry, never bring one forward.

    A heartbeat the observer answered (`hear`, docs/design.md §7.5) counts as a change it saw at
    that moment: the Lease is silent only when neither its version nor a heartbeat moved for the
    duration. Heartbeats heard through a source that reports late (`follow`) count only up to
    what it has reported: the silence is judged up to `judged_through(now)`, not `now`, so a late
    report never makes a live holder look silent.
    """

    def __init__(self) -> None:
        self._seen: dict[MemberId, tuple[str | None, float]] = {}
        self._heard: dict[MemberId, float] = {}
        self._lifetimes: dict[MemberId, float] = {}
        self._through: HeardThrough | None = None

    def follow(self, source: HeardThrough | None) -> None:
        """Judge silence only as far as `source` has reported (None: up to `now`)."""
        self._through = source

    def judged_through(self, now: float) -> float:
        """The latest moment this clock can judge a silence at, when asked at `now`."""
        through = self._through
        return now if through is None else min(now, through.moment)

    def observe(
        self, identity: MemberId, version: str | None, now: float, *, lifetime: float | None = None
    ) -> float:
        """Record the Lease's version (None: no Lease) as read at `now`; return when this
        observer first saw that version."""
        seen = self._seen.get(identity)
        if seen is None or seen[0] != version:
            seen = (version, now)
            self._seen[identity] = seen
        if lifetime is None:
            self._lifetimes.pop(identity, None)
        else:
            self._lifetimes[identity] = lifetime
        return seen[1]

    def hear(self, identity: MemberId, now: float) -> None:
        """A heartbeat of the Lease's holder, answered at `now` (any thread)."""
        if now > self._heard.get(identity, float("-inf")):
            self._heard[identity] = now

    def heard_at(self, identity: MemberId) -> float | None:
        return self._heard.get(identity)

    def _last_change(self, identity: MemberId) -> float | None:
        seen = self._seen.get(identity)
        heard = self._heard.get(identity)
        if seen is None:
            return heard
        return seen[1] if heard is None else max(seen[1], heard)

    def unchanged_for(self, identity: MemberId, now: float) -> float | None:
        last = self._last_change(identity)
        return None if last is None else max(0.0, self.judged_through(now) - last)

    def expired(self, identity: MemberId, now: float, duration_s: float) -> bool:
        unchanged = self.unchanged_for(identity, now)
        return unchanged is not None and unchanged >= duration_s

    def next_expiry(self, after: float) -> float | None:
        """The earliest moment later than `after` at which a held Lease, unchanged since, is
        judged expired; None when no held Lease would expire after `after`."""
        moments = []
        for identity, lifetime in list(self._lifetimes.items()):
            last = self._last_change(identity)
            if last is not None and last + lifetime > after:
                moments.append(last + lifetime)
        return min(moments, default=None)

    def forget(self, identity: MemberId) -> None:
        self._seen.pop(identity, None)
        self._heard.pop(identity, None)
        self._lifetimes.pop(identity, None)
