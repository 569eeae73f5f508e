"""What the fleet benchmark (benchmarks/fleet.py) measures, independently of the operator:

- `TimeLagSampler`: every few seconds each group's committed offsets (a non-member Consumer's
  `committed()`) against the producer's own record of produce times: a group's
  time lag is the largest over its partitions of now - produce time of the first unconsumed
  message, 0 when caught up (fleet_load.ProduceRecord.time_lag).
- `PlanWatch`: a watch of every plan ConfigMap of the namespace (each version the API server
  serves): a policy is in flight while its plan has partitions releasing (as InFlightWatch in
  tests/e2e/test_disruption_budget.py), and a partition whose owner changes is one move.
- `OperatorMoves`: the operator's own `groupops_partition_moves_total` per policy, as a check of
  the watch's count.
- `CpuMeter`: CPU used by the consumers, the operator, this process and the whole machine.
- `ClusterSampler`: the ConsumerGroupCluster's status (handoffs in flight, waiting for the
  budget, partitions moved in the last minute) as the operator reports it.

Each sampler runs in a daemon thread of its own; `stop()` ends it.
"""

from __future__ import annotations

import math
import os
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from fleet_load import ProduceRecord
from groupops.devstack.kube_api import ApiError, KubeApi
from groupops.planner.plan_format import plan_from_configmap

__all__ = [
    "ClusterSampler",
    "CpuMeter",
    "GroupRef",
    "OperatorMoves",
    "PlanWatch",
    "TimeLagSampler",
    "operator_moves",
]

PLAN_SUFFIX = "-plan"


@dataclass(frozen=True, slots=True)
class GroupRef:
    """One measured group: its policy, fleet (`static` or `groupops`), group id and topic."""

    policy: str
    side: str
    group_id: str
    topic: str
    partitions: int


@dataclass
class TimeLagSampler:
    """Samples every group's time lag every `interval_s` (see the module docstring). `times[k]`
    is the wall time of sample k; `lags[policy][k]` its time lag in seconds (NaN: the read
    failed).

    Committed offsets are read with a Consumer per group that never joins it (`committed()`, an
    OffsetFetch to the coordinator), not with the AdminClient: librdkafka's coordinator admin
    requests can abort the process when they time out on a starved broker
    (`rd_kafka_enq_once_del_source_return: Assertion eonce->refcnt > 0`, librdkafka issue 4605),
    which the operator hit in a smoke run of this benchmark."""

    bootstrap: str
    groups: list[GroupRef]
    record: ProduceRecord
    interval_s: float = 5.0
    times: list[float] = field(default_factory=list)
    lags: dict[str, list[float]] = field(default_factory=dict)
    failures: int = 0
    _readers: dict[str, Consumer] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> TimeLagSampler:
        for group in self.groups:
            self._readers[group.policy] = Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": group.group_id,
                    "enable.auto.commit": False,
                    "enable.partition.eof": False,
                }
            )
        self._thread = threading.Thread(target=self._run, name="time-lag-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)
            self._thread = None
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    def committed(self, group: GroupRef) -> dict[int, int] | None:
        """partition -> the group's next offset (partitions without a commit left out); None
        when the read failed."""
        wanted = [TopicPartition(group.topic, p) for p in range(group.partitions)]
        try:
            answer = self._readers[group.policy].committed(wanted, timeout=10)
        except KafkaException as e:
            self.failures += 1
            print(f"  time lag read of {group.group_id} failed: {e}", flush=True)
            return None
        return {tp.partition: tp.offset for tp in answer if tp.error is None and tp.offset >= 0}

    def sample_once(self) -> None:
        offsets = {group.policy: self.committed(group) for group in self.groups}
        now = time.time()
        self.times.append(now)
        for group in self.groups:
            committed = offsets[group.policy]
            if committed is None:
                lag = math.nan
            else:
                lag = max(
                    self.record.time_lag(group.topic, partition, committed.get(partition), now)
                    for partition in range(group.partitions)
                )
            self.lags.setdefault(group.policy, []).append(lag)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.sample_once()
            next_at += self.interval_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))


