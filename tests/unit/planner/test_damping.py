"""Damping (planner/damping.py): which triggers are held and why, the hysteresis around
imbalanceThreshold, the interval as a re-evaluation period, the fair-share band that tells a
change cut short by the move budget, and autoscale's stabilisation windows with HPA's semantics;
then properties: lag oscillating around the threshold makes at most T / cooldown + 1 replans, on
the pure decision and on the real planner, and autoscale follows a step up at once and a step
down only after its window."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupops.assign import STRATEGY_NAMES
from groupops.model import TopicPartition
from groupops.planner.damping import (
    COOLDOWN_ONLY,
    LAG_DRIVEN,
    Damped,
    DampingSettings,
    Figures,
    Hold,
    Recommendation,
    ScaleWindows,
    TriggerState,
    count_shortfall,
    damp,
    improvement,
    judge,
    lag_trigger,
    rearmed,
    record,
    stabilize,
)
from groupops.planner.target import Identity, TargetRequest, Trigger, compute_target, stats_of

T = TopicPartition
DEFAULTS = DampingSettings(
    imbalance_threshold=1.2, min_improvement=0.1, cooldown_seconds=30, interval_seconds=60
)
CORRECTNESS = (
    Trigger.INITIAL,
    Trigger.SPEC_CHANGED,
    Trigger.MEMBERSHIP_CHANGED,
    Trigger.PARTITIONS_CHANGED,
    Trigger.HANDOFF,
)


def figures(imbalance: float, max_member_lag: float | None = None) -> Figures:
    """A plan's figures with lower bound 100: max member lag = 100 x imbalance."""
    return Figures(
        imbalance=imbalance, max_member_lag=100 * imbalance if max_member_lag is None else max_member_lag
    )


# -- the parts ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        pytest.param(100.0, 80.0, 0.2, id="a-fifth-lower"),
        pytest.param(100.0, 100.0, 0.0, id="the-same"),
        pytest.param(100.0, 120.0, -0.2, id="worse-is-negative"),
        pytest.param(0.0, 0.0, 0.0, id="nothing-lags"),
        pytest.param(0.0, 5.0, 0.0, id="nothing-lagged-before"),
    ],
)
def test_improvement_is_the_relative_fall_of_the_max_member_lag(
    before: float, after: float, expected: float
) -> None:
    assert improvement(before, after) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("imbalance", "armed", "since_rebalance", "since_evaluation", "expected"),
    [
        pytest.param(1.3, True, 5.0, 5.0, Trigger.IMBALANCE, id="armed-above-the-threshold"),
        pytest.param(1.2, True, 5.0, 5.0, None, id="at-the-threshold-is-not-above"),
        pytest.param(1.3, False, 5.0, 5.0, None, id="disarmed-waits-for-the-interval"),
        pytest.param(1.3, False, 60.0, None, Trigger.INTERVAL, id="disarmed-the-interval-still-looks"),
        pytest.param(1.0, True, 60.0, None, Trigger.INTERVAL, id="interval-since-the-last-plan"),
        pytest.param(1.0, True, None, None, Trigger.INTERVAL, id="never-rebalanced-never-evaluated"),
        pytest.param(1.0, True, 59.0, None, None, id="interval-not-yet"),
        pytest.param(1.0, True, 600.0, 59.0, None, id="evaluated-within-the-interval"),
        pytest.param(1.0, True, 600.0, 60.0, Trigger.INTERVAL, id="evaluated-an-interval-ago"),
    ],
)
def test_lag_trigger(
    imbalance: float,
    armed: bool,
    since_rebalance: float | None,
    since_evaluation: float | None,
    expected: Trigger | None,
) -> None:
    assert (
        lag_trigger(
            imbalance=imbalance,
            armed=armed,
            settings=DEFAULTS,
            seconds_since_rebalance=since_rebalance,
            seconds_since_evaluation=since_evaluation,
        )
        is expected
    )


