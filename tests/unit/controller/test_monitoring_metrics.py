"""The monitoring metrics the reconcile sets (controller/metrics.py; the alerts and the dashboard
watch them): the lag source's health and the age of the lag planned with, the members behind the
published plan, the handoffs in flight and the fences, run by run against an in-memory API."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from groupops.controller.metrics import Metrics
from groupops.controller.reconcile import PolicyMemory
from groupops.controller.render_plan import read_plan_configmap
from groupops.lag import LagSnapshot, LagSourceUnavailable
from groupops.lag.registry import SourceContext
from groupops.model import MemberId
from groupops.planner.plan_format import (
    LeaseRecord,
    LeaseState,
    PublishedPlan,
    format_micro_time,
    lease_record_annotations,
)
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.reconcile_support import reconcile_with_readers
from tests.unit.controller.test_reconcile_steps import Clock

LAGS = {"t": [10, 10, 10]}
"""Three equal partitions for three replicas: one each, so a scale-down to two moves exactly one."""

STATIC: dict[str, Any] = {
    "kafka": {"bootstrapServers": "k:9092"},
    "groupId": "g",
    "topics": ["t"],
    "strategy": {"type": "lag"},
    "lagSource": {"type": "static", "static": {"lags": LAGS}},
    "consumers": {"replicas": 3},
}
KAFKA: dict[str, Any] = {**STATIC, "lagSource": {"type": "kafka", "kafka": {}}}
POLICY = {"namespace": "ns", "policy": "p"}


class FlakyReaders:
    """Stands in for `KafkaClusterReaders`: a `kafka` policy's reads answer LAGS, or raise
    `failure` while it is set."""

    def __init__(self) -> None:
        self.failure: Exception | None = None

    def source(self, spec: Any, context: SourceContext) -> FlakyReaders:
        return self

    def read(self, group_id: str, topics: Sequence[str]) -> LagSnapshot:
        if self.failure is not None:
            raise self.failure
        return LagSnapshot(group_id=group_id, taken_at=0.0, lags=LAGS)

    def close(self) -> None:
        pass


class World:
    """One policy `ns/p`, its operator memory and metrics, and the replicas' side of its Leases."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.kube, self.clock, self.memory, self.metrics = FakeKube(), Clock(), PolicyMemory(), Metrics()
        self.readers = FlakyReaders()
        self.kube.put_policy("ns", "p", spec)

    def run(self) -> Any:
        result = reconcile_with_readers(
            self.kube, self.readers, self.memory, metrics=self.metrics, wall_clock=self.clock
        )
        self.clock.advance(1)
        return result

    def value(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, {**POLICY, **labels})

    def plan(self) -> PublishedPlan:
        observed = read_plan_configmap(self.kube.get("v1", "ConfigMap", "ns", "p-plan"))
        assert observed is not None
        return observed.published

    def acknowledge(self, *identities: str, incarnation: Callable[[str], str] | None = None) -> None:
        """Each replica holds its Lease (taken now), renews it and acknowledges the published
        epoch with the partitions the plan gives it (it has applied the plan). `incarnation`: each
        process's, and it sends heartbeats (else it has none and renews its Lease)."""
        plan = self.plan()
        now = format_micro_time(self.clock.now.timestamp())
        for identity in identities:
            record = LeaseRecord(
                acked_epoch=plan.epoch,
                partitions=tuple(plan.plan.assignment.get(MemberId(identity), ())),
                state=LeaseState.ACTIVE,
                incarnation=None if incarnation is None else incarnation(identity),
                heartbeats=incarnation is not None,
            )
            self.kube.patch(
                "coordination.k8s.io/v1",
                "Lease",
                "ns",
                f"p-{identity}",
                {
                    "metadata": {"annotations": lease_record_annotations(record, identity)},
                    "spec": {"holderIdentity": f"{identity}-process", "acquireTime": now, "renewTime": now},
                },
            )

    def silence(self, identity: str) -> None:
        """The operator has seen the replica's Lease unchanged for a minute (it died holding it)."""
        lease = self.kube.get("coordination.k8s.io/v1", "Lease", "ns", f"p-{identity}")
        assert lease is not None
        name = MemberId(f"p-{identity}")
        self.memory.clock.forget(name)
        self.memory.clock.observe(name, lease["spec"]["renewTime"], time.monotonic() - 60, lifetime=4)


def scaled(spec: dict[str, Any], replicas: int) -> dict[str, Any]:
    return {**spec, "consumers": {**spec["consumers"], "replicas": replicas}}


# -- lag source -------------------------------------------------------------------------------------


