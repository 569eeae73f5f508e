"""Liveness by heartbeats (docs/design.md §7.5) with the whole product: real operator, real
consumer processes, real broker.

- Settled replicas stay alive on heartbeats alone: no Lease is written for seconds on end while
  the operator grants their heartbeats.
- The operator SIGKILLed: every replica keeps consuming (it renews its Lease instead), and when
  the operator is back the Leases go quiet again.
- A frozen replica's heartbeats stop: its partitions move within the Lease duration (plus a
  plan's way through), and after it thaws it processes nothing beside its successor.
"""

from __future__ import annotations

import time

import pytest

from groupops.planner.wire import lease_name
from tests.e2e.consumer_e2e import PolicyStack, StackFactory
from tests.e2e.runtime_support import SteadyProducer, total
from tests.e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

PARTITIONS = 6
REPLICAS = 3
QUIET_S = 8.0
SCHEDULING_ALLOWANCE_S = 4.0


def lease_versions(s: PolicyStack) -> dict[str, str]:
    versions = {}
    for ordinal in range(REPLICAS):
        lease = s.api.get("Lease", s.namespace, lease_name(s.name, s.identity(ordinal)))
        assert lease is not None
        versions[s.identity(ordinal)] = str(lease["metadata"]["resourceVersion"])
    return versions


def granted(s: PolicyStack) -> float:
    """Heartbeats the operator granted since its current start."""
    return total(s.operator.metrics_port, "groupops_operator_heartbeats_total", answer="granted")


def processed(s: PolicyStack, ordinal: int) -> float:
    return s.metric_total(s.identity(ordinal), "groupops_consumer_messages_processed_total")


def test_heartbeats_keep_replicas_alive_without_lease_writes_and_leases_take_over_when_the_operator_is_gone(
    new_stack: StackFactory,
) -> None:
    with new_stack(partitions=PARTITIONS, lease_seconds=None, operator_tick=None) as s:
        identities = [s.identity(i) for i in range(REPLICAS)]
        s.apply(strategy={"type": "range", "autoOffsetReset": "earliest"}, consumers={"replicas": REPLICAS})
        wait_for(
            "every replica acknowledging",
            lambda: s.settled(identities),
            120,
            interval=0.5,
            explain=s.diagnostics,
        )
        producer = SteadyProducer(s.bootstrap, s.topic, PARTITIONS, total=6000, rate=200).start()

        # 1. Steady state: the operator grants heartbeats, nobody writes a Lease.
        wait_for("granted heartbeats", lambda: granted(s) >= 2 * REPLICAS, 30, interval=0.5)
        before, grants = lease_versions(s), granted(s)
        time.sleep(QUIET_S)
        assert lease_versions(s) == before, f"Leases written at steady state\n{s.state()}"
        assert granted(s) - grants >= REPLICAS * (QUIET_S - 2), "heartbeats were not granted every second"

        # 2. No operator: the replicas renew their Leases and keep consuming.
        s.operator.kill()
        counts = [processed(s, i) for i in range(REPLICAS)]
        time.sleep(3 * s.lease_seconds)
        changed = {k for k, v in lease_versions(s).items() if v != before[k]}
        assert changed == set(identities), "without an operator every replica must renew its Lease"
        assert all(processed(s, i) > counts[i] for i in range(REPLICAS)), "a replica stopped consuming"

        # 3. The operator is back: heartbeats again, the Leases go quiet.
        s.operator.start()
        s.operator.wait_started()
        wait_for("heartbeats granted again", lambda: granted(s) >= 2 * REPLICAS, 60, interval=0.5)
        time.sleep(2.0)
        quiet = lease_versions(s)
        time.sleep(QUIET_S / 2)
        assert lease_versions(s) == quiet, f"Leases still written with the operator back\n{s.state()}"

        # 4. A frozen replica sends no heartbeat: its partitions move, and nothing is processed twice.
        moved_after = s.seconds_until_moved(0, s.kubelet.freeze, "frozen")
        print(f"\nfreeze -> partitions moved in the plan: {moved_after:.2f} s (lease {s.lease_seconds} s)")
        assert moved_after <= s.lease_seconds + SCHEDULING_ALLOWANCE_S
        time.sleep(2.0)
        s.kubelet.thaw(s.pod(0))

        report = s.wait_processed(producer.wait().acked)
        print(report.summary())
        assert report.overlaps == []
        assert report.unexplained == []