def test_a_group_behind_its_time_lag_goal_replans_below_the_threshold_when_it_gains_enough() -> None:
    behind = {"settings": DEFAULTS, "seconds_since_rebalance": 10.0, "seconds_since_evaluation": 10.0}
    assert lag_trigger(imbalance=1.1, armed=True, over_goal=True, **behind) is Trigger.TIME_LAG_ABOVE_GOAL
    assert lag_trigger(imbalance=1.5, armed=True, over_goal=True, **behind) is Trigger.IMBALANCE, "first"
    assert lag_trigger(imbalance=1.1, armed=True, over_goal=False, **behind) is None

    def over_goal(before: float, after: float, since: float) -> Damped:
        return damp(
            state=TriggerState(),
            before=figures(before),
            after=figures(after),
            counts_nearer=False,
            seconds_since_rebalance=since,
            now=1000.0,
            settings=DEFAULTS,
            over_goal=True,
        )

    assert over_goal(1.15, 1.0, since=600).trigger is Trigger.TIME_LAG_ABOVE_GOAL
    held = over_goal(1.15, 1.0, since=1)
    assert held.trigger is None and held.verdict is not None and held.verdict.hold is Hold.COOLDOWN
    too_little = over_goal(1.15, 1.1, since=600)
    assert too_little.trigger is None and too_little.verdict is not None
    assert too_little.verdict.hold is Hold.TOO_LITTLE


def test_failover_never_triggers_on_imbalance() -> None:
    failover = DampingSettings(imbalance_threshold=math.inf)
    assert (
        lag_trigger(
            imbalance=50.0,
            armed=True,
            settings=failover,
            seconds_since_rebalance=1.0,
            seconds_since_evaluation=1.0,
        )
        is None
    )


@pytest.mark.parametrize(
    ("trigger", "before", "after", "since", "publish", "hold"),
    [
        *(pytest.param(t, 100.0, 100.0, 1.0, True, None, id=f"{t.value}-never-held") for t in CORRECTNESS),
        pytest.param(
            Trigger.COUNTS_UNEVEN, 100.0, 100.0, 29.0, False, Hold.COOLDOWN, id="uneven-waits-for-cooldown"
        ),
        pytest.param(Trigger.COUNTS_UNEVEN, 100.0, 120.0, 30.0, True, None, id="uneven-needs-no-lag-gain"),
        pytest.param(Trigger.IMBALANCE, 130.0, 100.0, 29.9, False, Hold.COOLDOWN, id="imbalance-in-cooldown"),
        pytest.param(Trigger.IMBALANCE, 130.0, 100.0, 30.0, True, None, id="imbalance-after-cooldown"),
        pytest.param(Trigger.IMBALANCE, 130.0, 100.0, None, True, None, id="no-last-plan-is-long-ago"),
        pytest.param(
            Trigger.IMBALANCE, 130.0, 100.0, -5.0, False, Hold.COOLDOWN, id="stamp-ahead-counts-as-now"
        ),
        pytest.param(Trigger.IMBALANCE, 100.0, 91.0, 99.0, False, Hold.TOO_LITTLE, id="imbalance-9-percent"),
        pytest.param(Trigger.IMBALANCE, 100.0, 90.0, 99.0, True, None, id="imbalance-exactly-10-percent"),
        pytest.param(Trigger.INTERVAL, 100.0, 100.0, 99.0, False, Hold.TOO_LITTLE, id="interval-no-better"),
        pytest.param(Trigger.INTERVAL, 100.0, 110.0, 99.0, False, Hold.TOO_LITTLE, id="interval-worse"),
        pytest.param(Trigger.INTERVAL, 0.0, 0.0, 99.0, False, Hold.TOO_LITTLE, id="interval-nothing-lags"),
        pytest.param(Trigger.INTERVAL, 100.0, 50.0, 99.0, True, None, id="interval-halves"),
    ],
)
def test_judge(
    trigger: Trigger, before: float, after: float, since: float | None, publish: bool, hold: Hold | None
) -> None:
    verdict = judge(
        trigger=trigger, before_max=before, after_max=after, seconds_since_rebalance=since, settings=DEFAULTS
    )
    assert (verdict.publish, verdict.hold) == (publish, hold)


def test_a_min_improvement_of_zero_still_wants_a_better_plan() -> None:
    eager = DampingSettings(min_improvement=0.0, cooldown_seconds=0)
    same = judge(
        trigger=Trigger.INTERVAL, before_max=100, after_max=100, seconds_since_rebalance=1, settings=eager
    )
    better = judge(
        trigger=Trigger.INTERVAL, before_max=100, after_max=99, seconds_since_rebalance=1, settings=eager
    )
    assert (same.publish, better.publish) == (False, True)


