"""One reconcile of policy `ns/p` on FakeKube with stand-in Kafka lag readers, for the unit tests
of the lag step and what it feeds (metrics, time lag, sources without series)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from groupops.controller.events import EventSink
from groupops.controller.heartbeats import HeartbeatGuard
from groupops.controller.lagfleet import KafkaClusterReaders
from groupops.controller.metrics import Metrics
from groupops.controller.reconcile import Deps, PolicyMemory, reconcile
from groupops.controller.settings import Settings
from tests.unit.controller.fake_kube import FakeKube

__all__ = ["reconcile_with_readers"]


def reconcile_with_readers(
    kube: FakeKube,
    readers: object,
    memory: PolicyMemory | None = None,
    *,
    metrics: Metrics | None = None,
    wall_clock: Callable[[], datetime] = lambda: datetime(2025, 1, 1, tzinfo=UTC),
    heartbeats: HeartbeatGuard | None = None,
    settings: Settings | None = None,
) -> Any:
    """`readers` plays `KafkaClusterReaders` (only what the test's lag step calls)."""
    deps = Deps(
        client=kube,  # type: ignore[arg-type]
        settings=settings or Settings(),
        metrics=metrics or Metrics(),
        events=EventSink(kube),  # type: ignore[arg-type]
        wall_clock=wall_clock,
        kafka_readers=cast(KafkaClusterReaders, readers),
        heartbeats=heartbeats,
    )
    return reconcile(kube.policy("ns", "p"), deps, memory or PolicyMemory())
