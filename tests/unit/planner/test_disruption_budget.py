"""The disruption budget of a cluster (planner/budget.py): handoffs in flight and partitions per
minute are limits a chosen rebalance waits for, worst-off first; handoffs the budget never held
(failover, drains) still count; a waiter that stops asking is forgotten."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from groupops.planner.budget import BudgetLimits, DisruptionBudget

A, B, C, D = ("ns", "a"), ("ns", "b"), ("ns", "c"), ("ns", "d")


def test_the_worked_example_of_the_module() -> None:
    budget = DisruptionBudget(BudgetLimits(max_handoffs=2, max_partitions_per_minute=100))
    assert budget.request(A, moves=40, badness=2.0, now=0).granted
    assert budget.request(B, moves=40, badness=2.0, now=0).granted
    held = budget.request(C, moves=30, badness=3.0, now=5)
    assert not held.granted and "2 of 2 handoffs" in (held.reason or "")
    assert not budget.request(D, moves=30, badness=1.5, now=5).granted
    assert budget.settle(B)
    per_minute = budget.request(C, moves=30, badness=3.0, now=20)
    assert not per_minute.granted and "80 partitions moved" in (per_minute.reason or "")
    assert budget.request(C, moves=30, badness=3.0, now=61).granted
    waits = budget.request(D, moves=30, badness=1.5, now=62)
    assert not waits.granted and "2 of 2 handoffs" in (waits.reason or "")


def test_the_worst_off_waiter_goes_first_and_the_others_say_who_is_ahead() -> None:
    budget = DisruptionBudget(BudgetLimits(max_handoffs=1))
    assert budget.request(A, moves=1, badness=1.0, now=0).granted
    for key, badness in ((B, 1.5), (C, 4.0), (D, 2.0)):
        assert not budget.request(key, moves=1, badness=badness, now=1).granted
    assert budget.waiting(now=1) == [C, D, B]
    budget.settle(A)
    behind = budget.request(B, moves=1, badness=1.5, now=2)
    assert (
        not behind.granted
        and behind.reason == "2 policies further from their goal go first (ns/c the furthest)"
    )
    assert budget.request(C, moves=1, badness=4.0, now=2).granted
    assert budget.waiting(now=2) == [D, B]


def test_equal_badness_goes_to_the_smaller_key() -> None:
    budget = DisruptionBudget(BudgetLimits(max_handoffs=1))
    budget.note_in_flight(D, now=0)
    assert not budget.request(B, moves=1, badness=2.0, now=1).granted
    assert not budget.request(A, moves=1, badness=2.0, now=1).granted
    budget.settle(D)
    assert not budget.request(B, moves=1, badness=2.0, now=2).granted
    assert budget.request(A, moves=1, badness=2.0, now=2).granted


def test_handoffs_and_moves_the_budget_never_held_still_count() -> None:
    budget = DisruptionBudget(BudgetLimits(max_handoffs=2, max_partitions_per_minute=10))
    budget.note_in_flight(A, now=0)  # a failover: never asked, never held
    budget.note_in_flight(B, now=0)
    assert not budget.request(C, moves=1, badness=9.0, now=1).granted
    budget.settle(A)
    budget.note_moves(10, now=1)
    held = budget.request(C, moves=1, badness=9.0, now=2)
    assert not held.granted and "maxPartitionsMovedPerMinute" in (held.reason or "")
    assert budget.request(C, moves=1, badness=9.0, now=61.5).granted


def test_a_rebalance_larger_than_the_allowance_runs_alone_after_a_quiet_minute() -> None:
    budget = DisruptionBudget(BudgetLimits(max_partitions_per_minute=10))
    budget.note_moves(1, now=0)
    assert not budget.request(A, moves=50, badness=1.0, now=30).granted
    assert budget.request(A, moves=50, badness=1.0, now=60.5).granted
    assert budget.use(now=61).moved_last_minute == 50


def test_a_policy_already_in_flight_does_not_count_against_itself() -> None:
    budget = DisruptionBudget(BudgetLimits(max_handoffs=1))
    budget.note_in_flight(A, now=0)
    assert budget.request(A, moves=2, badness=1.0, now=1).granted
    assert not budget.request(B, moves=2, badness=1.0, now=1).granted


def test_a_waiter_that_stops_asking_is_forgotten_and_holds_nobody_back() -> None:
    budget = DisruptionBudget(BudgetLimits(max_handoffs=1), stale_after=30)
    budget.note_in_flight(A, now=0)
    assert not budget.request(C, moves=1, badness=9.0, now=1).granted  # then deleted: never asks again
    budget.settle(A)
    assert not budget.request(B, moves=1, badness=1.0, now=20).granted
    assert budget.request(B, moves=1, badness=1.0, now=32).granted


def test_forgetting_a_policy_frees_its_handoff_and_its_place() -> None:
    budget = DisruptionBudget(BudgetLimits(max_handoffs=1))
    assert budget.request(A, moves=1, badness=1.0, now=0).granted
    assert not budget.request(B, moves=1, badness=5.0, now=1).granted
    assert budget.forget(A)
    assert budget.forget(B) is False  # waiting only: no handoff freed
    assert budget.use(now=2).in_flight == 0 and budget.use(now=2).waiting == 0


def test_no_limits_grant_everything() -> None:
    budget = DisruptionBudget(BudgetLimits())
    assert all(budget.request(("ns", str(i)), moves=1000, badness=1.0, now=0).granted for i in range(50))
    assert budget.use(now=0).in_flight == 50


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["ask", "settle", "failover"]),
            st.integers(0, 7),
            st.integers(1, 20),
            st.floats(1.0, 5.0),
        ),
        max_size=80,
    ),
    st.integers(1, 4),
    st.integers(5, 60),
)
def test_granted_rebalances_never_pass_either_limit(
    steps: list[tuple[str, int, int, float]], max_handoffs: int, per_minute: int
) -> None:
    """Whatever the order of asks, settles and failovers: when a rebalance is granted, fewer than
    max_handoffs others were in flight, and the minute's moves stay within the allowance unless it
    ran alone."""
    budget = DisruptionBudget(BudgetLimits(max_handoffs=max_handoffs, max_partitions_per_minute=per_minute))
    for tick, (action, who, moves, badness) in enumerate(steps):
        now, key = tick * 7.0, ("ns", str(who))
        if action == "settle":
            budget.settle(key)
        elif action == "failover":
            budget.note_in_flight(key, now=now)
        else:
            before = budget.use(now=now)
            others = before.in_flight - (key in budget.in_flight())
            if budget.request(key, moves=moves, badness=badness, now=now).granted:
                assert others < max_handoffs
                assert before.moved_last_minute == 0 or before.moved_last_minute + moves <= per_minute


def test_a_new_leader_grants_nothing_until_it_has_learned_what_is_in_flight() -> None:
    """Restart: the budget was in the old leader's memory. Three handoffs are still in flight;
    the new leader hears of them from the policies' first runs, which may come after another
    policy's request: learning first keeps that request from passing the limit."""
    budget = DisruptionBudget(BudgetLimits(max_handoffs=3), learning_until=15.0)
    early = budget.request(D, moves=1, badness=9.0, now=1)
    assert not early.granted and "learns the handoffs in flight" in (early.reason or "")
    for key in (A, B, C):  # their first runs, after D's request
        budget.note_in_flight(key, now=3)
    held = budget.request(D, moves=1, badness=9.0, now=16)
    assert not held.granted and "3 of 3 handoffs" in (held.reason or "")
    budget.settle(A)
    assert budget.request(D, moves=1, badness=9.0, now=17).granted


