"""A new group whose policy reads lag from a real Prometheus (the `prometheus` source, the
kafka_exporter metric set served from the broker's offsets by tests/monitoring/exporters.py):
the exporter has no series for a group that never committed, so the policy plans by Kafka's
partition counts and says `Degraded=True NoLagSeries`; its replicas start and consume all the
same; once the exporter reports the group (its replicas committed), the next reads plan on lag and
the condition clears.
"""

from __future__ import annotations

from typing import Any

import pytest

from groupops.consumer.audit import load_journals
from groupops.devstack.prometheus import PrometheusServer
from tests.e2e.consumer_e2e import PolicyStack, StackFactory
from tests.e2e.runtime_support import SteadyProducer
from tests.e2e.waiting import wait_for
from tests.monitoring.exporters import ExporterServer

pytestmark = [pytest.mark.e2e, pytest.mark.no_time_bound]

PARTITIONS = 4
REPLICAS = 2


def degraded(stack: PolicyStack) -> dict[str, Any] | None:
    conditions = stack.status().get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Degraded"), None)


def test_a_new_group_on_the_prometheus_source_starts_on_partition_counts_then_plans_on_lag(
    new_stack: StackFactory, tmp_path: Any
) -> None:
    with (
        new_stack(partitions=PARTITIONS) as s,
        ExporterServer(s.bootstrap) as exporter,
        PrometheusServer(tmp_path / "prometheus", {"exporters": [exporter.address]}) as prometheus,
    ):
        prometheus.wait_for_targets_up(60)
        s.apply(
            strategy={"type": "lag", "autoOffsetReset": "earliest"},
            lagSource={
                "type": "prometheus",
                "prometheus": {"url": prometheus.url, "exporter": "kafka_exporter"},
            },
            consumers={"replicas": REPLICAS},
        )
        identities = [s.identity(i) for i in range(REPLICAS)]
        wait_for(
            "a plan of every partition acknowledged by both replicas",
            lambda: s.settled(identities),
            240,
            explain=s.diagnostics,
        )
        condition = degraded(s)
        assert condition is not None and condition.get("status") == "True", s.status()
        assert condition.get("reason") == "NoLagSeries"
        assert s.topic in condition.get("message", "")

        producer = SteadyProducer(s.bootstrap, s.topic, PARTITIONS, total=2000, rate=400).start()
        report = s.wait_processed(producer.wait().acked)
        assert report.overlaps == [] and report.unexplained == []
        assert {r.identity for r in load_journals(s.record_dir).processed} == set(identities)

        exporter.serve(s.group_id, [s.topic])
        wait_for(
            "the condition cleared by a read with series",
            lambda: (c := degraded(s)) is not None and c.get("status") == "False",
            90,
            interval=1,
            explain=lambda: str(s.status()),
        )
        assert isinstance(s.status().get("totalLag"), int)