def test_held_verdicts_say_why() -> None:
    cooling = judge(
        trigger=Trigger.IMBALANCE,
        before_max=200,
        after_max=100,
        seconds_since_rebalance=12,
        settings=DEFAULTS,
    )
    assert (
        cooling.describe(Trigger.IMBALANCE, DEFAULTS, 12)
        == "ImbalanceExceeded held: 12 s since the last plan, cooldown 30 s"
    )
    small = judge(
        trigger=Trigger.INTERVAL, before_max=100, after_max=96, seconds_since_rebalance=90, settings=DEFAULTS
    )
    assert small.describe(Trigger.INTERVAL, DEFAULTS, 90) == (
        "Interval held: the new plan improves max member lag by 4.0%, less than minImprovement 10%"
    )


@pytest.mark.parametrize(
    ("threshold", "margin", "rearm_below"),
    [
        pytest.param(1.2, 0.1, 1.08, id="defaults"),
        pytest.param(2.0, 0.5, 1.0, id="band-down-to-perfect"),
        pytest.param(1.0, 0.1, 1.0, id="never-below-perfect"),
        pytest.param(1.5, 0.0, 1.5, id="no-band"),
    ],
)
def test_rearm_level(threshold: float, margin: float, rearm_below: float) -> None:
    settings_ = DampingSettings(imbalance_threshold=threshold, min_improvement=margin)
    assert settings_.rearm_below == pytest.approx(rearm_below)
    assert rearmed(armed=False, imbalance=rearm_below, settings=settings_)
    assert not rearmed(armed=False, imbalance=rearm_below + 0.001, settings=settings_)
    assert rearmed(armed=True, imbalance=99.0, settings=settings_)


def test_correctness_triggers_are_neither_lag_driven_nor_cooldown_only() -> None:
    assert not (LAG_DRIVEN | COOLDOWN_ONLY) & set(CORRECTNESS)
    assert {Trigger.IMBALANCE, Trigger.TIME_LAG_ABOVE_GOAL, Trigger.INTERVAL} == LAG_DRIVEN
    assert {Trigger.COUNTS_UNEVEN} == COOLDOWN_ONLY


# -- damp: one run's decision ----------------------------------------------------------------


def run_damp(
    state: TriggerState,
    before: Figures,
    after: Figures,
    *,
    since: float | None,
    now: float = 1000.0,
    counts_nearer: bool = False,
) -> Damped:
    return damp(
        state=state,
        before=before,
        after=after,
        counts_nearer=counts_nearer,
        seconds_since_rebalance=since,
        now=now,
        settings=DEFAULTS,
    )


def test_the_worked_example_of_the_module() -> None:
    first = run_damp(TriggerState(), figures(1.32), figures(1.05), since=40)
    assert first.trigger is Trigger.IMBALANCE and first.state.armed, "1.05 <= 1.08 keeps it armed"
    second = run_damp(first.state, figures(1.25), figures(1.10), since=10)
    assert second.trigger is None and second.verdict is not None and second.verdict.hold is Hold.COOLDOWN
    third = run_damp(second.state, figures(1.25), figures(1.16), since=35)
    assert third.trigger is None and third.verdict is not None and third.verdict.hold is Hold.TOO_LITTLE


def test_hysteresis_a_plan_left_above_the_rearm_level_disarms_until_it_falls_back() -> None:
    published = run_damp(TriggerState(), figures(1.5), figures(1.3), since=100)
    assert published.trigger is Trigger.IMBALANCE and not published.state.armed
    # Still above the threshold, and a plan 12 % better exists: no hurry, the interval decides.
    later = run_damp(published.state, figures(1.3), figures(1.14), since=40, now=1040)
    assert later.trigger is None and later.candidate is None
    at_interval = run_damp(published.state, figures(1.3), figures(1.14), since=60, now=1060)
    assert at_interval.trigger is Trigger.INTERVAL
    # Back at or below 1.08 re-arms; above the threshold again, it hurries again.
    calm = run_damp(published.state, figures(1.08), figures(1.08), since=45, now=1045)
    assert calm.state.armed
    again = run_damp(calm.state, figures(1.3), figures(1.0), since=50, now=1050)
    assert again.trigger is Trigger.IMBALANCE