def test_a_grants_moves_are_counted_once_when_its_plan_hands_them_over() -> None:
    budget = DisruptionBudget(BudgetLimits(max_partitions_per_minute=10))
    assert budget.request(A, moves=4, badness=2.0, now=0).granted
    budget.note_moves(4, now=1, key=A)  # the epoch that grants them: counted at the grant already
    assert budget.use(now=2).moved_last_minute == 4
    budget.note_moves(2, now=3, key=B)  # a failover elsewhere counts
    budget.settle(A)
    budget.note_moves(1, now=4, key=A)  # after its handoff settled, A's moves count again
    assert budget.use(now=5).moved_last_minute == 7


def test_free_slots_beyond_what_worse_off_waiters_need_go_to_the_next_in_line() -> None:
    """Worst-off first orders the queue; it does not leave slots idle while the worst-off have
    not asked again yet (the 1,000-policy run granted one rebalance per pass over its waiters)."""
    budget = DisruptionBudget(BudgetLimits(max_handoffs=3))
    x, y, e = ("ns", "x"), ("ns", "y"), ("ns", "e")
    for key in (A, x, y):
        budget.note_in_flight(key, now=0)
    for key, badness in ((B, 5.0), (C, 4.0), (D, 3.0)):
        assert not budget.request(key, moves=1, badness=badness, now=1).granted
    budget.settle(A)
    budget.settle(x)
    assert budget.next_up(now=2) == [B, C], "two slots free: the two worst are woken"
    held = budget.request(e, moves=1, badness=1.0, now=2)
    assert not held.granted and (held.reason or "").startswith("3 policies further from their goal go first")
    assert budget.request(C, moves=1, badness=4.0, now=2).granted, "one slot is B's, the other C's"
    assert not budget.request(D, moves=1, badness=3.0, now=2).granted, "the last free slot is B's"
    assert budget.request(B, moves=1, badness=5.0, now=3).granted


def test_the_minutes_moves_are_kept_for_the_worse_off_waiters() -> None:
    budget = DisruptionBudget(BudgetLimits(max_partitions_per_minute=10), stale_after=100)
    budget.note_moves(2, now=0)
    assert not budget.request(A, moves=9, badness=5.0, now=1).granted  # 2 + 9 > 10
    assert not budget.request(B, moves=2, badness=1.0, now=1).granted, "A's 9 go first: 2 + 9 + 2 > 10"
    assert budget.next_up(now=61) == [A], "after the minute, A's 9 fit; B's 2 more do not"
    assert budget.request(B, moves=1, badness=1.0, now=61).granted, "A's 9 and B's 1 fit in 10"
