"""A settled policy's check (reconcile `begin_settled_check` / `finish_settled_check`): what it
compares, and that a source whose read follows from its settings is not read again while the
policy's inputs stay (docs/design.md §8.3, "a parked policy reads its lag only when its source
can move it")."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

from groupops.controller.cache import Caches
from groupops.controller.events import EventSink
from groupops.controller.heartbeats import HeardProgress, HeartbeatGuard
from groupops.controller.metrics import Metrics
from groupops.controller.reconcile import Deps, PolicyMemory, begin_settled_check, finish_settled_check
from groupops.controller.settings import Settings
from groupops.controller.settled import Settled, comparable
from groupops.controller.spec import parse_policy
from groupops.lag import LagSnapshot
from groupops.lag.registry import SourceContext
from groupops.model import Plan
from groupops.planner.plan_format import PublishedPlan

LAGS = {"t": (4, 5)}
LEASES = ("p-0", "p-1")


class StampedCaches:
    """Plays `Caches.versions`: one stamp, moved by `touch`."""

    def __init__(self) -> None:
        self.stamp = 1

    def versions(self, namespace: str, label_selector: str) -> tuple[object, ...]:
        return (self.stamp,)

    def touch(self) -> None:
        self.stamp += 1


class Progress:
    """Plays the heartbeat book's `progress_of`: every replica reports `since_poll_s`."""

    def __init__(self) -> None:
        self.since_poll_s = 0.0

    def progress_of(self, namespace: str, lease: str) -> HeardProgress:
        return HeardProgress(progress={"poll": self.since_poll_s}, heard_at=time.time(), policy="p")


def body(lag_source: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "p", "resourceVersion": "7"},
        "spec": {
            "kafka": {"bootstrapServers": "k:9092"},
            "groupId": "g",
            "topics": ["t"],
            "strategy": {"type": "range"},
            "lagSource": dict(lag_source),
            "consumers": {"replicas": 2},
        },
    }


def settled_memory(policy: Mapping[str, Any], caches: StampedCaches) -> tuple[PolicyMemory, list[int]]:
    """A memory as a settled full run of `policy` leaves it, and the count of its lag reads."""
    reads: list[int] = []
    snapshot = LagSnapshot(group_id="g", taken_at=time.time(), lags=dict(LAGS))

    def read() -> LagSnapshot:
        reads.append(1)
        return LagSnapshot(group_id="g", taken_at=time.time(), lags=dict(LAGS))

    memory = PolicyMemory()
    memory.settled = Settled(
        inputs=("7", caches.versions("ns", "")),
        lag=comparable(snapshot),
        spec=parse_policy(policy["spec"]),
        client_config={},
        previous=PublishedPlan(plan=Plan(epoch=1, strategy="range", assignment={})),
        has_plan=True,
        leases=LEASES,
        until=time.monotonic() + 60,
        reader=(SourceContext(bootstrap_servers="k:9092"), read),
    )
    return memory, reads


def deps(caches: StampedCaches, progress: Progress, metrics: Metrics) -> Deps:
    return Deps(
        client=None,  # type: ignore[arg-type]
        settings=Settings(),
        metrics=metrics,
        events=cast(EventSink, None),
        caches=cast(Caches, caches),
        heartbeats=cast(HeartbeatGuard, progress),
    )


def skipped(metrics: Metrics) -> float:
    return metrics.reconciles_skipped.labels("ns", "p")._value.get()


def check(policy: Mapping[str, Any], d: Deps, memory: PolicyMemory) -> tuple[bool, object]:
    """(whether the check got past its inputs, what its second half returned)."""
    begun = begin_settled_check(policy, d, memory)
    if begun is None:
        return False, None
    return True, finish_settled_check(begun, wait_s=1.0)


def test_a_static_source_is_not_read_while_the_inputs_stay_and_the_check_skips() -> None:
    policy = body({"type": "static", "static": {"lags": {"t": list(LAGS["t"])}}})
    caches, progress, metrics = StampedCaches(), Progress(), Metrics()
    memory, reads = settled_memory(policy, caches)
    d = deps(caches, progress, metrics)
    for n in range(1, 4):
        assert check(policy, d, memory) == (True, None)
        assert skipped(metrics) == n
    assert reads == [], "a fixed source's settled check reads nothing"


def test_a_fixed_source_still_answers_its_inputs_and_its_replicas_progress() -> None:
    policy = body({"type": "static", "static": {"lags": {"t": list(LAGS["t"])}}})
    caches, progress, metrics = StampedCaches(), Progress(), Metrics()
    memory, reads = settled_memory(policy, caches)
    d = deps(caches, progress, metrics)
    progress.since_poll_s = 60.0  # the replicas stopped polling: status must show it
    got_past, taken = check(policy, d, memory)
    assert got_past and taken is not None
    snapshot, degraded, windows = cast(tuple[LagSnapshot, Any, Any], taken)
    assert snapshot.lags == LAGS and snapshot.taken_at > 0 and degraded is None and windows is None
    progress.since_poll_s = 0.0
    caches.touch()  # one of the policy's objects changed: the policy runs in full, nothing read
    assert check(policy, d, memory) == (False, None)
    assert (
        check({**policy, "metadata": {**policy["metadata"], "resourceVersion": "8"}}, d, memory)[0] is False
    )
    assert reads == [] and skipped(metrics) == 0


def test_a_source_that_can_move_is_read_at_every_check() -> None:
    policy = body({"type": "prometheus", "prometheus": {"url": "http://prom:9090"}})
    caches, progress, metrics = StampedCaches(), Progress(), Metrics()
    memory, reads = settled_memory(policy, caches)
    d = deps(caches, progress, metrics)
    assert check(policy, d, memory) == (True, None)
    assert check(policy, d, memory) == (True, None)
    assert len(reads) == 2 and skipped(metrics) == 2