def test_an_interval_that_finds_too_little_waits_a_whole_interval() -> None:
    looked = run_damp(TriggerState(), figures(1.1), figures(1.05), since=600, now=1000)
    assert (
        looked.trigger is None and looked.candidate is Trigger.INTERVAL and looked.state.evaluated_at == 1000
    )
    assert run_damp(looked.state, figures(1.15), figures(1.0), since=659, now=1059).candidate is None
    assert (
        run_damp(looked.state, figures(1.15), figures(1.0), since=660, now=1060).trigger is Trigger.INTERVAL
    )


def test_an_interval_held_by_the_cooldown_looks_again_when_it_ends() -> None:
    slow = DampingSettings(cooldown_seconds=120, interval_seconds=60)
    held = damp(
        state=TriggerState(),
        before=figures(1.1),
        after=figures(1.0),
        counts_nearer=False,
        seconds_since_rebalance=70,
        now=1000,
        settings=slow,
    )
    assert held.verdict is not None and held.verdict.hold is Hold.COOLDOWN
    assert held.state.evaluated_at is None, "not used up: it is due again at the next run"


def test_a_waiting_proposal_uses_nothing_up() -> None:
    decided = run_damp(TriggerState(), figures(1.5), figures(1.3), since=600, now=1000)
    assert decided.trigger is Trigger.IMBALANCE
    assert decided.unpublished == TriggerState(armed=True, evaluated_at=None)
    interval = run_damp(TriggerState(armed=False), figures(1.15), figures(1.0), since=600, now=1000)
    assert interval.trigger is Trigger.INTERVAL and interval.unpublished.evaluated_at is None
    assert interval.state.evaluated_at == 1000


def test_counts_uneven_comes_first_and_leaves_the_hysteresis_alone() -> None:
    uneven = run_damp(TriggerState(), figures(1.5), figures(1.5), since=31, counts_nearer=True)
    assert uneven.trigger is Trigger.COUNTS_UNEVEN and uneven.state == TriggerState()
    cooling = run_damp(TriggerState(), figures(1.5), figures(1.0), since=29, counts_nearer=True)
    assert cooling.trigger is None and cooling.candidate is Trigger.COUNTS_UNEVEN


# -- the fair-share band ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("assignment", "members", "topics", "shortfall"),
    [
        pytest.param(
            {"a": [T("x", 0), T("x", 1), T("x", 2), T("y", 0), T("y", 1), T("y", 2)], "b": []},
            ["a", "b"],
            {"x": 3, "y": 3},
            4,
            id="docstring-example",  # band [2, 4]: a 2 above, b 2 below
        ),
        pytest.param(
            {"a": [T("x", 0), T("x", 1), T("y", 0), T("y", 1)], "b": [T("x", 2), T("y", 2)]},
            ["a", "b"],
            {"x": 3, "y": 3},
            0,
            id="range-on-two-topics-is-in-band",
        ),
        pytest.param(
            {"a": [T("x", 0)], "gone": [T("x", 1)]}, ["a", "b"], {"x": 2}, 1, id="non-members-left-out"
        ),
        pytest.param(
            {"a": [T("x", 5)], "b": [T("x", 0)]}, ["a", "b"], {"x": 2}, 1, id="dropped-partitions-left-out"
        ),
        pytest.param({}, [], {"x": 4}, 0, id="no-members"),
    ],
)
def test_count_shortfall(
    assignment: dict[str, list[TopicPartition]], members: list[str], topics: dict[str, int], shortfall: int
) -> None:
    assert count_shortfall(assignment, members, topics) == shortfall


def identities(n: int) -> list[Identity]:
    return [Identity(name=f"g-{i}", ordinal=i, priority=-(i + 1)) for i in range(n)]


