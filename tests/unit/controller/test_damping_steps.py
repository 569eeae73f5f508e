"""Damping through the reconcile's named steps, against the in-memory API: lag-driven replans
wait for the cooldown (from status.lastRebalance) and an improvement; changes of replicas and
spec never wait; a change of static lags is lag, not spec; the interval re-evaluates; a change
the move budget cut short continues a cooldown apart; autoscale scales up at once and down only
after its window, also after a restart."""

from __future__ import annotations

import itertools
from typing import Any

from groupops.controller.reconcile import PolicyMemory, ReconcileResult
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.test_reconcile_steps import Clock, run

LAG_DRIVEN = ("ImbalanceExceeded", "Interval")
TICK_S = 5


def policy(
    lags: list[int], *, replicas: int = 2, strategy: str = "balanced", **rebalance: Any
) -> dict[str, Any]:
    return {
        "kafka": {"bootstrapServers": "k:9092"},
        "groupId": "g",
        "topics": ["t"],
        "strategy": {"type": strategy},
        "lagSource": {"type": "static", "static": {"lags": {"t": lags}}},
        "consumers": {"replicas": replicas},
        "rebalance": {"interval": "1h", **rebalance},
    }


def status(kube: FakeKube) -> dict[str, Any]:
    return dict(kube.policy("ns", "p")["status"])


def hot_on_one_replica(kube: FakeKube, partitions: int) -> list[int]:
    """Lags that make the published plan as bad as it gets: two partitions of one replica at 300,
    the others at 10 (imbalance ~1.9; moving one of them gives ~1.0)."""
    members = [m for m in status(kube)["members"] if len(m["partitions"]) >= 2]
    current = kube.policy("ns", "p")["spec"]["lagSource"]["static"]["lags"]["t"]
    if not members:  # half way through a handoff: keep the lag
        return list(current)
    lags = [10] * partitions
    for name in members[0]["partitions"][:2]:
        lags[int(name.rsplit("-", 1)[1])] = 300
    return lags


def flap(ticks: int, **rebalance: Any) -> list[tuple[float, ReconcileResult]]:
    """Every tick, move the lag so that two hot partitions share a replica of the published plan."""
    kube, clock, memory = FakeKube(), Clock(), PolicyMemory()
    kube.put_policy("ns", "p", policy([300, 10, 300, 10], **rebalance))
    results = []
    for tick in range(ticks):
        results.append((tick * TICK_S, run(kube, clock, memory)))
        kube.put_policy("ns", "p", policy(hot_on_one_replica(kube, 4), **rebalance))
        clock.advance(TICK_S)
    return results


def lag_driven(results: list[tuple[float, ReconcileResult]]) -> list[float]:
    return [at for at, result in results if result.published and result.trigger in LAG_DRIVEN]


def test_lag_flapping_every_tick_replans_at_most_once_per_cooldown() -> None:
    damped = lag_driven(flap(60, cooldownSeconds=30))
    undamped = lag_driven(flap(60, cooldownSeconds=0, minImprovement=0))
    assert 2 <= len(damped) <= 300 // 30 + 1
    assert all(later - earlier >= 30 for earlier, later in itertools.pairwise(damped))
    assert len(undamped) >= 3 * len(damped), "without damping the same lag replans far more often"


def test_static_lags_are_lag_not_spec_but_a_strategy_change_is_spec() -> None:
    kube, clock, memory = FakeKube(), Clock(), PolicyMemory()
    kube.put_policy("ns", "p", policy([1, 1, 1, 1]))
    run(kube, clock, memory)
    clock.advance(TICK_S)
    kube.put_policy("ns", "p", policy([1, 1, 1, 2], cooldownSeconds=60, minImprovement=0.2))
    quiet = run(kube, clock, memory)
    assert (quiet.published, quiet.trigger) == (False, None)
    clock.advance(TICK_S)
    kube.put_policy("ns", "p", policy([1, 1, 1, 2], strategy="range", cooldownSeconds=60))
    assert run(kube, clock, memory).trigger == "SpecChanged"


def test_after_a_restart_an_unseen_generation_counts_as_a_spec_change() -> None:
    kube, clock = FakeKube(), Clock()
    kube.put_policy("ns", "p", policy([1, 1, 1, 1]))
    run(kube, clock, PolicyMemory())
    kube.put_policy("ns", "p", policy([1, 1, 1, 2]))
    clock.advance(TICK_S)
    assert run(kube, clock, PolicyMemory()).trigger == "SpecChanged", "the safe side: replan"


def test_a_change_of_replicas_is_never_held_by_the_cooldown() -> None:
    kube, clock, memory = FakeKube(), Clock(), PolicyMemory()
    kube.put_policy("ns", "p", policy([300, 10, 300, 10], cooldownSeconds=600))
    run(kube, clock, memory)
    clock.advance(1)
    kube.put_policy("ns", "p", policy([300, 10, 300, 10], replicas=3, cooldownSeconds=600))
    grown = run(kube, clock, memory)
    assert grown.published and grown.trigger == "SpecChanged"