def test_a_failed_lag_read_sets_the_source_down_and_counts_and_a_good_read_sets_it_up() -> None:
    world = World(KAFKA)
    world.run()
    assert world.value("groupops_lag_source_up", source="kafka") == 1
    assert world.value("groupops_lag_read_failures_total", source="kafka") is None
    fresh = world.value("groupops_lag_age_seconds")
    assert fresh is not None and 0 <= fresh < 1, "a fresh read is planned with at once"

    world.readers.failure = LagSourceUnavailable("connection refused (k:9092)")
    world.run()  # plans on the last good lag, Degraded
    assert world.value("groupops_lag_source_up", source="kafka") == 0
    assert world.value("groupops_lag_read_failures_total", source="kafka") == 1
    stale = world.value("groupops_lag_age_seconds")
    assert stale is not None and stale > fresh, "the last good lag grows older"
    world.run()
    assert world.value("groupops_lag_read_failures_total", source="kafka") == 2, "one per failing run"

    world.readers.failure = None
    world.run()
    assert world.value("groupops_lag_source_up", source="kafka") == 1
    assert world.value("groupops_lag_read_failures_total", source="kafka") == 2
    healed = world.value("groupops_lag_age_seconds")
    assert healed is not None and healed < stale


def test_switching_the_lag_source_type_drops_the_old_sources_series() -> None:
    world = World(STATIC)
    world.run()
    assert world.value("groupops_lag_source_up", source="static") == 1
    world.readers.failure = LagSourceUnavailable("connection refused (k:9092)")
    world.kube.put_policy("ns", "p", KAFKA)
    world.run()  # the static lag read last is still known: planned on, Degraded
    assert world.value("groupops_lag_source_up", source="kafka") == 0
    assert world.value("groupops_lag_source_up", source="static") is None


# -- the published plan -----------------------------------------------------------------------------


def test_members_behind_plan_counts_the_members_that_have_not_acknowledged_its_epoch() -> None:
    world = World(STATIC)
    world.run()
    assert world.plan().epoch == 1
    assert world.value("groupops_members_behind_plan") == 3, "no replica has started yet"
    world.acknowledge("g-0", "g-1")
    world.run()
    assert world.value("groupops_members_behind_plan") == 1
    world.acknowledge("g-2")
    world.run()
    assert world.value("groupops_members_behind_plan") == 0


def test_a_pending_release_is_a_handoff_in_flight_until_it_settles() -> None:
    world = World(STATIC)
    world.run()
    world.acknowledge("g-0", "g-1", "g-2")
    world.run()
    assert world.value("groupops_handoffs_in_flight") == 0
    assert world.value("groupops_oldest_handoff_seconds") == 0

    world.kube.put_policy("ns", "p", scaled(STATIC, 2))
    world.run()  # g-2's partition leaves its set in epoch 2 and waits for g-2 to let it go
    assert [release.identity for release in world.plan().releasing.values()] == ["g-2"]
    assert world.value("groupops_handoffs_in_flight") == 1
    assert world.value("groupops_oldest_handoff_seconds") == 0, "published by this very run"
    assert world.value("groupops_members_behind_plan") == 3, "nobody has applied epoch 2 yet"

    world.clock.advance(5)
    world.run()  # nothing changed: the gauges still follow the plan's age
    assert world.value("groupops_handoffs_in_flight") == 1
    assert world.value("groupops_oldest_handoff_seconds") == 6

    world.acknowledge("g-0", "g-1", "g-2")
    world.run()  # g-2 acknowledged its release: the partition goes to its new owner
    assert world.plan().releasing == {}
    assert world.value("groupops_handoffs_in_flight") == 0
    assert world.value("groupops_oldest_handoff_seconds") == 0


def test_the_epoch_that_completes_a_move_is_told_and_counted_as_handoff() -> None:
    """The epoch that grants a released partition to its new owner names `Handoff`: the plan
    before it left that partition out only because it was releasing, not because a topic changed."""
    world = World(STATIC)
    world.run()
    world.acknowledge("g-0", "g-1", "g-2")
    world.run()
    world.kube.put_policy("ns", "p", scaled(STATIC, 2))
    world.run()
    world.acknowledge("g-0", "g-1", "g-2")
    world.run()
    assert world.plan().releasing == {}
    assert world.value("groupops_rebalances_total", trigger="Handoff") == 1
    assert world.value("groupops_rebalances_total", trigger="PartitionsChanged") is None
    messages = [e["message"] for e in world.kube.list("v1", "Event", "ns") if e["reason"] == "Rebalanced"]
    assert messages[-1].startswith(f"epoch {world.plan().epoch} (Handoff): "), messages


