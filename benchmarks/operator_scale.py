"""Operator at scale: N ConsumerGroupPolicies against one `groupops operator`, on the real API
server (kube-apiserver + etcd of `groupops.devstack`).

    .venv/bin/python benchmarks/operator_scale.py [--counts 100 1000] [--steady 60] [--compare-tick 30]
                                                  [--single-changes 20] [--json FILE]
    .venv/bin/python benchmarks/operator_scale.py --budget [--counts 100 1000] [--max-handoffs 3]
                                                  [--max-moves-per-minute 200] [--json FILE]

Uses $KUBECONFIG when set, else starts an API server with groupops.devstack. No Kafka broker and
no kubelet: every policy reads `lagSource: static` (the operator then never contacts Kafka;
`spec.kafka.bootstrapServers` only goes into the pods' environment), pods stay Pending and nobody
takes the Leases, so each policy's first plan gives every slot its share.

Per N (a fresh namespace and a fresh operator with its default tick, 5 s, already running):

1. create N policies (3 replicas, 12 partitions, strategies range/sticky/lag/balanced in turn),
   one POST each, from 8 client threads as fast as the API server takes them; a watch on the
   namespace's ConfigMaps and policies notes when each plan ConfigMap first appears and when
   status.epoch first reaches 1: plan latency = first plan - the POST's return;
2. the operator's RSS (VmRSS of /proc/<pid>/status, sampled every second; VmHWM as the peak)
   when every policy has a plan and status, and after `--steady` seconds of steady state;
3. in that steady window: operator CPU seconds (utime+stime of /proc/<pid>/stat) per minute
   and as % of one core,
   reconciles per second (the operator's groupops_reconcile_duration_seconds_count; ticks of
   settled policies whose check found nothing changed, groupops_reconciles_skipped_total), the
   settled sweep's CPU per check and in all (groupops_operator_settled_check_cpu_seconds_total
   over groupops_operator_settled_checks_total) and API
   requests per second (apiserver_request_total of the API server's /metrics, every client, per
   verb and in total besides WATCH);
4. `--single-changes` spec changes one policy at a time (a `range` policy to `roundrobin`, a
   second apart, spread over the fleet): latency from each PATCH's answer until its plan
   ConfigMap's epoch moves, the fleet otherwise settled;
5. a spec change on every policy (replicas 3 -> 4, one PATCH each): latency until the plan
   ConfigMap's epoch moves past the one it had.

Then, for the largest N, the operator is restarted with --tick `--compare-tick` and the steady
window is measured again (after its resume pass has reconciled every policy once).

`--budget` (docs/design.md §15): per N, the same N policies twice on the same API server, one
after the other (`--together`: at the same time), each in a fresh namespace with its own
operator: *inline* (as above, `kafka.bootstrapServers`) and *clusterRef* (every policy names one
ConsumerGroupCluster whose disruptionBudget is `--max-handoffs` / `--max-moves-per-minute`).
Every policy is `balanced`, with lag 10 on each of its 12 partitions and `rebalance {interval:
1h, cooldownSeconds: 0}`, so that only the lag change below chooses a rebalance. For each
configuration:

1. creation -> first plan latency, as above;
2. the spec change (replicas 3 -> 4), as above: a correctness trigger the budget never holds (it
   counts its moves), so its latency must not depend on the configuration;
3. `--budget-quiet` seconds of nothing, so that the change's moves leave the budget's minute;
4. a lag change on every policy (one PATCH of spec.lagSource.static.lags each): two partitions
   of one replica of its published plan get lag 2000 - index (`hot_lag`: worse off for a higher
   index), the rest stays at 10, so that the plan is unbalanced and `balanced` wants one swap (2
   partitions moved). The ConfigMap watch compares each new epoch's assignment with the last owner of each
   partition and notes the partitions that moved; the figures: the most partitions moved in any
   60-s window after the first PATCH (the budget's limit, rule 3 of planner/budget.py), when each
   policy's two hot partitions were first on different replicas (rebalanced) and when all were,
   `kubectl get cgc -o json` every 5 s (waitingForBudget, partitionsMovedLastMinute,
   handoffsInFlight), the operator's holds by reason (its log), CPU, reconciles and API requests.
   Without consumers a handoff still takes time: a moved partition first leaves its owner's set
   (releasing), and enters the new owner's set only once the operator has fenced the old owner's
   Lease, which nobody ever took (consumer Lease duration, 4 s, plus the run that notices); the
   handoff is in flight until then, so maxHandoffsInFlight binds here too.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.operator_support import (  # noqa: E402
    Kubectl,
    OperatorProcess,
    create_namespace,
    free_port,
    install_crd,
)

from groupops.controller.names import ANNOTATION_GENERATION  # noqa: E402
from groupops.controller.render_plan import configmap_epoch  # noqa: E402
from groupops.devstack.kube import KubeApiServer  # noqa: E402
from groupops.devstack.kube_api import ApiError, KubeApi  # noqa: E402
from groupops.planner.plan_format import plan_from_configmap  # noqa: E402
from groupops.planner.wire import PlanFormatError  # noqa: E402

STRATEGIES = ("range", "sticky", "lag", "balanced")
PARTITIONS = 12
REPLICAS = 3
CLIENT_THREADS = 8
PLAN_SUFFIX = "-plan"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SINGLE_CHANGE_TIMEOUT_S = 60.0


# -- observing the cluster -----------------------------------------------------------------------


@dataclass
class PolicyTimes:
    created: float | None = None
    first_plan: float | None = None
    first_status_epoch: float | None = None
    plan_epochs: list[tuple[float, int, str]] = field(default_factory=list)
    """(seen at, epoch, policy generation the plan was computed for), one per change."""
    owners: dict[tuple[str, int], str | None] = field(default_factory=dict)
    """Each partition's owner in the last plan seen, None while releasing (`assignments` only)."""
    moves: list[tuple[float, int]] = field(default_factory=list)
    """(seen at, partitions the plan took from their owner), as the budget counts moves."""
    most_releasing: int = 0
    hot: frozenset[tuple[str, int]] = frozenset()
    """The partitions the lag change made hot (--budget)."""
    lag_patched: float | None = None
    rebalanced: float | None = None
    """When a plan first had the hot partitions on different identities."""

    def epoch_moved_after(self, epoch: int) -> float | None:
        return next((at for at, seen, _ in self.plan_epochs if seen > epoch), None)

    def plan_epoch(self) -> int:
        return self.plan_epochs[-1][1] if self.plan_epochs else 0