@settings(max_examples=80, deadline=None)
@given(
    strategy=st.sampled_from(sorted(set(STRATEGY_NAMES) - {"failover"})),
    counts=st.lists(st.integers(0, 9), min_size=1, max_size=3),
    members=st.integers(1, 5),
    racks=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_strategy_but_failover_answers_within_the_band_whatever_the_lag(
    strategy: str, counts: list[int], members: int, racks: bool, seed: int
) -> None:
    """What `CountsUneven` rests on: lag (and rack placement) never puts a strategy's own answer
    outside the band, so only a move budget (or a change of members) can."""
    rng = random.Random(seed)
    topics = {f"t{i}": n for i, n in enumerate(counts)}
    zones = ["a", "b", "c"]
    placed = [
        Identity(name=f"g-{i}", ordinal=i, priority=-(i + 1), rack=zones[i % 3] if racks else None)
        for i in range(members)
    ]
    partition_racks = (
        {
            topic: [frozenset(rng.sample(zones, rng.randint(1, 2))) for _ in range(n)]
            for topic, n in topics.items()
        }
        if racks
        else {}
    )
    names = [identity.name for identity in placed]

    def answer(
        lags: dict[str, list[int]], published: dict[str, list[TopicPartition]]
    ) -> dict[str, list[TopicPartition]]:
        request = TargetRequest(
            strategy=strategy,
            topics=topics,
            members=placed,
            lags=lags,
            partition_racks=partition_racks,
            published=published,
            epoch=1 if published else None,
        )
        return {str(k): v for k, v in compute_target(request).assignment.items()}

    def some_lag() -> dict[str, list[int]]:
        return {
            topic: [rng.choice([0, 1, 10, 1000, rng.randint(0, 10**6)]) for _ in range(n)]
            for topic, n in topics.items()
        }

    first = answer(some_lag(), {})
    assert count_shortfall(first, names, topics) == 0
    if strategy == "cooperative-sticky":
        return  # with owners it withholds what changes owner this round (PartitionsChanged follows)
    assert count_shortfall(answer(some_lag(), first), names, topics) == 0


# -- autoscale -------------------------------------------------------------------------------

HPA = ScaleWindows(up_seconds=0, down_seconds=300)


@pytest.mark.parametrize(
    ("recommended", "current", "history", "now", "windows", "expected"),
    [
        pytest.param(8, 3, [], 0.0, HPA, 8, id="up-at-once"),
        pytest.param(2, 5, [Recommendation(0, 5)], 100.0, HPA, 5, id="down-held-by-a-high-one-in-window"),
        pytest.param(2, 5, [Recommendation(0, 5)], 300.0, HPA, 2, id="down-once-it-left-the-window"),
        pytest.param(
            2, 5, [Recommendation(0, 5), Recommendation(200, 3)], 300.0, HPA, 3, id="down-to-the-highest-left"
        ),
        pytest.param(4, 4, [Recommendation(0, 9)], 10.0, HPA, 4, id="stays-when-between"),
        pytest.param(
            8,
            3,
            [Recommendation(50, 4)],
            60.0,
            ScaleWindows(up_seconds=30, down_seconds=0),
            4,
            id="up-to-the-lowest-in-window",
        ),
        pytest.param(
            8,
            3,
            [Recommendation(50, 4)],
            80.0,
            ScaleWindows(up_seconds=30, down_seconds=0),
            8,
            id="up-window-passed",
        ),
        pytest.param(
            8,
            9,
            [Recommendation(50, 4)],
            60.0,
            ScaleWindows(up_seconds=30, down_seconds=0),
            8,
            id="no-down-window-down-at-once",
        ),
        pytest.param(2, None, [Recommendation(0, 9)], 1.0, HPA, 2, id="nothing-runs-yet"),
    ],
)
def test_stabilize_has_hpa_semantics(
    recommended: int,
    current: int | None,
    history: list[Recommendation],
    now: float,
    windows: ScaleWindows,
    expected: int,
) -> None:
    assert (
        stabilize(recommended=recommended, current=current, history=history, now=now, windows=windows)
        == expected
    )


def test_record_keeps_only_what_a_window_can_see() -> None:
    windows = ScaleWindows(up_seconds=10, down_seconds=60)
    history = (Recommendation(0, 1), Recommendation(39, 2), Recommendation(41, 3))
    assert record(history, Recommendation(100, 4), windows) == (
        Recommendation(41, 3),
        Recommendation(100, 4),
    )


# -- properties --------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    minutes=st.integers(1, 30),
    cooldown=st.integers(1, 300),
    interval=st.integers(1, 600),
    threshold=st.floats(1.05, 3.0),
    spread=st.floats(0.01, 0.5),
    margin=st.floats(0.0, 0.9),
)
def test_imbalance_oscillating_around_the_threshold_replans_at_most_once_per_cooldown(
    seed: int, minutes: int, cooldown: int, interval: int, threshold: float, spread: float, margin: float
) -> None:
    """A random walk of the published plan's imbalance within +-spread of the threshold, any new
    plan figures, ticks 1 to 10 s apart: over T seconds at most T / cooldown + 1 lag-driven plans,
    each at least a cooldown after the one before."""
    rng = random.Random(seed)
    damping = DampingSettings(
        imbalance_threshold=threshold,
        min_improvement=margin,
        cooldown_seconds=cooldown,
        interval_seconds=interval,
    )
    state, now, last, replans, walk = TriggerState(), 0.0, None, 0, 0.0
    while now < minutes * 60:
        walk = max(-spread, min(spread, walk + rng.uniform(-spread / 3, spread / 3)))
        before = figures(max(1.0, threshold * (1 + walk)))  # an imbalance is never below 1
        after = figures(rng.uniform(1.0, before.imbalance * 1.2))
        decided = damp(
            state=state,
            before=before,
            after=after,
            counts_nearer=False,
            seconds_since_rebalance=None if last is None else now - last,
            now=now,
            settings=damping,
        )
        state = decided.state
        if decided.trigger is not None:
            assert decided.trigger in LAG_DRIVEN
            assert last is None or now - last >= cooldown
            replans, last = replans + 1, now
        now += rng.randint(1, 10)
    assert replans <= minutes * 60 // cooldown + 1


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    strategy=st.sampled_from(["balanced", "lag"]),
    swing=st.floats(0.05, 0.6),
    minutes=st.integers(2, 10),
)
def test_on_the_real_planner_a_flapping_hot_partition_replans_at_most_once_per_cooldown(
    seed: int, strategy: str, swing: float, minutes: int
) -> None:
    """Lag of one hot partition swings up and down by `swing` every tick (5 s), the others walk
    at random: the published plan's imbalance crosses the threshold again and again, and the
    planner always finds a better plan. With a 30 s cooldown: at most T / 30 + 1 replans.
    (Undamped runs are not compared case by case: publishing more often changes the plans the
    later decisions start from, so one short run may replan less; see the next test.)"""
    damped = simulate(
        seed, strategy, swing, minutes, DampingSettings(cooldown_seconds=30, interval_seconds=60)
    )
    assert damped <= minutes * 60 // 30 + 1