@dataclass
class PlanWatch:
    """Watches the plan ConfigMaps of `namespace`. `side_of(policy)` names the fleet of a policy
    (None: not measured). Per fleet: the policies in flight now, the most at once, when each
    handoff started, and, once `counting` is set, the partitions moved per policy."""

    api: KubeApi
    namespace: str
    side_of: Callable[[str], str | None]
    counting: bool = False
    in_flight: dict[str, set[str]] = field(default_factory=dict)
    most_in_flight: dict[str, int] = field(default_factory=dict)
    in_flight_series: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    handoffs_started: dict[str, int] = field(default_factory=dict)
    moves: dict[str, int] = field(default_factory=dict)
    versions_seen: int = 0
    _owners: dict[str, dict[tuple[str, int], str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> PlanWatch:
        self._thread = threading.Thread(target=self._run, name="plan-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def start_counting(self) -> None:
        """From now on, count moves and handoffs and the most in flight (the load starts)."""
        with self._lock:
            self.counting = True
            self.moves.clear()
            self.handoffs_started.clear()
            self.most_in_flight = {side: len(names) for side, names in self.in_flight.items()}

    def moves_by_side(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for policy, count in self.moves.items():
            side = self.side_of(policy)
            if side is not None:
                totals[side] = totals.get(side, 0) + count
        return totals

    def _run(self) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                for kind, obj in self.api.watch(
                    "ConfigMap", self.namespace, resource_version=version, timeout_s=5
                ):
                    version = obj["metadata"].get("resourceVersion", version)
                    if kind != "BOOKMARK":
                        self._see(kind, obj)
            except (ApiError, OSError):
                version = None  # expired or broken: list again (ADDED for every plan)
                self._stop.wait(0.5)

    def _see(self, kind: str, obj: Mapping[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if not name.endswith(PLAN_SUFFIX):
            return
        policy = name.removesuffix(PLAN_SUFFIX)
        side = self.side_of(policy)
        if side is None:
            return
        if kind == "DELETED":
            releasing, owners = False, {}
        else:
            published = plan_from_configmap(obj.get("data") or {}, obj["metadata"].get("annotations"))
            releasing = bool(published.releasing)
            owners = {(tp.topic, tp.partition): str(owner) for tp, owner in published.owner_of().items()}
        now = time.time()
        with self._lock:
            self.versions_seen += 1
            known = self._owners.setdefault(policy, {})
            moved = sum(1 for tp, owner in owners.items() if tp in known and known[tp] != owner)
            known.update(owners)
            flying = self.in_flight.setdefault(side, set())
            before = len(flying)
            if releasing and policy not in flying:
                flying.add(policy)
                if self.counting:
                    self.handoffs_started[side] = self.handoffs_started.get(side, 0) + 1
            elif not releasing:
                flying.discard(policy)
            if self.counting:
                self.moves[policy] = self.moves.get(policy, 0) + moved
                self.most_in_flight[side] = max(self.most_in_flight.get(side, 0), len(flying))
            if len(flying) != before:
                self.in_flight_series.setdefault(side, []).append((now, len(flying)))


def operator_moves(metrics_port: int, namespace: str) -> dict[str, float]:
    """policy -> the operator's groupops_partition_moves_total for it (its /metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    moves: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name == "groupops_partition_moves_total"
                and sample.labels.get("namespace") == namespace
            ):
                moves[sample.labels["policy"]] = sample.value
    return moves


@dataclass
class OperatorMoves:
    """The operator's move counter summed over the run, across operator restarts (a new process
    counts from 0: `restarted()` says so). `read()` scrapes; the first read is the baseline."""

    namespace: str
    totals: dict[str, float] = field(default_factory=dict)
    failed_reads: int = 0
    _last: dict[str, float] | None = None

    def read(self, metrics_port: int) -> None:
        try:
            now = operator_moves(metrics_port, self.namespace)
        except OSError:  # the operator is restarting; its next read catches up
            self.failed_reads += 1
            return
        if self._last is not None:
            for policy, value in now.items():
                self.totals[policy] = self.totals.get(policy, 0.0) + value - self._last.get(policy, 0.0)
        self._last = now

    def restarted(self) -> None:
        if self._last is not None:
            self._last = {}


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (None: gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / CLOCK_TICKS, sum(values) / CLOCK_TICKS


@dataclass
class CpuMeter:
    """CPU used between two `sample()` calls, in cores, per named set of processes and for the
    whole machine. A process that appeared in between counts all its CPU so far."""

    _last_process: dict[int, float] = field(default_factory=dict)
    _last_machine: tuple[float, float] | None = None
    _last_at: float = 0.0

    def sample(self, pids: Mapping[str, list[int]]) -> dict[str, float]:
        now = time.monotonic()
        elapsed = now - self._last_at if self._last_at else 0.0
        used: dict[str, float] = {}
        seen: dict[int, float] = {}
        for name, members in pids.items():
            total = 0.0
            for pid in members:
                cpu = process_cpu_seconds(pid)
                if cpu is None:
                    continue
                seen[pid] = cpu
                total += cpu - self._last_process.get(pid, 0.0)
            used[name] = total / elapsed if elapsed else 0.0
        busy, overall = machine_busy_seconds()
        if self._last_machine is not None and elapsed:
            used["machine"] = (busy - self._last_machine[0]) / elapsed
        self._last_machine = (busy, overall)
        self._last_process = seen
        self._last_at = now
        return used


@dataclass
class ClusterSampler:
    """The ConsumerGroupCluster `name`'s status every `interval_s`: (time, handoffsInFlight,
    waitingForBudget, partitionsMovedLastMinute)."""

    api: KubeApi
    name: str
    interval_s: float = 5.0
    samples: list[tuple[float, int, int, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ClusterSampler:
        self._thread = threading.Thread(target=self._run, name="cluster-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                cluster = self.api.get("ConsumerGroupCluster", None, self.name) or {}
            except (ApiError, OSError):
                continue
            status = cluster.get("status") or {}
            self.samples.append(
                (
                    time.time(),
                    int(status.get("handoffsInFlight") or 0),
                    int(status.get("waitingForBudget") or 0),
                    int(status.get("partitionsMovedLastMinute") or 0),
                )
            )