class Observer:
    """Watches the namespace's ConfigMaps and policies in two threads and notes, per policy, when
    its plan appeared, each epoch it moved to, and when its status first showed an epoch."""

    def __init__(self, kubeconfig: str, namespace: str, *, assignments: bool = False) -> None:
        self.namespace = namespace
        self.assignments = assignments
        self.policies: dict[str, PolicyTimes] = {}
        self.relists = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(
                target=self._watch, args=(KubeApi(kubeconfig), kind, handle), daemon=True, name=kind
            )
            for kind, handle in (("ConfigMap", self._on_configmap), ("ConsumerGroupPolicy", self._on_policy))
        ]

    def times(self, name: str) -> PolicyTimes:
        with self._lock:
            return self.policies.setdefault(name, PolicyTimes())

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _on_configmap(self, configmap: dict[str, Any], at: float) -> None:
        name = str(configmap["metadata"]["name"])
        if not name.endswith(PLAN_SUFFIX):
            return
        times = self.times(name.removesuffix(PLAN_SUFFIX))
        epoch = configmap_epoch(configmap)
        generation = str((configmap["metadata"].get("annotations") or {}).get(ANNOTATION_GENERATION, ""))
        if times.first_plan is None:
            times.first_plan = at
        if not times.plan_epochs or times.plan_epochs[-1][1:] != (epoch, generation):
            times.plan_epochs.append((at, epoch, generation))
            if self.assignments:
                self._note_assignment(times, configmap, at)

    @staticmethod
    def _note_assignment(times: PolicyTimes, configmap: dict[str, Any], at: float) -> None:
        """Partitions moved since the last plan, counted when they leave their owner's set (to
        another identity, or releasing: `publish.moves_between`, what the budget counts); a
        released partition that then enters its new owner's set is not counted again."""
        try:
            published = plan_from_configmap(
                configmap.get("data") or {}, configmap["metadata"].get("annotations")
            )
        except PlanFormatError:
            return
        owners: dict[tuple[str, int], str | None] = {
            (tp.topic, tp.partition): str(who) for tp, who in published.owner_of().items()
        }
        owners.update({(tp.topic, tp.partition): None for tp in published.releasing})
        moved = sum(
            1 for tp, before in times.owners.items() if before is not None and owners.get(tp) != before
        )
        times.owners = owners
        times.most_releasing = max(times.most_releasing, len(published.releasing))
        if moved:
            times.moves.append((at, moved))
        hot_owners = [owners.get(tp) for tp in times.hot]
        split = bool(hot_owners) and None not in hot_owners and len(set(hot_owners)) == len(hot_owners)
        if split and times.rebalanced is None:
            times.rebalanced = at

    def _on_policy(self, policy: dict[str, Any], at: float) -> None:
        times = self.times(str(policy["metadata"]["name"]))
        if times.first_status_epoch is None and int((policy.get("status") or {}).get("epoch") or 0) >= 1:
            times.first_status_epoch = at

    def _watch(self, api: KubeApi, kind: str, handle: Callable[[dict[str, Any], float], None]) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    listing = api.request("GET", api.path(kind, self.namespace))
                    for item in listing.get("items", []):
                        handle(item, time.time())
                    version = str(listing["metadata"]["resourceVersion"])
                for event, obj in api.watch(kind, self.namespace, resource_version=version, timeout_s=60):
                    version = str(obj["metadata"].get("resourceVersion") or version)
                    if event in ("ADDED", "MODIFIED"):
                        handle(obj, time.time())
                    if self._stop.is_set():
                        return
            except ApiError:
                version = None  # expired resourceVersion or a broken stream: list again
                self.relists += 1
                time.sleep(0.5)


class ProcessSampler:
    """RSS of one process every second (VmRSS), its peak (VmHWM) and its CPU seconds."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def status_kib(self, key: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
        raise KeyError(key)

    def rss_mib(self) -> float:
        return self.status_kib("VmRSS") / 1024

    def peak_mib(self) -> float:
        return self.status_kib("VmHWM") / 1024

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime

    def start(self) -> ProcessSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.samples.append((time.time(), self.status_kib("VmRSS")))
            except (OSError, KeyError):
                return


def machine_load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def prometheus_sum(text: str, metric: str) -> dict[str, float]:
    """Sum of every sample of `metric` in an exposition, also per verb (`PUT`) and per verb and
    resource (`PUT leases`, `PATCH consumergrouppolicies/status`) when it has those labels."""
    sums: dict[str, float] = {"total": 0.0}
    pattern = re.compile(rf"^{re.escape(metric)}(\{{[^}}]*\}})?\s+(\S+)")
    for line in text.splitlines():
        match = pattern.match(line)
        if not match:
            continue
        value = float(match.group(2))
        sums["total"] += value
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        verb = labels.get("verb")
        if verb:
            sums[verb] = sums.get(verb, 0.0) + value
            resource = labels.get("resource", "") + (
                f"/{labels['subresource']}" if labels.get("subresource") else ""
            )
            key = f"{verb} {resource or '-'}"
            sums[key] = sums.get(key, 0.0) + value
    return sums


def apiserver_requests(kubectl: Kubectl) -> dict[str, float]:
    return prometheus_sum(kubectl.run("get", "--raw", "/metrics").stdout, "apiserver_request_total")


def operator_metrics(metrics_port: int, *metrics: str) -> dict[str, float]:
    """Each of `metrics` summed over its labels, from one scrape of the operator's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {metric: prometheus_sum(text, metric)["total"] for metric in metrics}


