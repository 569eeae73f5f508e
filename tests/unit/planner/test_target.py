"""The planner's target: the engine's answer on the policy's group, with a move budget and triggers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from groupops.assign import get_strategy
from groupops.model import MemberId, TopicPartition
from groupops.planner.target import (
    Identity,
    TargetMemo,
    TargetRequest,
    Trigger,
    build_group,
    compute_target,
    limit_moves,
    rebalance_trigger,
    scale_down_order,
    stats_of,
)

T = TopicPartition


def ids(n: int) -> list[Identity]:
    return [Identity(name=f"g-{i}", ordinal=i, priority=-(i + 1)) for i in range(n)]


def test_range_worked_example() -> None:
    target = compute_target(TargetRequest(strategy="range", topics={"orders": 4}, members=ids(2)))
    assert target.assignment == {
        "g-0": [T("orders", 0), T("orders", 1)],
        "g-1": [T("orders", 2), T("orders", 3)],
    }
    assert target.moves == 0


def test_target_is_the_engine_on_the_same_group() -> None:
    request = TargetRequest(strategy="lag", topics={"t": 6}, members=ids(3), lags={"t": [9, 1, 1, 5, 5, 0]})
    target = compute_target(request)
    assert target.engine_assignment == get_strategy("lag")(build_group(request))
    assert target.stats["total_lag"] == 21


def test_move_budget_keeps_the_heaviest_moves() -> None:
    published = {"g-0": [T("t", p) for p in range(4)], "g-1": []}
    request = TargetRequest(
        strategy="range",
        topics={"t": 4},
        members=ids(2),
        published=published,
        lags={"t": [1, 1, 7, 3]},
        max_moves=1,
    )
    target = compute_target(request)
    assert target.moves == 1 and target.deferred == 1
    assert target.assignment == {"g-0": [T("t", 0), T("t", 1), T("t", 3)], "g-1": [T("t", 2)]}


def test_orphans_do_not_count_against_the_budget() -> None:
    request = TargetRequest(
        strategy="range", topics={"t": 4}, members=ids(2), published={"g-9": [T("t", 0)]}, max_moves=0
    )
    group = build_group(request)
    assignment, moves, deferred = limit_moves(group, get_strategy("range")(group), 0)
    assert (moves, deferred) == (0, 0)
    assert assignment[MemberId("g-0")] == [T("t", 0), T("t", 1)]


def test_failover_moves_whole_topics_despite_the_budget() -> None:
    published = {"g-1": [T("t", p) for p in range(4)]}
    members = [Identity(name="g-0", ordinal=0, priority=10), Identity(name="g-1", ordinal=1, priority=5)]
    target = compute_target(
        TargetRequest(strategy="failover", topics={"t": 4}, members=members, published=published, max_moves=1)
    )
    assert target.assignment == {"g-0": [T("t", p) for p in range(4)], "g-1": []}


def trigger(**overrides: object) -> Trigger | None:
    arguments: dict[str, object] = {
        "published": {"g-0": [T("t", 0), T("t", 1)]},
        "published_members": ["g-0"],
        "spec_changed": False,
        "members": ["g-0"],
        "topics": {"t": 2},
    }
    arguments.update(overrides)
    return rebalance_trigger(**arguments)  # type: ignore[arg-type]


def test_correctness_triggers_in_order_and_none_for_lag() -> None:
    """Lag alone never makes `rebalance_trigger` fire: planner/damping.py judges it."""
    assert trigger() is None
    assert trigger(published=None, spec_changed=True) is Trigger.INITIAL
    assert trigger(spec_changed=True, members=["g-0", "g-1"]) is Trigger.SPEC_CHANGED
    assert trigger(members=["g-0", "g-1"], topics={"t": 3}) is Trigger.MEMBERSHIP_CHANGED
    assert trigger(published_members=None) is Trigger.MEMBERSHIP_CHANGED
    assert trigger(topics={"t": 3}) is Trigger.PARTITIONS_CHANGED
    assert trigger(published={"g-0": [T("t", 0)]}) is Trigger.PARTITIONS_CHANGED


def test_a_plan_short_of_exactly_its_releasing_partitions_is_a_handoff_step() -> None:
    """A move half way leaves its partitions out of the plan while their old owners release
    them: its next epoch is `Handoff`, not a change of the topics (what the Event says)."""
    half_way = {"published": {"g-0": [T("t", 0)]}}
    assert trigger(**half_way, releasing=[T("t", 1)]) is Trigger.HANDOFF
    assert trigger(**half_way, releasing=[T("t", 1)], topics={"t": 3}) is Trigger.PARTITIONS_CHANGED
    assert trigger(**half_way, releasing=[T("t", 0), T("t", 1)]) is Trigger.PARTITIONS_CHANGED, "twice"
    assert trigger(**half_way, releasing=[T("t", 1)], spec_changed=True) is Trigger.SPEC_CHANGED
    assert trigger(releasing=[]) is None


def test_scale_down_removes_highest_ordinals_first() -> None:
    assert scale_down_order([0, 1, 2, 3, 4], 2) == [4, 3, 2]


_STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky", "lag", "balanced", "failover")


@settings(max_examples=60, deadline=None)
@given(
    rounds=st.lists(
        st.tuples(
            st.sampled_from(_STRATEGIES),
            st.integers(min_value=1, max_value=4),
            st.lists(st.integers(min_value=0, max_value=50), min_size=6, max_size=6),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_the_memo_answers_what_the_planner_would_round_after_round(
    rounds: list[tuple[str, int, list[int]]],
) -> None:
    memo = TargetMemo()
    published: dict[str, list[TopicPartition]] = {}
    for strategy, members, lags in rounds:
        request = TargetRequest(
            strategy=strategy, topics={"t": 6}, members=ids(members), published=published, lags={"t": lags}
        )
        target = memo.target(request)
        assert target == compute_target(request)
        assert memo.stats(request, published) == stats_of(request, published)
        assert memo.stats(request, target.assignment) == stats_of(request, target.assignment)
        published = {str(member): list(tps) for member, tps in target.assignment.items()}


def test_the_memo_runs_the_strategy_once_for_a_request_asked_again() -> None:
    memo = TargetMemo()
    request = TargetRequest(strategy="lag", topics={"t": 6}, members=ids(3), lags={"t": [9, 1, 1, 5, 5, 0]})
    first = memo.target(request)
    again = TargetRequest(strategy="lag", topics={"t": 6}, members=ids(3), lags={"t": [9, 1, 1, 5, 5, 0]})
    assert memo.target(again) is first  # equal, not the same object: answered from the memo
    assert memo.stats(again, first.assignment) is memo.stats(request, first.assignment)
    moved = TargetRequest(strategy="lag", topics={"t": 6}, members=ids(3), lags={"t": [0, 1, 1, 5, 5, 9]})
    assert memo.target(moved) is not first and memo.target(moved) == compute_target(moved)
