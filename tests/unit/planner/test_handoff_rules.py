"""The handoff's rules, one scenario each: a move takes two epochs, expiry or release shortcuts
the wait, epochs only go forward, and the operator's clock judges expiry like leader election."""

from __future__ import annotations

import pytest

from groupops.model import MemberId, Plan, TopicPartition
from groupops.planner.handoff import (
    HandoffError,
    LeaseClock,
    MemberState,
    identities_to_fence,
    next_plan,
    predicted_plan,
)
from groupops.planner.plan_format import PublishedPlan, Release, empty_plan

A, B, C = MemberId("g-0"), MemberId("g-1"), MemberId("g-2")


def tp(partition: int, topic: str = "t") -> TopicPartition:
    return TopicPartition(topic, partition)


def plan(
    epoch: int, releasing: dict[TopicPartition, Release] | None = None, **sets: list[int]
) -> PublishedPlan:
    assignment = {MemberId(name.replace("_", "-")): tuple(tp(p) for p in ps) for name, ps in sets.items()}
    return PublishedPlan(
        plan=Plan(epoch=epoch, strategy="range", assignment=assignment), releasing=releasing or {}
    )


def sets_of(published: PublishedPlan) -> dict[str, list[int]]:
    return {identity: [t.partition for t in tps] for identity, tps in published.plan.assignment.items()}


def test_first_plan_gives_every_partition_at_once() -> None:
    result = next_plan(empty_plan("range"), {A: [tp(0), tp(1)], B: [tp(2)]}, {})
    assert result.changed
    assert result.published.epoch == 1
    assert sets_of(result.published) == {"g-0": [0, 1], "g-1": [2]}
    assert result.published.releasing == {}


def test_a_move_first_leaves_the_old_owner_then_enters_the_new_one_after_its_ack() -> None:
    previous = plan(4, g_0=[0, 1], g_1=[])
    target = {A: [tp(0)], B: [tp(1)]}

    leave = next_plan(previous, target, {A: MemberState(acked_epoch=4, partitions=(tp(0), tp(1)))}, now=10.0)
    assert leave.published.epoch == 5
    assert sets_of(leave.published) == {"g-0": [0], "g-1": []}
    assert leave.waiting == {tp(1): A}

    not_yet = next_plan(leave.published, target, {A: MemberState(acked_epoch=4, partitions=(tp(0), tp(1)))})
    assert not not_yet.changed
    assert not_yet.published is leave.published

    enter = next_plan(leave.published, target, {A: MemberState(acked_epoch=5, partitions=(tp(0),))}, now=10.5)
    assert enter.published.epoch == 6
    assert sets_of(enter.published) == {"g-0": [0], "g-1": [1]}
    assert enter.waiting == {}
    assert [(m.partition, m.source, m.target, m.duration_s) for m in enter.completed] == [(tp(1), A, B, 0.5)]


def test_an_expired_owner_fenced_through_the_current_epoch_hands_over_in_one_epoch() -> None:
    previous = plan(7, g_0=[0, 1, 2], g_1=[])
    target = {A: [], B: [tp(0), tp(1), tp(2)]}
    result = next_plan(
        previous, target, {A: MemberState(acked_epoch=7, partitions=(tp(0), tp(1), tp(2)))}, expired=[A]
    )
    assert result.published.epoch == 8
    assert sets_of(result.published) == {"g-0": [], "g-1": [0, 1, 2]}
    assert result.published.releasing == {}


def test_the_fence_written_on_the_lease_counts_as_expiry() -> None:
    previous = plan(7, g_0=[0], g_1=[])
    result = next_plan(previous, {A: [], B: [tp(0)]}, {A: MemberState(acked_epoch=7, released_through=7)})
    assert sets_of(result.published) == {"g-0": [], "g-1": [0]}