def operator_metric(metrics_port: int, metric: str) -> float:
    return operator_metrics(metrics_port, metric)[metric]


SKIPPED = "groupops_reconciles_skipped_total"
"""Ticks of settled policies whose check found nothing changed (docs/design.md §8.3)."""
SETTLED_CHECKS = "groupops_operator_settled_checks_total"
SETTLED_CHECK_CPU = "groupops_operator_settled_check_cpu_seconds_total"
"""The settled sweep's checks and the CPU its thread spent on them: what one check costs."""


RECONCILES = "groupops_reconcile_duration_seconds_count"
STEADY_COUNTERS = (RECONCILES, SKIPPED, SETTLED_CHECKS, SETTLED_CHECK_CPU)
"""What `steady` reads at each end of its window, from one scrape each."""


def operator_reconciles(metrics_port: int) -> float:
    return operator_metric(metrics_port, RECONCILES)


# -- the workload --------------------------------------------------------------------------------


def policy_manifest(
    index: int,
    bootstrap: str,
    *,
    topic: str | None = None,
    lag_source: dict[str, Any] | None = None,
    strategies: Sequence[str] = STRATEGIES,
) -> dict[str, Any]:
    """Policy `index`: its own topic `topic-<index>` and a static lag unless `topic` and
    `lag_source` (the `spec.lagSource` object) say otherwise; its strategy the next of
    `strategies` in turn."""
    topic = topic or f"topic-{index:04d}"
    strategy = strategies[index % len(strategies)]
    if lag_source is None:
        lags = [(index * 7 + p * 131) % 1000 for p in range(PARTITIONS)]
        lag_source = {"type": "static", "static": {"lags": {topic: lags}}}
    return {
        "apiVersion": "groupops.dev/v1alpha1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {"name": f"policy-{index:04d}"},
        "spec": {
            "kafka": {"bootstrapServers": bootstrap},
            "groupId": f"group-{index:04d}",
            "topics": [topic],
            "strategy": {"type": strategy},
            "lagSource": lag_source,
            "consumers": {"replicas": REPLICAS},
        },
    }


def in_parallel(kubeconfig: str, work: list[Any], call: Callable[[KubeApi, Any], None]) -> None:
    """Run `call` on every item from CLIENT_THREADS threads, one API client per thread."""
    local = threading.local()
    clients: list[KubeApi] = []

    def one(item: Any) -> None:
        api = getattr(local, "api", None)
        if api is None:
            api = local.api = KubeApi(kubeconfig)
            clients.append(api)
        call(api, item)

    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        list(pool.map(one, work))
    for api in clients:
        api.close()


