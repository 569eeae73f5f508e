"""A busy group whose strategy plans on counts settles on the shape of its lag (docs/design.md
§8.3, "a busy policy that plans on counts settles on the shape of its lag"): the real operator
(tick 1 s, figures every 6 s), real consumer processes on heartbeats, the real broker, `range`
with a `kafka` lag source, and messages arriving the whole time, so its lag differs at every read.

1. Busy and settled: most ticks are skipped, the total-lag gauge follows the lag between full
   runs, and status shows the lag at the figures' pace.
2. The topic grows while busy: the plan covers the new partitions within a few ticks.
3. A replica SIGKILLed while busy: its partitions move within the Lease duration and the plan's
   way through.
4. The lag gone: gauge and status show 0; every message processed, none by two replicas at once.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.e2e.consumer_e2e import PolicyStack, StackFactory
from tests.e2e.runtime_support import SteadyProducer, series
from tests.e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

PARTITIONS = 6
PARTITIONS_LATER = 9
REPLICAS = 3
FIGURES_S = 6.0
WINDOW_S = 12.0
ANSWER_S = 6.0
SCHEDULING_ALLOWANCE_S = 4.0


def operator_series(s: PolicyStack) -> dict[str, float]:
    """The policy's full reconciles, skipped ticks and total-lag gauge, from the operator."""
    absent = {
        "groupops_reconcile_duration_seconds_count": 0.0,
        "groupops_reconciles_skipped_total": 0.0,
        "groupops_total_lag": -1.0,
    }
    return absent | series(s.operator.metrics_port, tuple(absent), policy=s.name)


def grown_and_acknowledged(s: PolicyStack, identities: list[str]) -> bool:
    """`PolicyStack.settled` for the grown topic."""
    plan = s.plan()
    if plan is None or plan.releasing:
        return False
    owned = sum(len(tps) for tps in plan.plan.assignment.values())
    return owned == PARTITIONS_LATER and all(s.acked(i) == plan.epoch for i in identities)


def test_a_busy_range_group_skips_its_ticks_and_still_answers_growth_crashes_and_figures(
    new_stack: StackFactory,
) -> None:
    with new_stack(partitions=PARTITIONS, operator_args=["--status-figures-interval", str(FIGURES_S)]) as s:
        identities = [s.identity(i) for i in range(REPLICAS)]
        s.apply(consumers={"replicas": REPLICAS})
        wait_for("every replica acknowledging", lambda: s.settled(identities), 120, explain=s.diagnostics)
        producer = SteadyProducer(s.bootstrap, s.topic, PARTITIONS, total=24_000, rate=400).start()

        # 1. Busy: the lag moves at every read, and still most ticks skip.
        time.sleep(4)
        before = operator_series(s)
        gauges: set[float] = set()
        statuses: set[int] = set()
        deadline = time.monotonic() + WINDOW_S
        while time.monotonic() < deadline:
            gauges.add(operator_series(s)["groupops_total_lag"])
            statuses.add(int(s.status().get("totalLag") or 0))
            time.sleep(0.5)
        after = operator_series(s)
        full = (
            after["groupops_reconcile_duration_seconds_count"]
            - before["groupops_reconcile_duration_seconds_count"]
        )
        skipped = after["groupops_reconciles_skipped_total"] - before["groupops_reconciles_skipped_total"]
        print(
            f"\nbusy for {WINDOW_S:g} s: {full:.0f} full runs, {skipped:.0f} ticks skipped, "
            f"{len(gauges)} total-lag gauge values, {len(statuses)} status values"
        )
        assert skipped >= WINDOW_S / 2, f"only {skipped:.0f} of about {WINDOW_S:g} ticks skipped"
        assert full <= WINDOW_S / FIGURES_S + 1, f"{full:.0f} full runs in {WINDOW_S:g} s"
        assert len(gauges) >= 3, f"the total-lag gauge did not follow the lag: {sorted(gauges)}"
        assert len(statuses) >= 2, f"status never showed the moving lag: {sorted(statuses)}"

        # 2. The topic grows while busy: the plan covers the new partitions at once.
        admin = AdminClient({"bootstrap.servers": s.bootstrap})  # kept: a dropped client fails its futures
        admin.create_partitions([NewPartitions(s.topic, PARTITIONS_LATER)])[s.topic].result(timeout=60)
        producer.grow(PARTITIONS_LATER)
        grown_at = time.monotonic()
        wait_for(
            f"the plan covering {PARTITIONS_LATER} partitions",
            lambda: sum(len(tps) for tps in s.sets().values()) == PARTITIONS_LATER,
            ANSWER_S + 5,  # the broker's metadata reaches the lag reader within its refresh
            interval=0.1,
            explain=s.diagnostics,
        )
        print(
            f"partitions {PARTITIONS} -> {PARTITIONS_LATER}: planned in {time.monotonic() - grown_at:.2f} s"
        )
        wait_for(
            "every replica acknowledging the grown plan",
            lambda: grown_and_acknowledged(s, identities),
            60,
            explain=s.diagnostics,
        )

        # 3. A crash while busy.
        moved_after = s.seconds_until_moved(1, s.kubelet.crash, "crashed")
        print(f"crash -> partitions moved in the plan: {moved_after:.2f} s (lease {s.lease_seconds} s)")
        assert moved_after <= s.lease_seconds + SCHEDULING_ALLOWANCE_S

        # 4. The lag gone: the figures show it, and nothing was lost.
        produced = producer.wait().acked
        report = s.wait_processed(produced)
        wait_for(
            "the gauge and status at 0",
            lambda: operator_series(s)["groupops_total_lag"] == 0 and s.status().get("totalLag") == 0,
            FIGURES_S + ANSWER_S,
            interval=0.2,
            explain=s.diagnostics,
        )
        print(report.summary())
        assert report.overlaps == []
        assert report.unexplained == []