def test_the_figures_before_a_plan_count_the_partitions_still_releasing_with_their_owner() -> None:
    """Two replicas own two partitions of lag 10 each; scaled to four, each gives one up. Until the
    move completes the old owners still hold them: the status imbalance and the Event's "was"
    are of what is held (20 a replica), not of the half plan (10)."""
    spec = {**STATIC, "lagSource": {"type": "static", "static": {"lags": {"t": [10, 10, 10, 10]}}}}
    world = World(scaled(spec, 2))
    world.run()
    world.acknowledge("g-0", "g-1")
    world.run()
    world.kube.put_policy("ns", "p", scaled(spec, 4))
    world.run()  # the new replicas' pods and Leases
    world.acknowledge("g-0", "g-1", "g-2", "g-3")
    world.run()  # they take part: one partition each leaves g-0 and g-1
    world.acknowledge("g-0", "g-1", "g-2", "g-3")
    assert sorted(str(r.identity) for r in world.plan().releasing.values()) == ["g-0", "g-1"]
    world.run()
    assert world.plan().releasing == {}
    messages = [e["message"] for e in world.kube.list("v1", "Event", "ns") if e["reason"] == "Rebalanced"]
    assert messages[-1].startswith(f"epoch {world.plan().epoch} (Handoff): "), messages
    assert messages[-1].endswith("max member lag 10 (was 20)"), messages


# -- fences -----------------------------------------------------------------------------------------


def test_fencing_an_expired_replica_counts_one_fence_and_it_is_no_longer_behind() -> None:
    world = World(STATIC)
    world.run()
    world.acknowledge("g-0", "g-1", "g-2")
    world.run()
    assert world.value("groupops_fences_total") is None

    world.silence("g-2")
    world.run()  # g-2 is fenced through epoch 1; epoch 2 gives its partition to the others
    lease = world.kube.get("coordination.k8s.io/v1", "Lease", "ns", "p-g-2")
    assert lease is not None
    assert lease["metadata"]["annotations"]["groupops.dev/released-through"] == "1"
    assert world.value("groupops_fences_total") == 1
    assert world.value("groupops_members_behind_plan") == 2, "the fenced g-2 is not waited for"

    world.run()
    assert world.value("groupops_fences_total") == 1, "a void Lease is not fenced again"
    assert world.value("groupops_members_behind_plan") == 2, "nor counted behind from its Lease"


# -- policy deletion --------------------------------------------------------------------------------


def world_with_every_series() -> World:
    """A policy run twice: acknowledged, one replica silent, then its lag source failing."""
    world = World(KAFKA)
    world.run()
    world.acknowledge("g-0", "g-1", "g-2")
    world.silence("g-2")
    world.readers.failure = LagSourceUnavailable("connection refused (k:9092)")
    world.run()
    return world


@pytest.mark.parametrize(
    ("name", "labels"),
    [
        pytest.param("groupops_lag_source_up", {"source": "kafka"}, id="lag-source-up"),
        pytest.param("groupops_lag_read_failures_total", {"source": "kafka"}, id="lag-read-failures"),
        pytest.param("groupops_lag_age_seconds", {}, id="lag-age"),
        pytest.param("groupops_members_behind_plan", {}, id="members-behind-plan"),
        pytest.param("groupops_handoffs_in_flight", {}, id="handoffs-in-flight"),
        pytest.param("groupops_oldest_handoff_seconds", {}, id="oldest-handoff"),
        pytest.param("groupops_fences_total", {}, id="fences"),
    ],
)
def test_a_deleted_policys_series_are_forgotten(name: str, labels: dict[str, str]) -> None:
    world = world_with_every_series()
    assert world.value(name, **labels) is not None
    world.metrics.forget("ns", "p")
    assert world.value(name, **labels) is None


def test_after_forget_no_series_of_the_policy_is_left_in_the_registry() -> None:
    world = world_with_every_series()

    def policy_series() -> set[str]:
        return {
            sample.name
            for family in world.metrics.registry.collect()
            for sample in family.samples
            if sample.labels.get("namespace") == "ns" and sample.labels.get("policy") == "p"
        }

    assert {"groupops_rebalances_total", "groupops_reconcile_duration_seconds_count"} <= policy_series()
    world.metrics.forget("ns", "p")
    assert policy_series() == set()


def test_a_series_set_again_with_the_same_values_stays_and_one_forgotten_comes_back() -> None:
    # The policy's labelled series remember what was set last, so a settled check that finds the
    # same values writes nothing: the series must still read those values, follow a change, and
    # come back after the policy was forgotten (deleted, then created again under its name).
    metrics = Metrics()

    def read(state: str) -> float | None:
        labels = {"namespace": "ns", "policy": "p", "state": state}
        return metrics.registry.get_sample_value("groupops_partition_status", labels)

    metrics.record_partition_states("ns", "p", {"OK": 3, "STALL": 1})
    metrics.record_partition_states("ns", "p", {"OK": 3, "STALL": 1})
    assert (read("OK"), read("STALL")) == (3, 1)
    metrics.record_partition_states("ns", "p", {"OK": 4})
    assert (read("OK"), read("STALL")) == (4, None)
    metrics.forget("ns", "p")
    assert read("OK") is None
    metrics.record_partition_states("ns", "p", {"OK": 4})
    assert read("OK") == 4