def wait_until(
    what: str,
    done: Callable[[], bool],
    timeout: float,
    operator: OperatorProcess,
    interval: float = 0.5,
    revive: Callable[[str], None] | None = None,
) -> bool:
    """Poll `done` until it holds or `timeout` passes; an operator that exits is restarted by
    `revive` when given (else an error)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        if not operator.alive():
            if revive is None:
                raise RuntimeError(f"the operator died while waiting for {what}:\n{operator.log_tail()}")
            revive(what)
        time.sleep(interval)
    print(f"  TIMEOUT after {timeout:.0f} s waiting for {what}", flush=True)
    return False


def spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}
    return {
        "n": len(ordered),
        "median": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))],
        "max": ordered[-1],
    }


def log_problems(log_path: Path) -> dict[str, Any]:
    lines = log_path.read_text(errors="replace").splitlines()
    counts = {
        "ERROR": sum(1 for line in lines if "ERROR" in line),
        "Traceback": sum(1 for line in lines if "Traceback" in line),
        "retry": sum(1 for line in lines if "retry " in line),
        "WARNING": sum(1 for line in lines if "WARNING" in line),
        "CRITICAL": sum(1 for line in lines if "CRITICAL" in line),
        "election renewals skipped": sum(1 for line in lines if "not renewing the election Lease" in line),
        "starved main process, renewing on": sum(1 for line in lines if "main process is starved" in line),
        "slow election renewals": sum(1 for line in lines if "slow election renewal" in line),
    }
    samples = [line for line in lines if "ERROR" in line or "Traceback" in line or "CRITICAL" in line][:5]
    return {"counts": counts, "samples": samples}


# -- one scale point -----------------------------------------------------------------------------


@dataclass
class Run:
    count: int
    kubeconfig: str
    kubectl: Kubectl
    namespace: str
    operator: OperatorProcess
    metrics_port: int
    observer: Observer
    sampler: ProcessSampler | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    revives: bool = False
    """Restart an operator that exits (--budget: on this shared machine a starved operator can
    miss its election renewals and exit, as a pod would be restarted) instead of failing."""
    restarts: list[dict[str, Any]] = field(default_factory=list)

    def revive(self, what: str) -> None:
        assert self.operator.process is not None
        code = self.operator.process.poll()
        print(f"  the operator exited ({code}) while waiting for {what}: restarting it", flush=True)
        self.restarts.append({"at": time.time(), "exit_code": code, "while": what, "uptime": machine_load()})
        self.stop_operator()
        self.start_operator(None if self.operator.tick is None else float(self.operator.tick))

    def reviver(self) -> Callable[[str], None] | None:
        return self.revive if self.revives else None

    def names(self) -> list[str]:
        return [f"policy-{i:04d}" for i in range(self.count)]

    def start_operator(self, tick: float | None) -> None:
        self.operator.tick = None if tick is None else str(tick)
        self.operator.start()
        self.operator.wait_started()
        assert self.operator.process is not None
        self.sampler = ProcessSampler(self.operator.process.pid).start()

    def stop_operator(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
            series = [round(kib / 1024) for _, kib in self.sampler.samples[::10]]
            self.figures[f"rss_mib_every_10s_operator_start_{self.operator.starts}"] = series
            self.sampler = None
        self.operator.stop()

    def steady(self, seconds: float) -> dict[str, Any]:
        """CPU, reconciles and API requests over a window of `seconds` with nothing else going on."""
        assert self.sampler is not None
        requests_before = apiserver_requests(self.kubectl)
        before = operator_metrics(self.metrics_port, *STEADY_COUNTERS)
        cpu_before, at = self.sampler.cpu_seconds(), time.monotonic()
        time.sleep(seconds)
        cpu_after, elapsed = self.sampler.cpu_seconds(), time.monotonic() - at
        after = operator_metrics(self.metrics_port, *STEADY_COUNTERS)
        moved = {name: after[name] - before[name] for name in STEADY_COUNTERS}
        checks, check_cpu = moved[SETTLED_CHECKS], moved[SETTLED_CHECK_CPU]
        requests_after = apiserver_requests(self.kubectl)
        per_verb = {
            verb: round((requests_after.get(verb, 0.0) - requests_before.get(verb, 0.0)) / elapsed, 2)
            for verb in requests_after
        }
        # Per verb and resource, only those requested in the window (most are never).
        per_verb = {key: rate for key, rate in per_verb.items() if rate or " " not in key}
        return {
            "window_s": round(elapsed, 1),
            "cpu_s_per_min": round((cpu_after - cpu_before) * 60 / elapsed, 1),
            "cpu_percent_of_one_core": round((cpu_after - cpu_before) * 100 / elapsed, 1),
            "reconciles_per_s": round(moved[RECONCILES] / elapsed, 1),
            "skipped_ticks_per_s": round(moved[SKIPPED] / elapsed, 1),
            "settled_check_cpu_us": round(check_cpu * 1e6 / checks, 1) if checks else None,
            "settled_check_cpu_percent_of_one_core": round(check_cpu * 100 / elapsed, 1),
            "api_requests_per_s": per_verb,
            "api_requests_per_s_besides_watch": round(per_verb["total"] - per_verb.get("WATCH", 0.0), 1),
            "rss_mib_end": round(self.sampler.rss_mib(), 1),
            "peak_mib": round(self.sampler.peak_mib(), 1),
            "uptime": machine_load(),
        }

    def create_all(self, manifest_of: Callable[[int], dict[str, Any]], timeout: float) -> None:
        def create(api: KubeApi, index: int) -> None:
            manifest = manifest_of(index)
            api.create("ConsumerGroupPolicy", self.namespace, manifest)
            self.observer.times(manifest["metadata"]["name"]).created = time.time()

        load = machine_load()
        started = time.time()
        in_parallel(self.kubeconfig, list(range(self.count)), create)
        created = time.time()
        print(f"  created {self.count} policies in {created - started:.1f} s", flush=True)
        names = self.names()

        def planned() -> bool:
            return all(
                (t := self.observer.times(n)).first_plan is not None and t.first_status_epoch is not None
                for n in names
            )

        complete = wait_until("every plan and status", planned, timeout, self.operator, revive=self.reviver())
        assert self.sampler is not None
        times = [self.observer.times(n) for n in names]
        latencies = [t.first_plan - t.created for t in times if t.first_plan and t.created]
        last_plan = max((t.first_plan for t in times if t.first_plan), default=created)
        last_status = max((t.first_status_epoch for t in times if t.first_status_epoch), default=created)
        self.figures["create"] = {
            "uptime_before": load,
            "create_s": round(created - started, 2),
            "create_per_s": round(self.count / (created - started), 1),
            "plan_latency_s": spread(latencies),
            "all_plans_s": round(last_plan - started, 2),
            "all_plans_and_status_s": round(max(last_plan, last_status) - started, 2),
            "missing_plans": sum(1 for t in times if t.first_plan is None),
            "missing_status": sum(1 for t in times if t.first_status_epoch is None),
            "complete": complete,
            "rss_mib_all_planned": round(self.sampler.rss_mib(), 1),
            "peak_mib_all_planned": round(self.sampler.peak_mib(), 1),
        }
        print(f"  {json.dumps(self.figures['create'])}", flush=True)

    def change_one_at_a_time(self, count: int, timeout: float) -> None:
        """A spec change on one policy of the settled fleet at a time (the issue's change -> plan
        on a loaded fleet, which `change_all` cannot show: it measures the API server's write pace),
        `count` of them spread over the fleet: a `range` policy to `roundrobin`, which gives
        other sets to the same three slots. Each is timed from the PATCH's answer until its plan's
        epoch moved; the next starts a second after."""
        ranged = [i for i in range(self.count) if STRATEGIES[i % len(STRATEGIES)] == "range"]
        chosen = [ranged[(i * len(ranged)) // count] for i in range(min(count, len(ranged)))]
        load = machine_load()
        latencies: list[float] = []
        not_moved: list[str] = []
        api = KubeApi(self.kubeconfig)
        try:
            for index in chosen:
                name = f"policy-{index:04d}"
                times = self.observer.times(name)
                before = times.plan_epoch()
                api.patch(
                    "ConsumerGroupPolicy",
                    self.namespace,
                    name,
                    {"spec": {"strategy": {"type": "roundrobin"}}},
                )
                patched = time.time()
                deadline = time.monotonic() + timeout
                while (moved := times.epoch_moved_after(before)) is None and time.monotonic() < deadline:
                    time.sleep(0.02)
                if moved is None:
                    not_moved.append(name)
                else:
                    latencies.append(moved - patched)
                time.sleep(1.0)
        finally:
            api.close()
        self.figures["change_one_at_a_time"] = {
            "uptime_before": load,
            "epoch_move_latency_s": {k: round(v, 3) for k, v in spread(latencies).items()},
            "each_s": [round(v, 3) for v in latencies],
            "not_moved_within_s": {"timeout": timeout, "policies": not_moved},
        }
        print(f"  {json.dumps(self.figures['change_one_at_a_time'])}", flush=True)

    def change_all(self, timeout: float) -> None:
        names = self.names()
        before = {n: self.observer.times(n).plan_epoch() for n in names}
        patched: dict[str, float] = {}

        def patch(api: KubeApi, name: str) -> None:
            api.patch("ConsumerGroupPolicy", self.namespace, name, {"spec": {"consumers": {"replicas": 4}}})
            patched[name] = time.time()

        load = machine_load()
        started = time.time()
        in_parallel(self.kubeconfig, names, patch)
        patch_s = time.time() - started
        print(f"  patched {self.count} policies in {patch_s:.1f} s", flush=True)

        def moved() -> bool:
            return all(self.observer.times(n).epoch_moved_after(before[n]) is not None for n in names)

        complete = wait_until(
            "every plan epoch to move", moved, timeout, self.operator, revive=self.reviver()
        )
        assert self.sampler is not None
        moves = {n: self.observer.times(n).epoch_moved_after(before[n]) for n in names}
        latencies = [at - patched[n] for n, at in moves.items() if at is not None]
        self.figures["change"] = {
            "uptime_before": load,
            "patch_s": round(patch_s, 2),
            "epoch_move_latency_s": spread(latencies),
            "all_moved_s": round(max((a for a in moves.values() if a), default=started) - started, 2),
            "not_moved": sum(1 for a in moves.values() if a is None),
            "complete": complete,
            "rss_mib_after": round(self.sampler.rss_mib(), 1),
            "peak_mib": round(self.sampler.peak_mib(), 1),
        }
        print(f"  {json.dumps(self.figures['change'])}", flush=True)


@contextmanager
def api_server(workdir: Path) -> Iterator[str]:
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        yield kubeconfig
        return
    server = KubeApiServer(workdir / "kube")
    server.start()
    try:
        yield str(server.kubeconfig)
    finally:
        server.stop()
        shutil.rmtree(workdir / "kube", ignore_errors=True)


def release_namespace(kubeconfig: str, kubectl: Kubectl, namespace: str, count: int) -> None:
    """Delete the namespace of a run on a reused API server: the operator is stopped by now, so
    the policies' finalizers are lifted by hand (no controller-manager empties the namespace;
    it stays Terminating, but nothing in it runs)."""
    kubectl.run("delete", "namespace", namespace, "--wait=false", check=False)

    def unfinalize(api: KubeApi, index: int) -> None:
        with suppress(ApiError):
            api.patch(
                "ConsumerGroupPolicy", namespace, f"policy-{index:04d}", {"metadata": {"finalizers": None}}
            )

    in_parallel(kubeconfig, list(range(count)), unfinalize)


def new_run(
    count: int,
    kubeconfig: str,
    namespace: str,
    log_path: Path,
    *,
    assignments: bool = False,
    operator_args: tuple[str, ...] = (),
) -> Run:
    """A fresh namespace and an operator (default tick) for it, not started yet."""
    kubectl = Kubectl(kubeconfig)
    create_namespace(kubectl, namespace)
    metrics_port = free_port()
    operator = OperatorProcess(
        kubeconfig=kubeconfig,
        namespace=namespace,
        log_path=log_path,
        extra=["--metrics-port", str(metrics_port), *operator_args],  # the last --metrics-port wins
        tick=None,
    )
    return Run(
        count=count,
        kubeconfig=kubeconfig,
        kubectl=kubectl,
        namespace=namespace,
        operator=operator,
        metrics_port=metrics_port,
        observer=Observer(kubeconfig, namespace, assignments=assignments),
    )


@contextmanager
def operating(run: Run) -> Iterator[ExitStack]:
    """The observer and the operator running; on the way out both stopped and, on a reused API
    server, the namespace released."""
    run.observer.start()
    with ExitStack() as exits:
        if os.environ.get("KUBECONFIG"):
            exits.callback(release_namespace, run.kubeconfig, run.kubectl, run.namespace, run.count)
        exits.callback(run.observer.stop)
        exits.callback(run.stop_operator)
        run.start_operator(None)
        yield exits


def scale_point(
    count: int, kubeconfig: str, workdir: Path, args: argparse.Namespace, compare_tick: bool
) -> dict[str, Any]:
    namespace = f"scale-{count}-{int(time.time()) % 100000}"
    run = new_run(count, kubeconfig, namespace, workdir / f"operator-{count}.log")
    operator, metrics_port = run.operator, run.metrics_port
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    print(f"== {count} policies, namespace {namespace}, operator tick 5 s (default)", flush=True)
    with operating(run):
        assert run.sampler is not None
        run.figures["operator_rss_idle_mib"] = round(run.sampler.rss_mib(), 1)
        run.create_all(lambda index: policy_manifest(index, bootstrap), timeout=args.plan_timeout)
        run.figures["steady_tick_5"] = run.steady(args.steady)
        print(f"  steady: {json.dumps(run.figures['steady_tick_5'])}", flush=True)
        if args.single_changes:
            run.change_one_at_a_time(args.single_changes, timeout=SINGLE_CHANGE_TIMEOUT_S)
        run.change_all(timeout=args.plan_timeout)
        run.figures["log_tick_5"] = log_problems(operator.log_path)
        if compare_tick:
            run.stop_operator()
            print(f"== {count} policies, operator restarted with --tick {args.compare_tick}", flush=True)
            restarted = time.monotonic()
            run.start_operator(args.compare_tick)
            wait_until(
                "the resume pass",
                lambda: operator_reconciles(metrics_port) >= count,
                args.plan_timeout,
                operator,
                interval=3.0,  # each scrape of 1,000 policies' metrics costs the operator CPU too
            )
            run.figures["resume_pass_s"] = round(time.monotonic() - restarted, 1)
            time.sleep(args.compare_tick)  # past the resume burst: only ticks from here on
            run.figures[f"steady_tick_{args.compare_tick:g}"] = run.steady(args.steady)
            print(f"  steady: {json.dumps(run.figures[f'steady_tick_{args.compare_tick:g}'])}", flush=True)
        run.figures["observer_relists"] = run.observer.relists
        run.figures["log"] = log_problems(operator.log_path)
    return run.figures


# -- the disruption budget (--budget) ------------------------------------------------------------

CLUSTER = "scale-fleet"
CONFIGS = ("inline", "clusterRef")
QUIET_LAG = 10
HOT_PARTITIONS = 2
CLUSTER_STATUS_PERIOD_S = 5.0
CLUSTER_FIGURES = ("handoffsInFlight", "partitionsMovedLastMinute", "waitingForBudget")
HOLD_REASONS = {
    # the end of each reason planner/budget.py gives, as the operator logs it
    "handoffs_in_flight": "(disruptionBudget.maxHandoffsInFlight)",
    "moves_per_minute": "(disruptionBudget.maxPartitionsMovedPerMinute)",
    "worse_off_first": "is further from its goal and goes first",
}


def hot_lag(index: int) -> int:
    """The lag of each hot partition of policy `index` (N <= 1,000): a higher index is further
    from its goal. The budget's badness is the plan's imbalance, max member lag over its lower
    bound (assign/stats.py), here the hot lag H itself: (2H + 10) / H = 2 + 10 / H, so a smaller
    H is worse off, and the policies patched first (lower index) are the least worse off."""
    return 2000 - index


def budget_policy_manifest(index: int, kafka: dict[str, Any]) -> dict[str, Any]:
    """A policy of the --budget load: `balanced`, every partition at the quiet lag, no interval
    rebalance and no cooldown, so that only a lag change makes it choose a rebalance."""
    manifest = policy_manifest(index, "")
    topic = manifest["spec"]["topics"][0]
    manifest["spec"].update(
        kafka=kafka,
        strategy={"type": "balanced"},
        lagSource={"type": "static", "static": {"lags": {topic: [QUIET_LAG] * PARTITIONS}}},
        rebalance={"interval": "1h", "cooldownSeconds": 0},
    )
    return manifest


def cluster_manifest(bootstrap: str, *, max_handoffs: int, max_moves_per_minute: int) -> dict[str, Any]:
    return {
        "apiVersion": "groupops.dev/v1alpha1",
        "kind": "ConsumerGroupCluster",
        "metadata": {"name": CLUSTER},
        "spec": {
            "bootstrapServers": bootstrap,
            "disruptionBudget": {
                "maxHandoffsInFlight": max_handoffs,
                "maxPartitionsMovedPerMinute": max_moves_per_minute,
            },
        },
    }


def hot_partitions(owners: dict[tuple[str, int], str | None]) -> frozenset[tuple[str, int]]:
    """HOT_PARTITIONS partitions of one identity of the plan (the first, by name, that has that
    many): made hot, they leave the plan unbalanced, and one swap balances it again."""
    by_owner: dict[str, list[tuple[str, int]]] = {}
    for tp, owner in sorted(owners.items()):
        if owner is not None:
            by_owner.setdefault(owner, []).append(tp)
    for owner in sorted(by_owner):
        if len(by_owner[owner]) >= HOT_PARTITIONS:
            return frozenset(by_owner[owner][:HOT_PARTITIONS])
    raise RuntimeError(f"no identity holds {HOT_PARTITIONS} partitions in {owners}")


def most_in_window(events: list[tuple[float, int]], window: float = 60.0) -> tuple[int, float | None]:
    """The most partitions moved within any `window` seconds, (t - window, t] as the budget
    counts them, and when that window's first move was seen."""
    ordered = sorted(events)
    best, best_start, total, first = 0, None, 0, 0
    for at, count in ordered:
        total += count
        while ordered[first][0] <= at - window:
            total -= ordered[first][1]
            first += 1
        if total > best:
            best, best_start = total, ordered[first][0]
    return best, best_start


