"""Never two holders, whatever happens: a model of replicas that lag, skip epochs, ack late,
lose their Lease, crash, restart and exit, against an operator that publishes `next_plan`, and
that may read a plan that is not the newest one: an older plan restored into the ConfigMap, a
hand edit, or no plan at all (the ConfigMap deleted).

The model's replicas follow the runtime's rules: apply only newer plans (and nothing at or
below a fence they have seen; a restarted process nothing below what its identity's Lease
acknowledged), stop everything when the Lease is lost, acknowledge what they
apply with one Lease write. The operator may fence a replica only once that replica has stopped
(the lease-duration timing the runtime guarantees); everything else may interleave freely.
Plans are kept in the order they were written, so two plans may share an epoch (a plan published
after a lost one); a replica applies any written plan newer than what it applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from groupops.model import MemberId, Plan, TopicPartition
from groupops.planner.handoff import MemberState, fence_epoch, identities_to_fence, next_plan
from groupops.planner.plan_format import PublishedPlan, empty_plan

IDENTITIES = [MemberId(f"g-{i}") for i in range(3)]
PARTITIONS = [TopicPartition("t", p) for p in range(3)]


@dataclass
class Replica:
    """One identity's process (or its absence) and its Lease as stored by the API server."""

    alive: bool = True
    has_lease: bool = True
    applied: int | None = None
    holdings: frozenset[TopicPartition] = frozenset()
    floor: int = -1
    seen: int = -1
    needs_reapply: bool = False
    lease: MemberState = field(default_factory=MemberState)


targets = st.lists(st.sampled_from([*IDENTITIES, None]), min_size=len(PARTITIONS), max_size=len(PARTITIONS))
identity_indexes = st.integers(min_value=0, max_value=len(IDENTITIES) - 1)
ACTIONS = [
    *["apply"] * 5,
    *["ack"] * 4,
    *["publish"] * 4,
    *["fence"] * 2,
    "lose",
    "renew",
    "crash",
    "exit",
    "restart",
    "stale",
]


class HandoffModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.history: list[PublishedPlan] = [empty_plan("model")]
        self.replicas = {identity: Replica() for identity in IDENTITIES}
        self.fenced_now: set[MemberId] = set()
        self.operator_reads: PublishedPlan | None = None
        """What the operator reads instead of the newest written plan (an edit or a lost plan)."""

    @property
    def current(self) -> PublishedPlan:
        return self.operator_reads if self.operator_reads is not None else self.history[-1]

    def the_plan_read_is_not_the_newest(self, kind: str, data: st.DataObject) -> None:
        """What the operator reads after the plan ConfigMap was deleted, replaced by an older plan,
        or edited by hand. The operator records each epoch in the policy's status before it
        writes the plan, and an edit breaks the plan's digest, so in every case it continues from
        a lost plan at the newest epoch it published. Replicas may apply a restored older plan."""
        newest = max(p.epoch for p in self.history)
        if kind == "restore":
            self.history.append(data.draw(st.sampled_from(self.history)))
        self.operator_reads = PublishedPlan(
            plan=Plan(epoch=newest, strategy="model", assignment={}), lost=newest > 0
        )
        self.fenced_now = set()

    def operator_publishes(self, owners: list[MemberId | None], extra: set[MemberId]) -> None:
        target: dict[MemberId, list[TopicPartition]] = {identity: [] for identity in extra}
        for tp, owner in zip(PARTITIONS, owners, strict=True):
            if owner is not None:
                target.setdefault(owner, []).append(tp)
        leases = {identity: r.lease for identity, r in self.replicas.items()}
        result = next_plan(self.current, target, leases, expired=self.fenced_now, now=0.0)
        if result.changed:
            seen = max(
                [
                    self.current.epoch,
                    *(max(r.lease.acked(), r.lease.void_through()) for r in self.replicas.values()),
                ]
            )
            assert result.published.epoch > seen
            self.history.append(result.published)
            self.fenced_now = set()
            self.operator_reads = None
        else:
            assert result.published is self.current

    def operator_fences_a_stopped_replica(self, index: int) -> None:
        identity = IDENTITIES[index]
        replica = self.replicas[identity]
        stopped = not replica.alive or not replica.has_lease
        leases = {i: r.lease for i, r in self.replicas.items()}
        if stopped and identity in identities_to_fence(self.current, leases, [identity]):
            replica.lease = MemberState(
                acked_epoch=replica.lease.acked_epoch,
                partitions=replica.lease.partitions,
                released_through=fence_epoch(self.current, leases),
            )
            self.fenced_now.add(identity)

    def replica_applies_a_newer_plan(self, index: int, data: st.DataObject) -> None:
        replica = self.replicas[IDENTITIES[index]]
        if not replica.alive or not replica.has_lease:
            return
        lowest = replica.floor + 1
        if replica.applied is not None:
            lowest = max(lowest, replica.applied if replica.needs_reapply else replica.applied + 1)
        candidates = [p for p in self.history if p.epoch >= lowest and p.epoch >= 1]
        if not candidates:
            return
        chosen = data.draw(st.sampled_from(candidates))
        replica.applied = chosen.epoch
        replica.seen = max(replica.seen, chosen.epoch)
        replica.needs_reapply = False
        replica.holdings = frozenset(chosen.plan.assignment.get(IDENTITIES[index], ()))

    def replica_acknowledges(self, index: int) -> None:
        replica = self.replicas[IDENTITIES[index]]
        if replica.alive and replica.has_lease and replica.applied is not None and not replica.needs_reapply:
            replica.lease = MemberState(
                acked_epoch=replica.applied,
                partitions=tuple(sorted(replica.holdings)),
                released_through=replica.lease.released_through,
            )

    def replica_cannot_renew_and_fences_itself(self, index: int) -> None:
        replica = self.replicas[IDENTITIES[index]]
        if replica.alive:
            replica.has_lease = False
            replica.holdings = frozenset()

    def replica_renews_again(self, index: int) -> None:
        replica = self.replicas[IDENTITIES[index]]
        if replica.alive and not replica.has_lease:
            replica.has_lease = True
            replica.floor = max(replica.floor, replica.lease.void_through())
            replica.needs_reapply = True

    def replica_crashes(self, index: int) -> None:
        replica = self.replicas[IDENTITIES[index]]
        replica.alive = False
        replica.holdings = frozenset()

    def replica_exits_gracefully(self, index: int, seen_latest: bool) -> None:
        replica = self.replicas[IDENTITIES[index]]
        if not replica.alive or not replica.has_lease:
            return
        if seen_latest:
            replica.seen = max(replica.seen, self.current.epoch)
        through = max(replica.seen, replica.applied or 0, replica.lease.void_through())
        replica.alive = False
        replica.holdings = frozenset()
        replica.lease = MemberState(
            acked_epoch=replica.lease.acked_epoch, partitions=(), released_through=through
        )

    def replica_restarts(self, index: int) -> None:
        replica = self.replicas[IDENTITIES[index]]
        if replica.alive:
            return
        lease = replica.lease
        floor = max(lease.void_through(), lease.acked() - 1)
        self.replicas[IDENTITIES[index]] = Replica(
            floor=floor,
            lease=MemberState(acked_epoch=None, partitions=(), released_through=None if floor < 0 else floor),
        )

    @rule(data=st.data())
    def something_happens(self, data: st.DataObject) -> None:
        """One event, weighted so that plans are applied and acknowledged often enough for
        handoffs to be in flight when the faults strike."""
        action = data.draw(st.sampled_from(ACTIONS))
        index = data.draw(identity_indexes)
        if action == "publish":
            self.operator_publishes(data.draw(targets), data.draw(st.sets(st.sampled_from(IDENTITIES))))
        elif action == "fence":
            self.operator_fences_a_stopped_replica(index)
        elif action == "apply":
            self.replica_applies_a_newer_plan(index, data)
        elif action == "ack":
            self.replica_acknowledges(index)
        elif action == "lose":
            self.replica_cannot_renew_and_fences_itself(index)
        elif action == "renew":
            self.replica_renews_again(index)
        elif action == "crash":
            self.replica_crashes(index)
        elif action == "exit":
            self.replica_exits_gracefully(index, data.draw(st.booleans()))
        elif action == "stale":
            self.the_plan_read_is_not_the_newest(
                data.draw(st.sampled_from(["restore", "edit", "lose"])), data
            )
        else:
            self.replica_restarts(index)

    @invariant()
    def no_partition_has_two_holders(self) -> None:
        holders: dict[TopicPartition, MemberId] = {}
        for identity, replica in self.replicas.items():
            for tp in replica.holdings:
                assert tp not in holders, f"{tp} held by {holders[tp]} and {identity}"
                holders[tp] = identity

    @invariant()
    def the_published_plan_gives_each_partition_once(self) -> None:
        owners = [tp for tps in self.current.plan.assignment.values() for tp in tps]
        assert len(owners) == len(set(owners))
        assert not set(owners) & set(self.current.releasing)


HandoffModel.TestCase.settings = settings(
    max_examples=400, stateful_step_count=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestNeverTwoHolders = HandoffModel.TestCase


@st.composite
def cooperative_targets(draw: st.DrawFn) -> list[dict[MemberId, list[TopicPartition]]]:
    result = []
    for owners in draw(st.lists(targets, min_size=1, max_size=5)):
        target: dict[MemberId, list[TopicPartition]] = {identity: [] for identity in IDENTITIES}
        for tp, owner in zip(PARTITIONS, owners, strict=True):
            if owner is not None:
                target[owner].append(tp)
        result.append(target)
    return result


@settings(max_examples=200, deadline=None)
@given(cooperative_targets())
def test_cooperative_replicas_reach_every_target_within_two_epochs(
    sequence: list[dict[MemberId, list[TopicPartition]]],
) -> None:
    published = empty_plan("model")
    leases: dict[MemberId, MemberState] = {}
    for target in sequence:
        for _ in range(2):
            published = next_plan(published, target, leases).published
            leases = {
                identity: MemberState(
                    acked_epoch=published.epoch, partitions=published.plan.assignment[identity]
                )
                for identity in IDENTITIES
            }
        assert {i: list(tps) for i, tps in published.plan.assignment.items()} == target
        assert published.releasing == {}
        assert not next_plan(published, target, leases).changed
