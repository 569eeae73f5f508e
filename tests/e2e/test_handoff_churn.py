"""The churn test: 200,000 messages with unique ids on 12 partitions, then 16, while a 3-replica
policy with the default settings (`autoOffsetReset: latest`) goes through at least 50 plan
changes: lag-driven replans (strategy `lag`, lag read from the broker, skewed and rotating
production), scale 3 -> 5 -> 2, four partitions added mid-run (written to before any replica owns
them), a new replica crashed right after its first acknowledgement, two more crashes, a freeze,
an API cut, a rolling template change; with two operators running all along, the leading one SIGKILLed in the
middle of a handoff (the standby takes over, the killed one comes back as the standby), and the
plan ConfigMap deleted, then replaced by an older plan, under them.

The journal of every process (partition, offset, identity, start, end per message processed)
proves: every produced message processed at least once; no partition processed by two
identities in overlapping time; every duplicate explained by a fault of its first processor
before it committed. The counts are printed.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient, NewPartitions

from groupops.consumer.audit import load_journals
from groupops.model import MemberId
from groupops.planner.wire import plan_configmap_name
from tests.e2e.consumer_e2e import PolicyStack, StackFactory, rewrite_plan_by_hand
from tests.e2e.operator_support import OperatorProcess
from tests.e2e.runtime_support import SteadyProducer
from tests.e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

PARTITIONS = 12
PARTITIONS_LATER = 16
MESSAGES = 200_000
RATE = 1_000.0
LEASE_SECONDS = 4
MIN_PLAN_CHANGES = 50
STARTUP_S = 240.0


class CommittedOffsets:
    """Reads the group's committed offsets every half second; `regressions` lists every
    partition whose committed offset went down between two reads."""

    def __init__(self, stack: PolicyStack) -> None:
        self._admin = AdminClient({"bootstrap.servers": stack.bootstrap})
        self._request = [ConsumerGroupTopicPartitions(stack.group_id)]
        self.highest: dict[int, int] = {}
        self.regressions: list[tuple[int, int, int]] = []
        self.reads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> CommittedOffsets:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                result = self._admin.list_consumer_group_offsets(self._request, request_timeout=10)
                partitions = next(iter(result.values())).result().topic_partitions
            except Exception:  # a failed read is only a missed sample
                continue
            self.reads += 1
            for tp in partitions:
                if tp.offset < 0:
                    continue
                before = self.highest.get(tp.partition, -1)
                if tp.offset < before:
                    self.regressions.append((tp.partition, before, tp.offset))
                self.highest[tp.partition] = max(before, tp.offset)


class Timeline:
    """What the test did, when (printed at the end, and used to explain what the audit sees)."""

    def __init__(self, stack: PolicyStack) -> None:
        self.stack = stack
        self.started = time.time()
        self.events: list[tuple[float, str, int]] = []

    def epoch(self) -> int:
        plan = self.stack.plan()
        return 0 if plan is None else plan.epoch

    def note(self, what: str) -> None:
        self.events.append((time.time() - self.started, what, self.epoch()))
        print(f"  t={self.events[-1][0]:6.1f}s epoch {self.events[-1][2]:3d}  {what}", flush=True)


def patch_policy(stack: PolicyStack, spec: dict[str, Any]) -> None:
    stack.api.patch("ConsumerGroupPolicy", stack.namespace, stack.name, {"spec": spec})


def running_pod(stack: PolicyStack, preferred: list[int]) -> str:
    """The first of the preferred ordinals whose pod runs a process now."""
    names = stack.kubelet.pod_names()
    for ordinal in preferred:
        if stack.pod(ordinal) in names:
            return stack.pod(ordinal)
    raise AssertionError(f"none of {preferred} runs; running: {names}")


def wait_running(stack: PolicyStack, count: int) -> None:
    wait_for(
        f"{count} consumer processes", lambda: len(stack.kubelet.pod_names()) == count, 180, interval=0.5
    )


def leading_operator(*operators: OperatorProcess) -> OperatorProcess:
    return next(operator for operator in operators if operator.leads())


def test_churn_loses_nothing_and_never_shares_a_partition(new_stack: StackFactory, tmp_path: Path) -> None:
    with new_stack(
        partitions=PARTITIONS,
        lease_seconds=LEASE_SECONDS,
        # Slower consumers than the hot partitions: lag builds up where production is hot.
        extra_env={"GROUPOPS_PROCESSOR": "groupops.consumer.processors:sleep_1ms"},
    ) as s:
        standby = OperatorProcess(
            kubeconfig=s.api.kubeconfig,
            namespace=s.namespace,
            log_path=tmp_path / "operator-2.log",
            extra=["--lease-duration", str(LEASE_SECONDS)],
        )
        standby.start()
        try:
            run_churn(s, standby)
        finally:
            standby.stop()
            print(f"--- second operator ---\n{standby.log_tail(30)}")


def run_churn(s: PolicyStack, standby: OperatorProcess) -> None:
    s.apply(
        strategy={"type": "lag"},
        lagSource={"type": "kafka"},
        # Churn is the point: no cooldown, and any improvement replans (docs/design.md §6.5).
        rebalance={"interval": "4s", "imbalanceThreshold": 1.1, "cooldownSeconds": 0, "minImprovement": 0},
        consumers={"replicas": 3},
    )
    wait_for(
        "3 replicas acknowledging the first plan",
        lambda: s.settled([s.identity(i) for i in range(3)]),
        STARTUP_S,
        interval=0.5,
    )
    timeline = Timeline(s)
    first_epoch = timeline.epoch()
    timeline.note("settled with 3 replicas")
    producer = SteadyProducer(
        s.bootstrap, s.topic, PARTITIONS, total=MESSAGES, rate=RATE, hot_share=0.6, hot_rotation_s=15
    ).start()
    committed = CommittedOffsets(s).start()

    time.sleep(8)
    patch_policy(s, {"consumers": {"replicas": 5}})
    timeline.note("scale 3 -> 5")
    wait_running(s, 5)
    # A new replica that dies right after taking its first partitions, before it committed
    # anything it processed: under `latest` its partitions must not skip what it did not commit.
    newcomer = s.identity(4)
    wait_for(
        "the fifth replica acknowledging partitions",
        lambda: (
            (p := s.plan()) is not None
            and bool(p.plan.assignment.get(MemberId(newcomer)))
            and s.acked(newcomer) == p.epoch
        ),
        120,
        interval=0.05,
    )
    s.kubelet.crash(s.pod(4))
    timeline.note(f"crash {s.pod(4)} right after its first acknowledgement")

    time.sleep(5)
    admin = AdminClient({"bootstrap.servers": s.bootstrap})  # kept: a dropped client fails its futures
    admin.create_partitions([NewPartitions(s.topic, PARTITIONS_LATER)])[s.topic].result(timeout=60)
    producer.grow(PARTITIONS_LATER)
    timeline.note(f"partitions {PARTITIONS} -> {PARTITIONS_LATER}")

    time.sleep(8)
    pod = running_pod(s, [1, 0])
    s.kubelet.crash(pod)
    timeline.note(f"crash {pod}")

    time.sleep(10)
    pod = running_pod(s, [2, 3])
    s.kubelet.freeze(pod)
    timeline.note(f"freeze {pod}")
    time.sleep(2.5 * LEASE_SECONDS)
    s.kubelet.thaw(pod)
    timeline.note(f"thaw {pod}")

    time.sleep(8)
    pod = running_pod(s, [3, 4])
    s.kubelet.cut(pod)
    timeline.note(f"cut {pod} from the API server")
    time.sleep(2.5 * LEASE_SECONDS)
    s.kubelet.restore(pod)
    timeline.note(f"restore {pod}")

    # The leading operator dies while a partition is between two owners; the standby takes
    # over, and the killed one comes back as the standby.
    wait_for(
        "a handoff in flight",
        lambda: (p := s.plan()) is not None and bool(p.releasing),
        120,
        interval=0.05,
    )
    leader = leading_operator(s.operator, standby)
    leader.kill()
    timeline.note("leading operator killed mid-handoff")
    time.sleep(3)
    leader.start()
    timeline.note("killed operator restarted (now the standby)")
    older_plan = s.api.get("ConfigMap", s.namespace, plan_configmap_name(s.name))
    assert older_plan is not None

    time.sleep(8)
    s.api.delete("ConfigMap", s.namespace, plan_configmap_name(s.name))
    timeline.note("plan ConfigMap deleted")

    time.sleep(10)
    rewrite_plan_by_hand(s, older_plan["data"], older_plan["metadata"]["annotations"])
    timeline.note(f"an older plan (epoch {older_plan['data']['epoch']}) restored")

    time.sleep(8)
    patch_policy(s, {"consumers": {"replicas": 2}})
    timeline.note("scale 5 -> 2")
    wait_running(s, 2)
    timeline.note("scaled down to 2")

    old_runs = [s.kubelet.run_of(name) for name in s.kubelet.pod_names()]
    patch_policy(s, {"consumers": {"replicas": 2, "template": {"metadata": {"labels": {"rollout": "2"}}}}})
    timeline.note("rolling template change")
    wait_for(
        "both pods replaced, one at a time",
        lambda: all(run.gone for run in old_runs) and len(s.kubelet.pod_names()) == 2,
        300,
        interval=0.5,
    )
    timeline.note("template rolled out")

    time.sleep(5)
    pod = running_pod(s, [0, 1])
    s.kubelet.crash(pod)
    timeline.note(f"crash {pod}")

    produced = producer.wait(timeout=900).acked
    timeline.note("all messages produced")
    wait_for(
        f"at least {MIN_PLAN_CHANGES} plan changes",
        lambda: timeline.epoch() - first_epoch >= MIN_PLAN_CHANGES,
        300,
        interval=1.0,
    )
    report = s.wait_processed(produced, timeout=600)
    timeline.note("every message processed")
    committed.stop()

    journals = load_journals(s.record_dir)
    fences = [e for e in journals.events if e["k"] == "fence"]
    plan_changes = timeline.epoch() - first_epoch
    print(
        f"\nCHURN: {len(produced)} produced, {report.processed} processed, {report.unique} unique, "
        f"{len(report.missing)} missing, {report.duplicates} duplicates "
        f"({report.explained_duplicates} explained by faults, {len(report.unexplained)} unexplained), "
        f"{len(report.overlaps)} overlapping ownerships; {plan_changes} plan changes "
        f"(epochs {first_epoch} -> {timeline.epoch()}), {len(s.kubelet.faults)} injected faults, "
        f"{len(fences)} self-fences, {len(s.kubelet.history)} consumer processes; per identity "
        f"{dict(sorted(report.per_identity.items()))}"
    )
    assert len(produced) == MESSAGES
    assert report.missing == []
    assert report.overlaps == [], report.overlaps[:3]
    assert report.unexplained == [], report.unexplained[:3]
    assert plan_changes >= MIN_PLAN_CHANGES
    print(f"committed offsets read {committed.reads} times; regressions: {committed.regressions}")
    assert committed.reads > 100
    assert committed.regressions == [], "a committed offset moved backwards"