@pytest.mark.parametrize("strategy", ["lag", "balanced"])
def test_without_damping_the_same_flapping_lag_replans_several_times_as_often(strategy: str) -> None:
    undamped = DampingSettings(min_improvement=0.0, cooldown_seconds=0)
    damped = DampingSettings(cooldown_seconds=30, interval_seconds=60)
    totals = [
        (simulate(seed, strategy, 0.5, 10, damped), simulate(seed, strategy, 0.5, 10, undamped))
        for seed in range(4)
    ]
    assert sum(eager for _, eager in totals) >= 3 * sum(calm for calm, _ in totals), totals


def simulate(seed: int, strategy: str, swing: float, minutes: int, damping: DampingSettings) -> int:
    rng = random.Random(seed)
    members = identities(3)
    lags = [rng.randint(100, 1000) for _ in range(9)]
    published: dict[str, list[TopicPartition]] | None = None
    state, last, replans = TriggerState(), None, 0
    for tick in range(minutes * 12):
        now = tick * 5.0
        lags = [max(0, lag + rng.randint(-50, 50)) for lag in lags]
        hot = lags[:]
        hot[0] = int(hot[0] * (1 + swing) * 3) if tick % 2 else hot[0]
        request = TargetRequest(
            strategy=strategy,
            topics={"t": 9},
            members=members,
            lags={"t": hot},
            published=published or {},
            epoch=1,
        )
        target = compute_target(request)
        if published is None:
            published, last = {str(k): v for k, v in target.assignment.items()}, now
            continue
        before, after = stats_of(request, published), target.stats
        decided = damp(
            state=state,
            before=Figures(imbalance=before["imbalance"], max_member_lag=before["max_member_lag"]),
            after=Figures(imbalance=after["imbalance"], max_member_lag=after["max_member_lag"]),
            counts_nearer=False,
            seconds_since_rebalance=None if last is None else now - last,
            now=now,
            settings=damping,
        )
        state = decided.state
        if decided.trigger is not None:
            published, last, replans = {str(k): v for k, v in target.assignment.items()}, now, replans + 1
    return replans