def test_a_pending_release_settles_when_its_holder_expires_later() -> None:
    previous = plan(5, {tp(1): Release(identity=A, epoch=5, since=1.0)}, g_0=[0], g_1=[])
    target = {A: [tp(0)], B: [tp(1)]}
    assert not next_plan(previous, target, {A: MemberState(acked_epoch=4)}).changed
    result = next_plan(previous, target, {A: MemberState(acked_epoch=4)}, expired=[A])
    assert sets_of(result.published) == {"g-0": [0], "g-1": [1]}
    assert result.published.epoch == 6


def test_a_graceful_release_on_exit_hands_everything_over_without_waiting() -> None:
    previous = plan(3, g_0=[0, 1], g_1=[2])
    lease = MemberState(acked_epoch=3, partitions=(), released_through=3)
    result = next_plan(previous, {B: [tp(0), tp(1), tp(2)]}, {A: lease, B: MemberState(acked_epoch=3)})
    assert sets_of(result.published) == {"g-1": [0, 1, 2]}
    assert result.published.releasing == {}


def test_a_partition_returning_to_its_releaser_goes_straight_back() -> None:
    previous = plan(5, {tp(1): Release(identity=A, epoch=5)}, g_0=[0], g_1=[])
    result = next_plan(previous, {A: [tp(0), tp(1)], B: []}, {A: MemberState(acked_epoch=4)})
    assert sets_of(result.published) == {"g-0": [0, 1], "g-1": []}
    assert result.published.releasing == {}


def test_a_partition_no_one_is_given_still_waits_for_its_release() -> None:
    previous = plan(2, g_0=[0, 1])
    result = next_plan(previous, {A: [tp(0)]}, {A: MemberState(acked_epoch=2)})
    assert sets_of(result.published) == {"g-0": [0]}
    assert result.waiting == {tp(1): A}


def test_nothing_changes_means_no_new_epoch() -> None:
    previous = plan(9, g_0=[0], g_1=[1])
    result = next_plan(previous, {A: [tp(0)], B: [tp(1)]}, {A: MemberState(acked_epoch=9), B: MemberState()})
    assert not result.changed
    assert result.published is previous


def test_a_replica_back_from_a_fence_gets_a_newer_epoch_even_when_nothing_moves() -> None:
    previous = plan(9, g_0=[0], g_1=[1])
    result = next_plan(
        previous, {A: [tp(0)], B: [tp(1)]}, {A: MemberState(acked_epoch=8, released_through=9)}
    )
    assert result.changed
    assert result.published.epoch == 10
    assert sets_of(result.published) == {"g-0": [0], "g-1": [1]}


@pytest.mark.parametrize(
    ("lease", "expected_epoch"),
    [
        pytest.param(MemberState(acked_epoch=41), 42, id="above an acknowledged epoch"),
        pytest.param(MemberState(released_through=57), 58, id="above a fence"),
        pytest.param(MemberState(), 1, id="from one without Leases"),
    ],
)
def test_epochs_go_forward_past_every_epoch_a_lease_mentions(lease: MemberState, expected_epoch: int) -> None:
    result = next_plan(empty_plan(), {A: [tp(0)]}, {A: lease})
    assert result.published.epoch == expected_epoch


def test_holdings_reported_on_a_lease_but_missing_from_a_lost_plan_wait_for_a_resync() -> None:
    lease = MemberState(acked_epoch=40, partitions=(tp(0), tp(1)))
    result = next_plan(empty_plan(), {A: [], B: [tp(0), tp(1)]}, {A: lease})
    assert result.published.epoch == 41
    assert result.published.barrier == 41
    assert sets_of(result.published) == {"g-0": [], "g-1": []}
    assert set(result.waiting) == {tp(0), tp(1)}
    not_yet = next_plan(result.published, {A: [], B: [tp(0), tp(1)]}, {A: lease})
    assert not not_yet.changed
    after_ack = next_plan(result.published, {A: [], B: [tp(0), tp(1)]}, {A: MemberState(acked_epoch=41)})
    assert sets_of(after_ack.published) == {"g-0": [], "g-1": [0, 1]}
    assert after_ack.published.barrier is None