def moves_figures(times: list[PolicyTimes], start: float, end: float) -> dict[str, Any]:
    """Partitions moved between `start` and `end` (wall clock), as the plan watch saw them."""
    events = [(at, n) for t in times for at, n in t.moves if start <= at <= end]
    most, window_start = most_in_window(events)
    per_policy = [sum(n for at, n in t.moves if start <= at <= end) for t in times]
    return {
        "partitions_moved": sum(n for _, n in events),
        "most_in_any_60s": most,
        "that_window_began_s": None if window_start is None else round(window_start - start, 1),
        "policies_that_moved": sum(1 for n in per_policy if n),
        "moved_per_policy": dict(sorted(Counter(per_policy).items())),
        "moves_per_60s_from_start": [
            sum(n for at, n in events if start + k * 60 <= at < start + (k + 1) * 60)
            for k in range(int((end - start) // 60) + 1)
        ],
    }


def rank_correlation(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation (no ties expected)."""
    if len(xs) < 3:
        return None
    rx = {i: r for r, i in enumerate(sorted(range(len(xs)), key=xs.__getitem__))}
    ry = {i: r for r, i in enumerate(sorted(range(len(ys)), key=ys.__getitem__))}
    return round(statistics.correlation([rx[i] for i in range(len(xs))], [ry[i] for i in range(len(ys))]), 3)


class ClusterStatusSampler:
    """`kubectl get cgc NAME -o json` every CLUSTER_STATUS_PERIOD_S: the budget as status shows it."""

    def __init__(self, kubectl: Kubectl, name: str) -> None:
        self.kubectl, self.name = kubectl, name
        self.samples: list[tuple[float, dict[str, Any]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cgc-status")

    def start(self) -> ClusterStatusSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(CLUSTER_STATUS_PERIOD_S):
            result = self.kubectl.run("get", "cgc", self.name, "-o", "json", check=False)
            if result.returncode == 0:
                status = json.loads(result.stdout).get("status") or {}
                self.samples.append((time.time(), {k: status.get(k) for k in CLUSTER_FIGURES}))

    def summary(self, start: float, end: float) -> dict[str, Any]:
        """The most of each figure between `start` and `end`, and a sample every 30 s."""
        window = [(at, s) for at, s in self.samples if start <= at <= end]
        return {
            "samples": len(window),
            "most": {k: max((int(s.get(k) or 0) for _, s in window), default=None) for k in CLUSTER_FIGURES},
            "every_30s": [
                [round(at - start)] + [s.get(k) for k in CLUSTER_FIGURES]
                for n, (at, s) in enumerate(window)
                if n % round(30 / CLUSTER_STATUS_PERIOD_S) == 0
            ],
        }


def hold_reasons(log_path: Path) -> dict[str, int]:
    """The operator's "held by the disruption budget" lines, by the limit that held."""
    lines = [
        line for line in log_path.read_text(errors="replace").splitlines() if "held by the disruption" in line
    ]
    counts = {reason: sum(1 for line in lines if marker in line) for reason, marker in HOLD_REASONS.items()}
    return {"total": len(lines), **counts}


def rebalance_all(
    run: Run, *, quiet: float, timeout: float, statuses: ClusterStatusSampler | None
) -> dict[str, Any]:
    """Step 4 of --budget: make every policy's published plan unbalanced by its lag and follow
    the rebalances it chooses."""
    names = run.names()
    print(f"  quiet for {quiet:.0f} s (the change's moves leave the budget's minute)", flush=True)
    time.sleep(quiet)
    assert run.sampler is not None
    requests_before = apiserver_requests(run.kubectl)
    reconciles_before = operator_reconciles(run.metrics_port)
    holds_before = operator_metric(run.metrics_port, "groupops_budget_holds_total")
    cpu_before = run.sampler.cpu_seconds()
    restarts_before = len(run.restarts)
    load = machine_load()
    started = time.time()

    def patch(api: KubeApi, index: int) -> None:
        times = run.observer.times(names[index])
        topic = f"topic-{index:04d}"
        times.hot = hot_partitions(times.owners)
        lags = [hot_lag(index) if (topic, p) in times.hot else QUIET_LAG for p in range(PARTITIONS)]
        api.patch(
            "ConsumerGroupPolicy",
            run.namespace,
            names[index],
            {"spec": {"lagSource": {"static": {"lags": {topic: lags}}}}},
        )
        times.lag_patched = time.time()

    in_parallel(run.kubeconfig, list(range(run.count)), patch)
    patch_s = time.time() - started
    print(f"  patched the lags of {run.count} policies in {patch_s:.1f} s", flush=True)
    complete = wait_until(
        "every policy rebalanced",
        lambda: all(run.observer.times(n).rebalanced is not None for n in names),
        timeout,
        run.operator,
        interval=1.0,
        revive=run.reviver(),
    )
    ended = time.time()
    elapsed = ended - started
    restarted = len(run.restarts) > restarts_before  # a new process: its counters start at 0
    cpu = None if restarted else run.sampler.cpu_seconds() - cpu_before
    reconciles = None if restarted else operator_reconciles(run.metrics_port) - reconciles_before
    holds = (
        None if restarted else operator_metric(run.metrics_port, "groupops_budget_holds_total") - holds_before
    )
    requests_after = apiserver_requests(run.kubectl)
    besides_watch = (requests_after["total"] - requests_after.get("WATCH", 0.0)) - (
        requests_before["total"] - requests_before.get("WATCH", 0.0)
    )
    times = [run.observer.times(n) for n in names]
    done = [(i, t.rebalanced) for i, t in enumerate(times) if t.rebalanced is not None]
    figures: dict[str, Any] = {
        "uptime_before": load,
        "uptime_after": machine_load(),
        "patch_s": round(patch_s, 2),
        "rebalance_latency_s": spread(
            [t.rebalanced - t.lag_patched for t in times if t.rebalanced and t.lag_patched]
        ),
        "all_rebalanced_s": round(max((at for _, at in done), default=started) - started, 1),
        "not_rebalanced": len(times) - len(done),
        "complete": complete,
        "moves": moves_figures(times, started, ended),
        "most_releasing_seen": max(t.most_releasing for t in times),
        # +1: strictly worst-off first (higher index first); -1: strictly in the PATCHes' order
        "worse_off_first_rank_correlation": rank_correlation(
            [float(i) for i, _ in done], [-at for _, at in done]
        ),
        "operator_restarts": len(run.restarts) - restarts_before,
        "budget_holds": None if holds is None else int(holds),
        "operator_cpu_s_per_min": None if cpu is None else round(cpu * 60 / elapsed, 1),
        "reconciles_per_s": None if reconciles is None else round(reconciles / elapsed, 1),
        "api_requests_per_s_besides_watch": round(besides_watch / elapsed, 1),
        "rss_mib_after": round(run.sampler.rss_mib(), 1),
    }
    if statuses is not None:
        figures["cluster_status"] = statuses.summary(started, ended)
    print(f"  {json.dumps(figures)}", flush=True)
    return figures


def budget_point(
    config: str, count: int, kubeconfig: str, workdir: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """One configuration of --budget at N policies: create, change, then the lag change."""
    namespace = f"budget-{config.lower()}-{count}-{int(time.time()) % 100000}"
    lease = (
        ()
        if args.leader_lease_seconds is None
        else ("--leader-lease-seconds", str(args.leader_lease_seconds))
    )
    log_path = workdir / f"operator-{config}-{count}.log"
    run = new_run(count, kubeconfig, namespace, log_path, assignments=True, operator_args=lease)
    run.revives = True
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    kafka = {"clusterRef": {"name": CLUSTER}} if config == "clusterRef" else {"bootstrapServers": bootstrap}
    print(f"== {count} policies, {config}, namespace {namespace}, operator tick 5 s (default)", flush=True)
    with operating(run) as exits:
        statuses = None
        if config == "clusterRef":
            statuses = ClusterStatusSampler(run.kubectl, CLUSTER).start()
            exits.callback(statuses.stop)
        run.create_all(lambda index: budget_policy_manifest(index, kafka), timeout=args.plan_timeout)
        changed = time.time()
        run.change_all(timeout=args.plan_timeout)
        times = [run.observer.times(n) for n in run.names()]
        run.figures["change"]["moves"] = moves_figures(times, changed, time.time())
        if statuses is not None:
            run.figures["change"]["cluster_status"] = statuses.summary(changed, time.time())
        run.figures["lag_change"] = rebalance_all(
            run, quiet=args.budget_quiet, timeout=args.rebalance_timeout, statuses=statuses
        )
        run.figures["holds_by_reason"] = hold_reasons(run.operator.log_path)
        run.figures["operator_restarts"] = run.restarts
        run.figures["observer_relists"] = run.observer.relists
        run.figures["log"] = log_problems(run.operator.log_path)
    return run.figures


def budget_table(figures: dict[str, dict[str, dict[str, Any]]], args: argparse.Namespace) -> str:
    """The RESULTS.md table of --budget."""

    def seconds(spread_: dict[str, float]) -> str:
        return " / ".join(f"{spread_.get(k, float('nan')):.1f}" for k in ("median", "p95", "max"))

    rows = [
        "| config | N | first plan p50 / p95 / max | change -> plan p50 / p95 / max "
        "| most partitions moved in any 60 s (budget) | all rebalanced after |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for count, configs in figures.items():
        for config, f in configs.items():
            lag = f["lag_change"]
            budget = (
                f"{args.max_moves_per_minute}/min, {args.max_handoffs} in flight"
                if config == "clusterRef"
                else "no budget"
            )
            rows.append(
                f"| {config} | {int(count):,} | {seconds(f['create']['plan_latency_s'])} s "
                f"| {seconds(f['change']['epoch_move_latency_s'])} s "
                f"| {lag['moves']['most_in_any_60s']} ({budget}) "
                f"| {lag['all_rebalanced_s']:.1f} s{'' if lag['complete'] else ' (incomplete)'} |"
            )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--counts", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--steady", type=float, default=60.0, help="steady-state window, seconds")
    parser.add_argument(
        "--compare-tick", type=float, default=30.0, help="tick of the second steady window (0: skip)"
    )
    parser.add_argument("--plan-timeout", type=float, default=300.0, help="seconds to wait for all plans")
    parser.add_argument(
        "--single-changes",
        type=int,
        default=20,
        help="spec changes made one at a time on the settled fleet before the change of all (0: skip)",
    )
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument(
        "--budget", action="store_true", help="inline brokers against a clusterRef with a disruption budget"
    )
    parser.add_argument("--max-handoffs", type=int, default=3, help="--budget: maxHandoffsInFlight")
    parser.add_argument(
        "--max-moves-per-minute", type=int, default=200, help="--budget: maxPartitionsMovedPerMinute"
    )
    parser.add_argument(
        "--budget-quiet",
        type=float,
        default=65.0,
        help="--budget: seconds between the change and the lag change",
    )
    parser.add_argument(
        "--rebalance-timeout",
        type=float,
        default=1800.0,
        help="--budget: seconds to wait for every rebalance",
    )
    parser.add_argument(
        "--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS), help="--budget: which configurations"
    )
    parser.add_argument(
        "--together",
        action="store_true",
        help="--budget: run the configurations at the same time (two operators, two namespaces) "
        "rather than one after the other",
    )
    parser.add_argument(
        "--leader-lease-seconds",
        type=float,
        help="--budget: the operator's election Lease (default the operator's, 5 s; a longer one rides "
        "out CPU starvation on a shared machine)",
    )
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="groupops-operator-scale-"))
    print(f"work directory {workdir}", flush=True)
    figures: dict[str, Any] = {}
    with api_server(workdir) as kubeconfig:
        install_crd(Kubectl(kubeconfig))
        if args.budget:
            return budget_main(kubeconfig, workdir, args)
        for count in args.counts:
            compare = bool(args.compare_tick) and count == max(args.counts)
            figures[str(count)] = scale_point(count, kubeconfig, workdir, args, compare)
            if args.json:
                args.json.write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))
    return 0


