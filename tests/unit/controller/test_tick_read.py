"""The tick's lag read starts before the run (docs/design.md §8.3, "the tick's lag read starts
before its run"): a run given the read its loop started plans on it without reading again, when
the read was made as the run would make it (same spec, Secrets and plan); otherwise the run reads
itself, with what it finds now."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from groupops.controller.events import EventSink
from groupops.controller.lagfleet import KafkaClusterReaders
from groupops.controller.metrics import Metrics
from groupops.controller.reconcile import Deps, PolicyMemory, reconcile, start_tick_read
from groupops.controller.settings import ReconcileSettings, Settings
from groupops.lag import LagSnapshot
from groupops.lag.registry import SourceContext
from tests.unit.controller.fake_kube import FakeKube

SPEC: dict[str, Any] = {
    "kafka": {"bootstrapServers": "k:9092"},
    "groupId": "g",
    "topics": ["t"],
    "strategy": {"type": "lag"},
    "lagSource": {"type": "kafka", "kafka": {"timeoutSeconds": 4}},
    "consumers": {"replicas": 3},
}


class MovingReaders:
    """Stands in for `KafkaClusterReaders`: each read answers the lags set now, and is counted."""

    def __init__(self) -> None:
        self.lags = [50, 40, 30, 20, 10, 10]
        self.reads: list[list[str]] = []

    def source(self, spec: Mapping[str, Any], context: SourceContext) -> MovingReaders:
        return self

    def read(self, group_id: str, topics: Sequence[str]) -> LagSnapshot:
        self.reads.append(list(topics))
        return LagSnapshot(group_id=group_id, taken_at=0.0, lags={topic: list(self.lags) for topic in topics})

    def close(self) -> None:
        pass


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="lag") as executor:
        yield executor


def deps_of(kube: FakeKube, readers: MovingReaders, pool: ThreadPoolExecutor | None) -> Deps:
    return Deps(
        client=kube,  # type: ignore[arg-type]
        settings=replace(Settings(), reconcile=ReconcileSettings(status_figures_seconds=0)),
        metrics=Metrics(),
        events=EventSink(kube),  # type: ignore[arg-type]
        wall_clock=lambda: datetime(2025, 1, 1, tzinfo=UTC),
        kafka_readers=cast(KafkaClusterReaders, readers),
        lag_pool=pool,
    )


def total_lag(kube: FakeKube) -> int:
    return int(kube.policy("ns", "p")["status"]["totalLag"])


def test_a_run_plans_on_the_tick_read_without_reading_again(pool: ThreadPoolExecutor) -> None:
    kube, readers = FakeKube(), MovingReaders()
    kube.put_policy("ns", "p", SPEC)
    deps, memory = deps_of(kube, readers, pool), PolicyMemory()
    assert start_tick_read(kube.policy("ns", "p"), deps, memory) is None  # no run got to its lag yet
    assert reconcile(kube.policy("ns", "p"), deps, memory).published
    assert total_lag(kube) == 160 and len(readers.reads) == 1

    readers.lags = [5, 4, 3, 2, 1, 0]  # the offsets moved
    tick = start_tick_read(kube.policy("ns", "p"), deps, memory)
    assert tick is not None and tick.future is not None
    tick.future.result(timeout=5)
    assert len(readers.reads) == 2
    reconcile(kube.policy("ns", "p"), deps, memory, tick_read=tick)
    assert len(readers.reads) == 2, "the run read again instead of taking the tick's read"
    assert total_lag(kube) == 15


def test_a_tick_read_made_with_another_spec_is_left_and_the_run_reads_itself(
    pool: ThreadPoolExecutor,
) -> None:
    kube, readers = FakeKube(), MovingReaders()
    kube.put_policy("ns", "p", SPEC)
    deps, memory = deps_of(kube, readers, pool), PolicyMemory()
    reconcile(kube.policy("ns", "p"), deps, memory)
    tick = start_tick_read(kube.policy("ns", "p"), deps, memory)
    assert tick is not None and tick.future is not None
    tick.future.result(timeout=5)
    assert readers.reads[-1] == ["t"]

    kube.put_policy("ns", "p", {**SPEC, "topics": ["t", "u"]})  # changed after the tick's read
    readers.lags = [7, 7, 7, 7, 7, 7]
    reconcile(kube.policy("ns", "p"), deps, memory, tick_read=tick)
    assert readers.reads[-1] == ["t", "u"], "the run planned on a read of the old spec"
    assert total_lag(kube) == 84


def test_without_a_pool_of_their_own_reads_run_inside_the_run() -> None:
    kube, readers = FakeKube(), MovingReaders()
    kube.put_policy("ns", "p", SPEC)
    deps, memory = deps_of(kube, readers, None), PolicyMemory()
    reconcile(kube.policy("ns", "p"), deps, memory)
    assert memory.lag_basis is not None
    assert start_tick_read(kube.policy("ns", "p"), deps, memory) is None