def test_a_report_older_than_a_fence_is_void() -> None:
    lease = MemberState(acked_epoch=40, partitions=(tp(0),), released_through=40)
    resync = next_plan(empty_plan(), {B: [tp(0)]}, {A: lease})
    assert resync.published.barrier == 41
    assert resync.waiting == {}
    granted = next_plan(resync.published, {B: [tp(0)]}, {A: lease})
    assert sets_of(granted.published) == {"g-1": [0]}


def test_a_target_giving_one_partition_twice_is_refused() -> None:
    with pytest.raises(HandoffError, match="t-0"):
        next_plan(empty_plan(), {A: [tp(0)], B: [tp(0)]}, {})


def test_only_expired_identities_that_may_hold_something_are_fenced() -> None:
    previous = plan(6, {tp(3): Release(identity=C, epoch=6)}, g_0=[0], g_1=[], g_2=[])
    members = {
        A: MemberState(acked_epoch=6),
        B: MemberState(acked_epoch=6),
        C: MemberState(acked_epoch=5, partitions=(tp(3),)),
    }
    assert identities_to_fence(previous, members, [A, B, C]) == [A, C]
    already = {**members, A: MemberState(acked_epoch=6, released_through=6)}
    assert identities_to_fence(previous, already, [A, B, C]) == [C]


def test_the_lease_clock_judges_expiry_from_the_last_change_it_saw() -> None:
    clock = LeaseClock()
    clock.observe(A, "100", now=0.0)
    clock.observe(A, "100", now=2.0)
    assert not clock.expired(A, now=2.9, duration_s=3.0)
    clock.observe(A, "101", now=2.9)
    assert not clock.expired(A, now=5.0, duration_s=3.0)
    assert clock.expired(A, now=5.9, duration_s=3.0)
    assert not clock.expired(B, now=100.0, duration_s=3.0)
    clock.observe(B, None, now=100.0)
    assert clock.expired(B, now=103.0, duration_s=3.0)
    clock.forget(B)
    assert clock.unchanged_for(B, now=104.0) is None


def test_next_expiry_is_the_first_held_lease_to_run_out_after_a_moment() -> None:
    clock = LeaseClock()
    assert clock.next_expiry(after=0.0) is None
    clock.observe(A, "1", now=0.0, lifetime=4.0)
    clock.observe(B, "1", now=1.0, lifetime=4.0)
    clock.observe(C, "1", now=0.5)  # nobody holds it: it never expires
    assert clock.next_expiry(after=0.0) == 4.0
    assert clock.next_expiry(after=4.0) == 5.0  # A's moment is no longer after 4.0
    clock.observe(A, "2", now=3.0, lifetime=4.0)  # a renewal moves A's expiry
    assert clock.next_expiry(after=0.0) == 5.0
    assert clock.next_expiry(after=5.0) == 7.0
    clock.observe(A, "3", now=3.5)  # released: no longer held
    assert clock.next_expiry(after=5.0) is None
    clock.forget(B)
    assert clock.next_expiry(after=0.0) is None


def test_native_predictions_are_published_in_one_epoch_without_releases() -> None:
    first = predicted_plan(empty_plan("range"), {A: [tp(0), tp(1)], B: [tp(2)]}, strategy="range")
    assert first.changed and first.published.epoch == 1 and not first.published.releasing
    moved = predicted_plan(first.published, {A: [tp(0)], B: [tp(2), tp(1)]})
    assert moved.changed and moved.published.epoch == 2
    assert dict(moved.published.plan.assignment) == {A: (tp(0),), B: (tp(1), tp(2))}
    assert not moved.published.releasing, "nobody consumes by a prediction: nothing to release"
    same = predicted_plan(moved.published, {B: [tp(1), tp(2)], A: [tp(0)]})
    assert not same.changed and same.published is moved.published
    with pytest.raises(HandoffError, match="both"):
        predicted_plan(moved.published, {A: [tp(0)], B: [tp(0)]})