def test_the_interval_publishes_only_a_plan_that_improves_enough() -> None:
    """Six partitions on two replicas; g-0's at 100 + e, g-1's at 100 - e: imbalance 1 + e/100,
    below the threshold, so nothing hurries; swapping one pair improves by 2e / (300 + 3e). At
    each interval (60 s) the target is recomputed: with e = 5 (3 % better) nothing is published,
    with e = 18 (10.2 % better, from 65 s on) the interval at 120 s publishes."""
    kube, clock, memory = FakeKube(), Clock(), PolicyMemory()
    kube.put_policy("ns", "p", policy([100] * 6, interval="60s", cooldownSeconds=0))
    run(kube, clock, memory)
    plan = {m["instanceId"]: m["partitions"] for m in status(kube)["members"]}
    heavy = {int(name.rsplit("-", 1)[1]) for name in plan["g-0"]}

    results = []
    for tick in range(1, 30):  # to 145 s
        e = 5 if tick * TICK_S < 65 else 18
        lags = [100 + e if p in heavy else 100 - e for p in range(6)]
        kube.put_policy("ns", "p", policy(lags, interval="60s", cooldownSeconds=0))
        clock.advance(TICK_S)
        results.append((tick * TICK_S, run(kube, clock, memory)))
    published = [(at, result.trigger) for at, result in results if result.published]
    assert published and published[0] == (120, "Interval"), published
    assert status(kube)["imbalance"] < 1.07


def test_a_change_the_move_budget_cut_short_continues_a_cooldown_apart() -> None:
    """range, no lag, maxMovesPerRebalance 1: two replicas become four. The change moves one
    partition at once; every further step (`CountsUneven`) waits for the cooldown, until each
    replica holds two."""
    kube, clock, memory = FakeKube(), Clock(), PolicyMemory()
    idle = [0] * 8
    kube.put_policy("ns", "p", policy(idle, strategy="range", cooldownSeconds=20, maxMovesPerRebalance=1))
    run(kube, clock, memory)
    kube.put_policy(
        "ns", "p", policy(idle, replicas=4, strategy="range", cooldownSeconds=20, maxMovesPerRebalance=1)
    )
    steps = []
    for tick in range(1, 60):
        clock.advance(TICK_S)
        result = run(kube, clock, memory)
        if result.published and result.trigger == "CountsUneven":
            steps.append(tick * TICK_S)
    counts = sorted(len(m["partitions"]) for m in status(kube)["members"])
    assert counts == [2, 2, 2, 2]
    assert steps and all(later - earlier >= 20 for earlier, later in itertools.pairwise(steps))


def autoscaled(total: int, down_window: int) -> dict[str, Any]:
    spec = policy([total])
    spec["consumers"] = {
        "autoscale": {
            "min": 1,
            "max": 5,
            "targetLagPerReplica": 100,
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": down_window}},
        }
    }
    return spec


def test_autoscale_scales_up_at_the_next_run_and_down_only_after_the_window() -> None:
    kube, clock, memory = FakeKube(), Clock(), PolicyMemory()
    kube.put_policy("ns", "p", autoscaled(100, down_window=60))
    run(kube, clock, memory)
    assert status(kube)["replicas"] == 1
    kube.put_policy("ns", "p", autoscaled(450, down_window=60))
    clock.advance(TICK_S)
    run(kube, clock, memory)
    assert status(kube)["replicas"] == 5, "up at once"
    kube.put_policy("ns", "p", autoscaled(100, down_window=60))
    seen = []
    for _ in range(14):  # 70 s
        clock.advance(TICK_S)
        run(kube, clock, memory)
        seen.append(status(kube)["replicas"])
    # The last recommendation of 5 was at 5 s; down to 1 once it is 60 s old (at 65 s).
    assert seen == [5] * 11 + [1] * 3


def test_after_a_restart_autoscale_does_not_scale_down_within_the_first_window() -> None:
    kube, clock = FakeKube(), Clock()
    kube.put_policy("ns", "p", autoscaled(450, down_window=60))
    run(kube, clock, PolicyMemory())
    assert status(kube)["replicas"] == 5
    kube.put_policy("ns", "p", autoscaled(100, down_window=60))
    restarted = PolicyMemory()
    seen = []
    for _ in range(13):
        clock.advance(TICK_S)
        run(kube, clock, restarted)
        seen.append(status(kube)["replicas"])
    # The new memory starts at 5 s as if 5 had been recommended then: down at 65 s.
    assert seen == [5] * 12 + [1]


def test_a_lag_driven_proposal_stands_while_it_waits_for_approval() -> None:
    kube, clock, memory = FakeKube(), Clock(), PolicyMemory()
    manual = {"approval": "manual", "cooldownSeconds": 0}
    kube.put_policy("ns", "p", policy([300, 10, 300, 10], **manual))
    run(kube, clock, memory)
    kube.put_policy("ns", "p", policy(hot_on_one_replica(kube, 4), **manual))
    ids = []
    for _ in range(4):
        clock.advance(TICK_S)
        run(kube, clock, memory)
        ids.append((status(kube).get("proposal") or {}).get("id"))
    assert ids[0] is not None and ids == [ids[0]] * 4
    assert status(kube)["proposal"]["trigger"] == "ImbalanceExceeded"
