"""Moves are counted once per partition that changes hands (`publish.handed_over`): a two-epoch
handoff counts at the epoch that grants the partition to its new owner, not at the one that
releases it; a first assignment or a dropped partition is no move."""

from __future__ import annotations

from groupops.controller.publish import handed_over
from groupops.model import MemberId, Plan, TopicPartition
from groupops.planner.plan_format import PublishedPlan, Release

P0, P1, P2 = (TopicPartition("t", p) for p in range(3))
A, B = MemberId("a"), MemberId("b")


def plan(
    epoch: int, assignment: dict[MemberId, tuple[TopicPartition, ...]], **releasing: MemberId
) -> PublishedPlan:
    return PublishedPlan(
        plan=Plan(epoch=epoch, strategy="lag", assignment=assignment),
        releasing={
            TopicPartition("t", int(k[1:])): Release(identity=v, epoch=epoch) for k, v in releasing.items()
        },
    )


def test_a_two_epoch_handoff_counts_once_at_the_grant() -> None:
    first = plan(1, {A: (P0, P1), B: (P2,)})
    releasing = plan(2, {A: (P0,), B: (P2,)}, p1=A)
    granted = plan(3, {A: (P0,), B: (P1, P2)})
    assert handed_over(first, releasing) == 0
    assert handed_over(releasing, granted) == 1
    assert handed_over(first, granted) == 1


def test_first_assignments_and_dropped_partitions_are_no_moves() -> None:
    assert handed_over(None, plan(1, {A: (P0,)})) == 0
    assert handed_over(plan(1, {A: (P0,)}), plan(2, {A: (P0,), B: (P1,)})) == 0
    assert handed_over(plan(1, {A: (P0, P1)}), plan(2, {A: (P0,)})) == 0