def budget_main(kubeconfig: str, workdir: Path, args: argparse.Namespace) -> int:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    api = KubeApi(kubeconfig)
    manifest = cluster_manifest(
        bootstrap, max_handoffs=args.max_handoffs, max_moves_per_minute=args.max_moves_per_minute
    )
    with suppress(ApiError):
        api.delete("ConsumerGroupCluster", None, CLUSTER)  # left over on a reused API server
    api.create("ConsumerGroupCluster", None, manifest)
    print(f"ConsumerGroupCluster {CLUSTER}: {json.dumps(manifest['spec'])}", flush=True)
    figures: dict[str, dict[str, dict[str, Any]]] = {}
    for count in args.counts:
        if args.together:  # both operators at once: the machine's load falls on both alike
            with ThreadPoolExecutor(len(args.configs)) as pool:
                runs = {
                    c: pool.submit(budget_point, c, count, kubeconfig, workdir, args) for c in args.configs
                }
                figures[str(count)] = {config: run.result() for config, run in runs.items()}
        else:
            for config in args.configs:
                figures.setdefault(str(count), {})[config] = budget_point(
                    config, count, kubeconfig, workdir, args
                )
                if args.json:
                    args.json.write_text(json.dumps(figures, indent=2))
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))
    print(budget_table(figures, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