@settings(max_examples=200, deadline=None)
@given(
    low=st.integers(1, 10),
    high=st.integers(11, 50),
    tick=st.integers(1, 15),
    down=st.integers(1, 600),
    up_at=st.integers(1, 100),
    high_ticks=st.integers(1, 100),
)
def test_autoscale_follows_a_step_up_at_the_next_tick_and_a_step_down_only_after_its_window(
    low: int, high: int, tick: int, down: int, up_at: int, high_ticks: int
) -> None:
    """Recommendations `low`, then `high` from tick `up_at` for `high_ticks` ticks, then `low`:
    with HPA's default up window (0) the count is `high` at the first high tick; after the step
    down it stays `high` while the last high recommendation is within the down window and is
    `low` at the first tick after."""
    windows = ScaleWindows(up_seconds=0, down_seconds=down)
    history: tuple[Recommendation, ...] = ()
    current: int | None = None
    last_high = None
    down_at = up_at + high_ticks
    for k in range(down_at + down // tick + 3):
        now = float(k * tick)
        recommended = high if up_at <= k < down_at else low
        current = stabilize(
            recommended=recommended, current=current, history=history, now=now, windows=windows
        )
        history = record(history, Recommendation(now, recommended), windows)
        if recommended == high:
            last_high = now
            assert current == high, "a step up is followed at once"
        elif last_high is not None:
            assert current == (high if now - last_high < down else low), (k, now, last_high)
    assert current == low


@settings(max_examples=100, deadline=None)
@given(
    current=st.integers(1, 20),
    recommended=st.integers(0, 20),
    down=st.integers(1, 600),
    tick=st.integers(1, 30),
)
def test_a_fresh_memory_does_not_scale_down_within_its_first_window(
    current: int, recommended: int, down: int, tick: int
) -> None:
    """After a restart the history starts with the current count as if just recommended (what
    decide.autoscaled_replicas does): no scale-down until one down window has passed."""
    windows = ScaleWindows(up_seconds=0, down_seconds=down)
    history: tuple[Recommendation, ...] = (Recommendation(0.0, current),)
    count = current
    for k in range(down // tick + 2):
        now = float(k * tick)
        count = stabilize(recommended=recommended, current=count, history=history, now=now, windows=windows)
        history = record(history, Recommendation(now, recommended), windows)
        if now < down:
            assert count == max(current, recommended), "no scale-down within the window"
    assert count == recommended


# -- when a settled policy may sleep (controller/settled.py) ------------------------------------


@settings(max_examples=500, deadline=None)
@given(
    armed=st.booleans(),
    evaluated_ago=st.none() | st.floats(0, 400),
    before=st.floats(1.0, 3.0),
    after=st.floats(1.0, 3.0),
    counts_nearer=st.booleans(),
    over_goal=st.booleans(),
    since=st.none() | st.floats(-5, 400),
    cooldown=st.floats(0, 200),
    interval=st.floats(1, 200),
    fraction=st.floats(0, 0.999),  # 1000 + 0.9999999999999998 is 1001.0 in floats: the boundary itself
)
def test_nothing_damping_decides_changes_while_it_says_it_stays_quiet(
    armed: bool,
    evaluated_ago: float | None,
    before: float,
    after: float,
    counts_nearer: bool,
    over_goal: bool,
    since: float | None,
    cooldown: float,
    interval: float,
    fraction: float,
) -> None:
    """A run that published nothing leaves `state` and says how long it stays quiet. Any run
    before then, on the same figures, decides nothing either and leaves the state as it is: so
    a settled policy's skipped ticks miss nothing of damping."""
    tuned = DampingSettings(
        imbalance_threshold=1.2, min_improvement=0.1, cooldown_seconds=cooldown, interval_seconds=interval
    )
    now = 1000.0
    state = TriggerState(armed=armed, evaluated_at=None if evaluated_ago is None else now - evaluated_ago)

    def at(moment: float, state: TriggerState) -> Damped:
        return damp(
            state=state,
            before=figures(before),
            after=figures(after),
            counts_nearer=counts_nearer,
            seconds_since_rebalance=None if since is None else since + (moment - now),
            now=moment,
            settings=tuned,
            over_goal=over_goal,
        )

    first = at(now, state)
    if first.trigger is not None:
        assert first.quiet_s == 0.0
        return
    assert first.quiet_s >= 0.0
    if first.quiet_s == 0.0:
        return
    later = at(now + fraction * min(first.quiet_s, 10_000.0), first.state)
    assert later.trigger is None
    assert later.state == first.state, "an interval evaluation or a re-arm came before the quiet ended"


def test_quiet_until_the_cooldown_ends_or_the_interval_comes_due_whichever_first() -> None:
    calm = figures(1.1)
    evaluated = TriggerState(evaluated_at=1000.0)
    assert run_damp(evaluated, calm, calm, since=10, now=1000).quiet_s == 20, "the cooldown ends"
    assert run_damp(evaluated, calm, calm, since=45, now=1040).quiet_s == 20, "the interval comes due"
    assert run_damp(evaluated, calm, calm, since=None, now=1030).quiet_s == 30
    looked = run_damp(TriggerState(), calm, figures(1.05), since=None, now=1000)
    assert looked.candidate is Trigger.INTERVAL
    assert looked.quiet_s == math.inf, "held on these figures: no evaluation on them is due again"


def test_an_interval_held_on_some_figures_looks_again_only_on_other_figures() -> None:
    """An evaluation judged these figures too little an improvement; on the same figures the
    next interval would judge the same, so it is not due and the state stays. Other figures (the
    lag moved) are evaluated as before, an interval after the last evaluation."""
    looked = run_damp(TriggerState(), figures(1.1), figures(1.05), since=600, now=1000)
    assert looked.verdict is not None and looked.verdict.hold is Hold.TOO_LITTLE
    assert looked.state.held_on == (figures(1.1), figures(1.05))
    same = run_damp(looked.state, figures(1.1), figures(1.05), since=700, now=1100)
    assert same.candidate is None and same.state == looked.state and same.quiet_s == math.inf
    moved = run_damp(looked.state, figures(1.12), figures(1.05), since=700, now=1100)
    assert moved.candidate is Trigger.INTERVAL and moved.state.evaluated_at == 1100
    assert run_damp(looked.state, figures(1.12), figures(1.05), since=659, now=1059).candidate is None
    better = run_damp(looked.state, figures(1.1), figures(0.9), since=700, now=1100)
    assert better.trigger is Trigger.INTERVAL and better.state.held_on is None


def test_an_imbalance_with_no_better_plan_stays_quiet_until_the_figures_change() -> None:
    """Armed and above the threshold, the imbalance trigger comes before the interval at every
    run; with no plan better enough its verdict stays too little, whatever the time."""
    stuck = run_damp(TriggerState(), figures(1.5), figures(1.5), since=600, now=1000)
    assert stuck.candidate is Trigger.IMBALANCE and stuck.verdict is not None
    assert stuck.verdict.hold is Hold.TOO_LITTLE
    assert stuck.quiet_s == math.inf


# -- the target's figures only when they matter (docs/design.md §8.5) ----------------------------


@settings(max_examples=500, deadline=None)
@given(
    armed=st.booleans(),
    evaluated_ago=st.none() | st.floats(0, 400),
    held=st.sampled_from(["none", "these", "other published", "other target"]),
    before=st.floats(1.0, 3.0),
    after=st.floats(0.5, 3.0),
    counts_nearer=st.booleans(),
    over_goal=st.booleans(),
    since=st.none() | st.floats(-5, 400),
)
def test_the_target_figures_are_asked_for_only_when_the_outcome_depends_on_them(
    armed: bool,
    evaluated_ago: float | None,
    held: str,
    before: float,
    after: float,
    counts_nearer: bool,
    over_goal: bool,
    since: float | None,
) -> None:
    """Given as a call, the target's figures give the same decision as given outright, and are
    asked for (once at most) only when there is a candidate to judge or the published plan's
    figures are the ones an interval held as too little: a busy policy's run with nothing to
    judge skips the strategy."""
    now = 1000.0
    held_on = {
        "none": None,
        "these": (figures(before), figures(after)),
        "other published": (figures(before + 0.5), figures(after)),
        "other target": (figures(before), figures(after + 0.5)),
    }[held]
    state = TriggerState(
        armed=armed, evaluated_at=None if evaluated_ago is None else now - evaluated_ago, held_on=held_on
    )
    asked: list[int] = []

    def lazily() -> Figures:
        asked.append(1)
        return figures(after)

    def run(target: Figures | Callable[[], Figures]) -> Damped:
        return damp(
            state=state,
            before=figures(before),
            after=target,
            counts_nearer=counts_nearer,
            seconds_since_rebalance=since,
            now=now,
            settings=DEFAULTS,
            over_goal=over_goal,
        )

    eager, lazy = run(figures(after)), run(lazily)
    assert lazy == eager
    assert len(asked) <= 1
    needed = eager.candidate is not None or (held_on is not None and held_on[0] == figures(before))
    assert bool(asked) == needed
