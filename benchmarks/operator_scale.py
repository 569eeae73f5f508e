"""Operator at scale: N ConsumerGroupPolicies against one `groupops operator`, on the real API
server (kube-apiserver + etcd of `groupops.devstack`).

    .venv/bin/python benchmarks/operator_scale.py [--counts 100 1000] [--steady 60] [--compare-tick 30]
                                                  [--json FILE]

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
   reconciles per second (the operator's groupops_reconcile_duration_seconds_count) and API
   requests per second (apiserver_request_total of the API server's /metrics, every client, per
   verb and in total besides WATCH);
4. a spec change on every policy (replicas 3 -> 4, one PATCH each): latency until the plan
   ConfigMap's epoch moves past the one it had.

Then, for the largest N, the operator is restarted with --tick `--compare-tick` and the steady
window is measured again (after its resume pass has reconciled every policy once).
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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.kube_api import ApiError, KubeApi  # noqa: E402
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

STRATEGIES = ("range", "sticky", "lag", "balanced")
PARTITIONS = 12
REPLICAS = 3
CLIENT_THREADS = 8
PLAN_SUFFIX = "-plan"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# -- observing the cluster -----------------------------------------------------------------------


@dataclass
class PolicyTimes:
    created: float | None = None
    first_plan: float | None = None
    first_status_epoch: float | None = None
    plan_epochs: list[tuple[float, int, str]] = field(default_factory=list)
    """(seen at, epoch, policy generation the plan was computed for), one per change."""

    def epoch_moved_after(self, epoch: int) -> float | None:
        return next((at for at, seen, _ in self.plan_epochs if seen > epoch), None)

    def plan_epoch(self) -> int:
        return self.plan_epochs[-1][1] if self.plan_epochs else 0


class Observer:
    """Watches the namespace's ConfigMaps and policies in two threads and notes, per policy, when
    its plan appeared, each epoch it moved to, and when its status first showed an epoch."""

    def __init__(self, kubeconfig: str, namespace: str) -> None:
        self.namespace = namespace
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
    """Sum of every sample of `metric` in an exposition, also per verb when it has that label."""
    sums: dict[str, float] = {"total": 0.0}
    pattern = re.compile(rf"^{re.escape(metric)}(\{{[^}}]*\}})?\s+(\S+)")
    for line in text.splitlines():
        match = pattern.match(line)
        if not match:
            continue
        value = float(match.group(2))
        sums["total"] += value
        verb = re.search(r'verb="([^"]+)"', match.group(1) or "")
        if verb:
            sums[verb.group(1)] = sums.get(verb.group(1), 0.0) + value
    return sums


def apiserver_requests(kubectl: Kubectl) -> dict[str, float]:
    return prometheus_sum(kubectl.run("get", "--raw", "/metrics").stdout, "apiserver_request_total")


def operator_reconciles(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as response:
        text = response.read().decode()
    return prometheus_sum(text, "groupops_reconcile_duration_seconds_count")["total"]


# -- the workload --------------------------------------------------------------------------------


def policy_manifest(index: int, bootstrap: str) -> dict[str, Any]:
    topic = f"topic-{index:04d}"
    strategy = STRATEGIES[index % len(STRATEGIES)]
    return {
        "apiVersion": "groupops.dev/v1alpha1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {"name": f"policy-{index:04d}"},
        "spec": {
            "kafka": {"bootstrapServers": bootstrap},
            "groupId": f"group-{index:04d}",
            "topics": [topic],
            "strategy": {"type": strategy},
            "lagSource": {
                "type": "static",
                "static": {"lags": {topic: [(index * 7 + p * 131) % 1000 for p in range(PARTITIONS)]}},
            },
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
    what: str, done: Callable[[], bool], timeout: float, operator: OperatorProcess, interval: float = 0.5
) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        if not operator.alive():
            raise RuntimeError(f"the operator died while waiting for {what}:\n{operator.log_tail()}")
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
    }
    samples = [line for line in lines if "ERROR" in line or "Traceback" in line][:5]
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
        reconciles_before = operator_reconciles(self.metrics_port)
        cpu_before, at = self.sampler.cpu_seconds(), time.monotonic()
        time.sleep(seconds)
        cpu_after, elapsed = self.sampler.cpu_seconds(), time.monotonic() - at
        reconciles_after = operator_reconciles(self.metrics_port)
        requests_after = apiserver_requests(self.kubectl)
        per_verb = {
            verb: round((requests_after.get(verb, 0.0) - requests_before.get(verb, 0.0)) / elapsed, 1)
            for verb in requests_after
        }
        return {
            "window_s": round(elapsed, 1),
            "cpu_s_per_min": round((cpu_after - cpu_before) * 60 / elapsed, 1),
            "cpu_percent_of_one_core": round((cpu_after - cpu_before) * 100 / elapsed, 1),
            "reconciles_per_s": round((reconciles_after - reconciles_before) / elapsed, 1),
            "api_requests_per_s": per_verb,
            "api_requests_per_s_besides_watch": round(per_verb["total"] - per_verb.get("WATCH", 0.0), 1),
            "rss_mib_end": round(self.sampler.rss_mib(), 1),
            "peak_mib": round(self.sampler.peak_mib(), 1),
            "uptime": machine_load(),
        }

    def create_all(self, bootstrap: str, timeout: float) -> None:
        def create(api: KubeApi, index: int) -> None:
            manifest = policy_manifest(index, bootstrap)
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

        complete = wait_until("every plan and status", planned, timeout, self.operator)
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

        complete = wait_until("every plan epoch to move", moved, timeout, self.operator)
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


def scale_point(
    count: int, kubeconfig: str, workdir: Path, args: argparse.Namespace, compare_tick: bool
) -> dict[str, Any]:
    kubectl = Kubectl(kubeconfig)
    namespace = f"scale-{count}-{int(time.time()) % 100000}"
    create_namespace(kubectl, namespace)
    metrics_port = free_port()
    operator = OperatorProcess(
        kubeconfig=kubeconfig,
        namespace=namespace,
        log_path=workdir / f"operator-{count}.log",
        extra=["--metrics-port", str(metrics_port)],  # the last --metrics-port wins
        tick=None,
    )
    run = Run(
        count=count,
        kubeconfig=kubeconfig,
        kubectl=kubectl,
        namespace=namespace,
        operator=operator,
        metrics_port=metrics_port,
        observer=Observer(kubeconfig, namespace),
    )
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    run.observer.start()
    with ExitStack() as exits:
        if os.environ.get("KUBECONFIG"):
            exits.callback(release_namespace, kubeconfig, kubectl, namespace, count)
        exits.callback(run.observer.stop)
        exits.callback(run.stop_operator)
        print(f"== {count} policies, namespace {namespace}, operator tick 5 s (default)", flush=True)
        run.start_operator(None)
        assert run.sampler is not None
        run.figures["operator_rss_idle_mib"] = round(run.sampler.rss_mib(), 1)
        run.create_all(bootstrap, timeout=args.plan_timeout)
        run.figures["steady_tick_5"] = run.steady(args.steady)
        print(f"  steady: {json.dumps(run.figures['steady_tick_5'])}", flush=True)
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
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="groupops-operator-scale-"))
    print(f"work directory {workdir}", flush=True)
    figures: dict[str, Any] = {}
    with api_server(workdir) as kubeconfig:
        install_crd(Kubectl(kubeconfig))
        for count in args.counts:
            compare = bool(args.compare_tick) and count == max(args.counts)
            figures[str(count)] = scale_point(count, kubeconfig, workdir, args, compare)
            if args.json:
                args.json.write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
