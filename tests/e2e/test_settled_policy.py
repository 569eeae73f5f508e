"""A settled policy's ticks skip the reconcile (docs/design.md §8.3, "a settled policy's tick"),
and nothing it must answer waits for the resync: the real operator (tick 1 s, resync 15 s),
real consumer processes on heartbeats, the real broker, a `kafka` lag source.

1. Settled (every replica acknowledged, the topic idle, lag 0): ticks are skipped, and a full
   run still comes once per resync.
2. Right after a full run (so the next resync is 15 s away), changes that wake nothing are still
   answered within a few ticks, because a skipping tick compares what it reads: the plan
   ConfigMap deleted (republished, epoch forward), a Role's rules removed (restored), messages
   produced (status shows the lag).
3. A replica SIGKILLed while the policy is settled: its partitions move within the Lease
   duration plus the plan's way through.
4. The journals: every message processed, no partition processed by two replicas at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from groupops.controller.names import consumer_account_name
from groupops.planner.wire import plan_configmap_name
from tests.e2e.consumer_e2e import PolicyStack, StackFactory
from tests.e2e.runtime_support import SteadyProducer, series
from tests.e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

PARTITIONS = 6
REPLICAS = 3
RESYNC_S = 15.0
ANSWER_S = 6.0
"""How long a change that wakes nothing may wait: a few 1 s ticks, well short of the resync."""
SCHEDULING_ALLOWANCE_S = 4.0


def runs(s: PolicyStack) -> tuple[float, float]:
    """(full reconciles, skipped ticks) of the policy so far, from the operator's /metrics."""
    full, skipped = "groupops_reconcile_duration_seconds_count", "groupops_reconciles_skipped_total"
    counts = series(s.operator.metrics_port, (full, skipped), policy=s.name)
    return counts.get(full, 0.0), counts.get(skipped, 0.0)


def right_after_a_full_run(s: PolicyStack) -> None:
    """Return just after a full run of the settled policy (a resync): the next one is a whole
    resync period away, so whatever is answered sooner was answered by a skipping tick."""
    full, _ = runs(s)
    wait_for("a full run (the resync)", lambda: runs(s)[0] > full, RESYNC_S + 10, interval=0.1)


def settled_and_skipping(s: PolicyStack) -> Callable[[], bool]:
    def probe() -> bool:
        _, skipped = runs(s)
        time.sleep(2.5)
        return runs(s)[1] >= skipped + 2

    return probe


def test_a_settled_policy_skips_its_ticks_and_still_answers_every_change_at_once(
    new_stack: StackFactory,
) -> None:
    with new_stack(partitions=PARTITIONS, operator_args=["--resync", str(RESYNC_S)]) as s:
        identities = [s.identity(i) for i in range(REPLICAS)]
        s.apply(consumers={"replicas": REPLICAS})
        wait_for("every replica acknowledging", lambda: s.settled(identities), 120, explain=s.diagnostics)
        producer = SteadyProducer(s.bootstrap, s.topic, PARTITIONS, total=600, rate=200).start()
        produced = producer.wait().acked
        s.wait_processed(produced)

        # 1. Settled: the ticks skip, a full run still comes once per resync.
        wait_for("ticks skipped", settled_and_skipping(s), 90, interval=0.5, explain=s.diagnostics)
        right_after_a_full_run(s)
        full, skipped = runs(s)
        time.sleep(RESYNC_S + 2)
        full_after, skipped_after = runs(s)
        assert skipped_after - skipped >= RESYNC_S / 2, f"only {skipped_after - skipped:.0f} ticks skipped"
        assert 1 <= full_after - full <= 3, f"{full_after - full:.0f} full runs in one resync period"

        # 2. Changes that wake nothing are answered by the next ticks, not the resync.
        epoch = s.plan().epoch  # type: ignore[union-attr]
        right_after_a_full_run(s)
        s.api.delete("ConfigMap", s.namespace, plan_configmap_name(s.name))
        deleted_at = time.monotonic()
        wait_for(
            "the plan republished with a newer epoch",
            lambda: (plan := s.plan()) is not None and plan.epoch > epoch,
            ANSWER_S,
            interval=0.1,
            explain=s.diagnostics,
        )
        print(f"\nplan ConfigMap deleted -> republished in {time.monotonic() - deleted_at:.2f} s")
        wait_for(
            "every replica acknowledging again", lambda: s.settled(identities), 60, explain=s.diagnostics
        )
        wait_for("ticks skipped again", settled_and_skipping(s), 90, interval=0.5, explain=s.diagnostics)

        role = consumer_account_name(s.name, 0)
        right_after_a_full_run(s)
        s.api.patch("Role", s.namespace, role, {"rules": []})
        wait_for(
            "the Role's rules restored",
            lambda: bool((s.api.get("Role", s.namespace, role) or {}).get("rules")),
            ANSWER_S,
            interval=0.1,
            explain=s.diagnostics,
        )
        wait_for("ticks skipped again", settled_and_skipping(s), 90, interval=0.5, explain=s.diagnostics)

        right_after_a_full_run(s)
        more = SteadyProducer(s.bootstrap, s.topic, PARTITIONS, total=3000, rate=1000).start()
        wait_for(
            "status showing the new lag",
            lambda: int(s.status().get("totalLag") or 0) > 0,
            ANSWER_S,
            interval=0.1,
            explain=s.diagnostics,
        )
        produced += more.wait().acked
        s.wait_processed(produced)

        # 3. A crash of a replica that owns partitions, while settled.
        wait_for("ticks skipped again", settled_and_skipping(s), 90, interval=0.5, explain=s.diagnostics)
        moved_after = s.seconds_until_moved(1, s.kubelet.crash, "crashed")
        print(f"crash -> partitions moved in the plan: {moved_after:.2f} s (lease {s.lease_seconds} s)")
        assert moved_after <= s.lease_seconds + SCHEDULING_ALLOWANCE_S

        # 4. Nothing lost, nothing processed twice at once.
        last = SteadyProducer(s.bootstrap, s.topic, PARTITIONS, total=600, rate=200).start()
        produced += last.wait().acked
        report = s.wait_processed(produced)
        print(report.summary())
        assert report.overlaps == []
        assert report.unexplained == []
