"""Fleet benchmark: 20 consumer groups on a real broker whose hot partitions shift, consumed side by
side in one run by a static fleet (Kafka's range, no rebalancing beyond membership) and by a
groupops fleet (lag-driven `balanced`, automatic rebalancing under a ConsumerGroupCluster's
disruption budget). Issue 12, "Measure".

    .venv/bin/python benchmarks/fleet.py [--minutes 30] [--phase-minutes 5] [--work-ms 40]
        [--cold-rate 2.5] [--hot-rate 12.5] [--name fleet]
    .venv/bin/python benchmarks/fleet.py --calibrate [--work-ms 40]

One stack (groupops.devstack: a Kafka broker, etcd + kube-apiserver), one operator
(`groupops operator`, its default tick unless `--tick`; started again if it exits, as its
Deployment would), one kubelet harness running one `groupops consume` per pod, all in one
namespace. `--groups` topics of 8 partitions; on each topic two groups, one per fleet, each a
policy with 2 replicas (80 consumer processes with the defaults) whose callback sleeps
`--work-ms` per message (benchmarks/fleet_work.py). One producer thread writes every topic: two
hot partitions per topic at `--hot-rate`, the others at `--cold-rate`, the hot pairs moving every
`--phase-minutes` (benchmarks/fleet_load.py: in each phase half of the topics have both hot
partitions on one replica of range).

Measured every `--sample-s` seconds from outside the operator (benchmarks/fleet_measure.py): each
group's time lag, max over its partitions of now - produce time of the first uncommitted message
(committed offsets read by a Consumer that never joins the group, produce times from the
producer's delivery reports),
0 when caught up. Reported per group the p99 and max over the run, per fleet the distribution
over groups; partitions moved per fleet (a watch of the plan ConfigMaps, checked against the
operator's groupops_partition_moves_total); the most groupops policies with partitions releasing
at once, asserted to stay within the budget's maxHandoffsInFlight. Writes a chart
(<out>/<name>-time-lag.png) and the raw series (<out>/<name>.json; `fleet_report.py` draws the
chart again from it); the figures and how they were sized are in benchmarks/RESULTS.md, "Fleet".

`--calibrate` measures instead how fast one replica drains a backlog with the per-message cost
(one policy, one replica, 8 partitions), to size the rates: concentrated hot partitions must
exceed that, spread ones stay below it.

Everything started is stopped at the end, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from benchmarks.failover import stack  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from tests.e2e.operator_support import Kubectl, OperatorProcess, create_namespace, install_crd  # noqa: E402
from tests.e2e.runtime_support import create_topic, wait_for  # noqa: E402

from fleet_load import LoadShape, ProduceRecord, ShiftingProducer, hot_schedule  # noqa: E402
from fleet_measure import (  # noqa: E402
    ClusterSampler,
    CpuMeter,
    GroupRef,
    OperatorMoves,
    PlanWatch,
    TimeLagSampler,
)
from fleet_report import draw_chart, markdown_table, percentile, side_figures  # noqa: E402
from groupops.devstack.kube_api import ApiError, KubeApi  # noqa: E402
from groupops.devstack.kubelet import Kubelet  # noqa: E402

SIDES = ("static", "groupops")
POLICY_PREFIX = {"static": "static", "groupops": "gops"}


# -- the stack ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fleet:
    """The namespace, the cluster resource, the groups and the processes of one run."""

    api: KubeApi
    namespace: str
    cluster: str
    groups: list[GroupRef]
    kubelet: Kubelet
    operator: OperatorProcess
    supervisor: OperatorSupervisor

    def side_of(self, policy: str) -> str | None:
        for side, prefix in POLICY_PREFIX.items():
            if policy.startswith(f"{prefix}-"):
                return side
        return None


class OperatorSupervisor:
    """Starts the operator again when it exits, as its Deployment would (it exits on purpose when
    it cannot renew its election Lease in time, and a librdkafka abort can end it); keeps when and
    why. Stopped before the operator is, so a deliberate stop is not undone."""

    def __init__(self, operator: OperatorProcess, *, check_s: float = 2.0) -> None:
        self._operator = operator
        self._check_s = check_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="operator-supervisor", daemon=True)
        self.restarts: list[tuple[float, str]] = []
        self.on_restart: list[Callable[[], None]] = []

    def start(self) -> OperatorSupervisor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self._check_s):
            if self._operator.alive():
                continue
            last_words = next(
                (
                    line
                    for line in reversed(self._operator.log_tail(400).splitlines())
                    if "CRITICAL" in line or "Assertion" in line
                ),
                self._operator.log_tail(1),
            )
            self.restarts.append((time.time(), last_words.strip()))
            print(f"  the operator exited ({last_words.strip()[:160]}); starting it again", flush=True)
            for callback in self.on_restart:
                callback()
            self._operator.start()


def consumer_environment(args: argparse.Namespace) -> dict[str, str]:
    """What the kubelet adds to every consumer: the sleeping callback (importable from this
    directory), its cost, a batch of `--batch-size` (the default 100 at 40 ms per message holds
    offsets for 4 s), and no processing journal (thousands of lines per second that measure
    nothing here)."""
    python_path = os.pathsep.join(p for p in (str(BENCHMARKS), os.environ.get("PYTHONPATH", "")) if p)
    return {
        "GROUPOPS_PROCESSOR": "fleet_work:process",
        "FLEET_WORK_MS": str(args.work_ms),
        "GROUPOPS_BATCH_SIZE": str(args.batch_size),
        "GROUPOPS_RECORD_DIR": "",
        "PYTHONPATH": python_path,
    }


def policy_document(
    group: GroupRef, args: argparse.Namespace, *, bootstrap: str, cluster: str
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "groupId": group.group_id,
        "topics": [group.topic],
        "lagSource": {"type": "kafka"},
        "consumers": {"replicas": args.replicas},
        "targetTimeLagSeconds": args.target_time_lag,
    }
    if group.side == "static":
        spec["kafka"] = {"bootstrapServers": bootstrap}
        spec["strategy"] = {"type": "range", "autoOffsetReset": "earliest"}
    else:
        spec["kafka"] = {"clusterRef": {"name": cluster}}
        spec["strategy"] = {"type": "balanced", "autoOffsetReset": "earliest"}
        spec["rebalance"] = {
            "interval": "60s",
            "imbalanceThreshold": args.imbalance_threshold,
            "minImprovement": args.min_improvement,
            "cooldownSeconds": args.cooldown,
        }
    return {
        "apiVersion": "groupops.dev/v1alpha1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {"name": group.policy},
        "spec": spec,
    }


@contextmanager
def fleet(
    args: argparse.Namespace,
    bootstrap: str,
    kubeconfig: str,
    workdir: Path,
    topics: Sequence[str],
    *,
    sides: Sequence[str] = SIDES,
) -> Iterator[Fleet]:
    """The namespace, the cluster with its budget, the policies of `sides` (one per topic each),
    the kubelet and the operator; stops the operator and every consumer on the way out."""
    suffix = f"{int(time.time()) % 100000}"
    api = KubeApi(kubeconfig)
    kubectl = Kubectl(kubeconfig)
    install_crd(kubectl)
    namespace = f"fleet-{suffix}"
    create_namespace(kubectl, namespace)
    cluster = f"fleet-{suffix}"
    api.create(
        "ConsumerGroupCluster",
        None,
        {
            "apiVersion": "groupops.dev/v1alpha1",
            "kind": "ConsumerGroupCluster",
            "metadata": {"name": cluster},
            "spec": {
                "bootstrapServers": bootstrap,
                "disruptionBudget": {
                    "maxHandoffsInFlight": args.max_in_flight,
                    "maxPartitionsMovedPerMinute": args.max_moved_per_minute,
                },
            },
        },
    )
    groups = [
        GroupRef(
            policy=f"{POLICY_PREFIX[side]}-{index:02d}",
            side=side,
            group_id=f"fleet-{suffix}-{side}-{index:02d}",
            topic=topic,
            partitions=args.partitions,
        )
        for side in sides
        for index, topic in enumerate(topics)
    ]
    kubelet = Kubelet(
        api=api,
        namespace=namespace,
        workdir=workdir / "pods",
        record_dir=workdir / "journal",
        extra_env=consumer_environment(args),
    )
    operator = OperatorProcess(
        kubeconfig=kubeconfig,
        namespace=namespace,
        log_path=workdir / "operator.log",
        tick=None if args.tick is None else str(args.tick),
        extra=["--leader-lease-seconds", str(args.leader_lease)],
    )
    kubelet.start()
    try:
        operator.start()
        supervisor = OperatorSupervisor(operator).start()
        try:
            for group in groups:
                api.create(
                    "ConsumerGroupPolicy",
                    namespace,
                    policy_document(group, args, bootstrap=bootstrap, cluster=cluster),
                )
            yield Fleet(api, namespace, cluster, groups, kubelet, operator, supervisor)
        finally:
            supervisor.stop()
            operator.stop()
    finally:
        kubelet.stop()
        with suppress(ApiError, OSError):  # the API server may be what failed
            api.delete("ConsumerGroupCluster", None, cluster)
        api.close()


def status_of(api: KubeApi, namespace: str, policy: str) -> dict[str, Any]:
    return dict((api.get("ConsumerGroupPolicy", namespace, policy) or {}).get("status") or {})


def wait_ready(run: Fleet, replicas: int, timeout_s: float) -> None:
    def ready() -> bool:
        not_ready = [
            g.policy
            for g in run.groups
            if (st := status_of(run.api, run.namespace, g.policy)).get("readyReplicas") != replicas
            or not st.get("epoch")
        ]
        if not_ready:
            print(f"  {len(not_ready)} policies not ready yet ({', '.join(not_ready[:4])} ...)", flush=True)
        return not not_ready

    wait_for(f"{len(run.groups)} policies with {replicas} ready replicas", ready, timeout_s, interval=10)


def consumer_rss_mib(kubelet: Kubelet) -> tuple[int, float]:
    """(consumer processes running, their total resident memory in MiB)."""
    total_kib = 0
    running = 0
    for run in kubelet.history:
        process = run.process.process
        if process is None or not run.process.alive():
            continue
        try:
            for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kib += int(line.split()[1])
                    running += 1
        except OSError:
            continue
    return running, total_kib / 1024


# -- the run ------------------------------------------------------------------------------------


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def processes_of(run: Fleet) -> dict[str, list[int]]:
    """The pids whose CPU the progress lines report."""
    consumers = [
        r.process.process.pid for r in run.kubelet.history if r.process.process and r.process.alive()
    ]
    operator = [run.operator.process.pid] if run.operator.process else []
    return {"consumers": consumers, "operator": operator, "benchmark": [os.getpid()]}


def progress_line(sampler: TimeLagSampler, run: Fleet, watch: PlanWatch, cluster: ClusterSampler) -> str:
    parts = []
    for side in SIDES:
        latest = [
            sampler.lags[g.policy][-1] for g in run.groups if g.side == side and sampler.lags.get(g.policy)
        ]
        if latest:
            parts.append(f"{side} median {percentile(latest, 50):.1f} s max {percentile(latest, 100):.1f} s")
    waiting = cluster.samples[-1][2] if cluster.samples else 0
    load = os.getloadavg()[0]
    return (
        f"{'; '.join(parts)}; in flight now {len(watch.in_flight.get('groupops', set()))} "
        f"(most {watch.most_in_flight.get('groupops', 0)}), waiting {waiting}, moves "
        f"{watch.moves_by_side()}, load {load:.1f}"
    )


def run_fleet(args: argparse.Namespace) -> int:
    shape = LoadShape(
        topics=args.groups,
        partitions=args.partitions,
        replicas=args.replicas,
        cold_rate=args.cold_rate,
        hot_rate=args.hot_rate,
        hot_per_topic=2,
        phase_s=args.phase_minutes * 60,
    )
    phase_count = max(1, math.ceil(args.minutes / args.phase_minutes))
    phases = hot_schedule(shape, phase_count, args.seed)
    started_uptime = uptime()
    print(f"start: {started_uptime}")
    print(
        f"{args.groups} topics x {args.partitions} partitions, {shape.topic_rate():.1f} msg/s per topic, "
        f"{shape.topic_rate() * args.groups:.0f} msg/s in all; replica capacity about "
        f"{1000 / args.work_ms:.0f} msg/s at {args.work_ms} ms per message",
        flush=True,
    )
    workdir = Path(tempfile.mkdtemp(prefix="groupops-fleet-"))
    print(f"work directory {workdir}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = ProduceRecord()
    with ExitStack() as exits:
        bootstrap, kubeconfig = exits.enter_context(stack(workdir))
        suffix = int(time.time()) % 100000
        topics = [f"fleet-{suffix}-{index:02d}" for index in range(args.groups)]
        for topic in topics:
            create_topic(bootstrap, topic, args.partitions)
        run = exits.enter_context(fleet(args, bootstrap, kubeconfig, workdir, topics))
        watch = PlanWatch(run.api, run.namespace, run.side_of).start()
        exits.callback(watch.stop)
        setup_began = time.monotonic()
        wait_ready(run, args.replicas, args.ready_timeout)
        wait_for(
            "every plan settled (nothing releasing) for 15 s",
            lambda: not any(watch.in_flight.values()),
            120,
            interval=1,
        )
        time.sleep(15)
        running, rss = consumer_rss_mib(run.kubelet)
        print(
            f"{running} consumer processes up after {time.monotonic() - setup_began:.0f} s, "
            f"{rss:.0f} MiB resident in all ({rss / max(1, running):.0f} MiB each)",
            flush=True,
        )
        operator_moves = OperatorMoves(run.namespace)
        operator_moves.read(run.operator.metrics_port)
        watch.start_counting()
        producer = ShiftingProducer(bootstrap, topics, shape, phases, record).start()
        exits.callback(producer.stop)
        load_started = producer.started_at
        sampler = TimeLagSampler(bootstrap, run.groups, record, interval_s=args.sample_s).start()
        exits.callback(sampler.stop)
        cluster = ClusterSampler(run.api, run.cluster, interval_s=args.sample_s).start()
        exits.callback(cluster.stop)
        cpu = CpuMeter()
        cpu.sample(processes_of(run))
        cpu_minutes: list[dict[str, float]] = []
        run.supervisor.on_restart.append(operator_moves.restarted)
        restarts_before_load = len(run.supervisor.restarts)
        end_at = load_started + args.minutes * 60
        next_report = load_started + 60
        while time.time() < end_at:
            time.sleep(min(5.0, max(0.0, end_at - time.time())))
            if time.time() >= next_report:
                elapsed = (time.time() - load_started) / 60
                operator_moves.read(run.operator.metrics_port)
                used = cpu.sample(processes_of(run))
                cpu_minutes.append(used)
                print(
                    f"[{elapsed:4.1f} min] {progress_line(sampler, run, watch, cluster)}; CPU cores "
                    + ", ".join(f"{name} {value:.2f}" for name, value in used.items()),
                    flush=True,
                )
                next_report += 60
        producer.stop()
        sampler.stop()
        cluster.stop()
        operator_moves.read(run.operator.metrics_port)
        running_end, rss_end = consumer_rss_mib(run.kubelet)
        restarts = sum(r.restarts for r in run.kubelet.history)
        operator_alive = run.operator.alive()
        operator_restarts = len(run.supervisor.restarts) - restarts_before_load
        figures = [
            side_figures(
                side,
                [g.policy for g in run.groups if g.side == side],
                lags=sampler.lags,
                moves_watched=watch.moves,
                moves_operator=operator_moves.totals,
                handoffs_started=watch.handoffs_started.get(side, 0),
                most_in_flight=watch.most_in_flight.get(side, 0),
            )
            for side in SIDES
        ]
        ended_uptime = uptime()
        table = markdown_table(figures, args.max_in_flight)
        print(f"\nend: {ended_uptime}")
        print(
            f"produced {producer.produced} (acknowledged {record.acknowledged}, failed {record.failed}); "
            f"{len(sampler.times)} samples, {sampler.failures} failed reads; {running_end} consumers "
            f"({rss_end:.0f} MiB) at the end, {restarts} consumer restarts; operator restarts "
            f"{operator_restarts}, alive {operator_alive}; plan versions watched {watch.versions_seen}"
        )
        print(f"\n{table}\n")
        for f in figures:
            worst = sorted(f.group_p99.items(), key=lambda kv: -kv[1])[:5]
            print(f"{f.side}: worst per-group p99 {', '.join(f'{p} {v:.1f} s' for p, v in worst)}")
        document = {
            "command": " ".join(sys.argv),
            "args": vars(args),
            "uptime_start": started_uptime,
            "uptime_end": ended_uptime,
            "load_started": load_started,
            "shape": {
                "cold_rate": shape.cold_rate,
                "hot_rate": shape.hot_rate,
                "topic_rate": shape.topic_rate(),
                "phase_s": shape.phase_s,
            },
            "phases": [{"start_s": p.start_s, "hot": p.hot, "concentrated": p.concentrated} for p in phases],
            "consumers": {"running": running, "rss_mib": rss, "restarts": restarts},
            "operator_restarts": operator_restarts,
            "operator_exits": run.supervisor.restarts,
            "cpu_cores_per_minute": cpu_minutes,
            "produced": producer.produced,
            "sample_times": sampler.times,
            "time_lag": sampler.lags,
            "groups": [{"policy": g.policy, "side": g.side, "topic": g.topic} for g in run.groups],
            "in_flight": watch.in_flight_series,
            "cluster_status": cluster.samples,
            "figures": {
                f.side: {
                    "group_p99": f.group_p99,
                    "group_max": f.group_max,
                    "moves_watched": f.moves_watched,
                    "moves_operator": f.moves_operator,
                    "handoffs_started": f.handoffs_started,
                    "most_in_flight": f.most_in_flight,
                }
                for f in figures
            },
            "table": table,
        }
        (out / f"{args.name}.json").write_text(json.dumps(document, indent=1))
        draw_chart(
            out / f"{args.name}-time-lag.png",
            times=sampler.times,
            lags_by_side={
                side: [sampler.lags[g.policy] for g in run.groups if g.side == side] for side in SIDES
            },
            shifts_s=[p.start_s for p in phases[1:]],
            load_started=load_started,
            in_flight=watch.in_flight_series.get("groupops", []),
            waiting=[(t, w) for t, _, w, _ in cluster.samples],
            budget=args.max_in_flight,
            title=(
                f"{args.groups} groups per fleet, {args.minutes:g} min: static range vs groupops (balanced, "
                f"budget {args.max_in_flight} handoffs, {args.max_moved_per_minute} partitions/min)"
            ),
        )
        print(f"wrote {out / f'{args.name}.json'} and {out / f'{args.name}-time-lag.png'}")
    groupops = next(f for f in figures if f.side == "groupops")
    if groupops.most_in_flight > args.max_in_flight:
        print(f"BUDGET EXCEEDED: {groupops.most_in_flight} handoffs in flight > {args.max_in_flight}")
        return 1
    return 0


def run_calibration(args: argparse.Namespace) -> int:
    """One policy, one replica, all 8 partitions, a backlog: messages drained per second."""
    print(f"start: {uptime()}")
    workdir = Path(tempfile.mkdtemp(prefix="groupops-fleet-calibrate-"))
    backlog = int(1000 / args.work_ms * (args.calibrate_seconds + 60) * 1.5)
    with ExitStack() as exits:
        bootstrap, kubeconfig = exits.enter_context(stack(workdir))
        topic = f"fleet-calibrate-{int(time.time()) % 100000}"
        create_topic(bootstrap, topic, args.partitions)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        for i in range(backlog):
            producer.produce(topic, b"x" * 100, partition=i % args.partitions)
            if i % 1000 == 0:
                producer.poll(0)
        producer.flush(60)
        args.replicas = 1
        run = exits.enter_context(fleet(args, bootstrap, kubeconfig, workdir, [topic], sides=("static",)))
        (group,) = run.groups
        reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group.group_id})
        exits.callback(reader.close)

        def committed() -> int:
            wanted = [TopicPartition(topic, p) for p in range(args.partitions)]
            return sum(tp.offset for tp in reader.committed(wanted, timeout=15) if tp.offset >= 0)

        wait_for("the replica committing", lambda: committed() > 0, 600, interval=2)
        time.sleep(20)  # past start-up
        first, began = committed(), time.monotonic()
        time.sleep(args.calibrate_seconds)
        drained = committed() - first
        seconds = time.monotonic() - began
        capacity = drained / seconds
        print(f"\nend: {uptime()}")
        print(
            f"one replica, {args.partitions} partitions, {args.work_ms:g} ms per message, batch "
            f"{args.batch_size}: {drained} messages in {seconds:.0f} s = {capacity:.1f} msg/s "
            f"(the sleep alone allows {1000 / args.work_ms:.1f})"
        )
        # Hot = k x cold. A concentrated range replica carries 2 hot + 2 cold = (2k + 2) cold, a
        # spread one k + 3 cold: size cold so that the concentrated one is 125 % of capacity.
        k = args.hot_rate / args.cold_rate
        cold = 1.25 * capacity / (2 * k + 2)
        print(
            f"sizing with hot = {k:g} x cold: cold {cold:.2f} msg/s, hot {k * cold:.2f} msg/s put a "
            f"concentrated range replica at 125 % of capacity and a spread one at "
            f"{(k + 3) * cold / capacity:.0%}"
        )
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the load runs")
    parser.add_argument("--phase-minutes", type=float, default=5.0, help="how long a hot set lasts")
    parser.add_argument("--groups", type=int, default=20, help="topics, each with one group per fleet")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--replicas", type=int, default=2, help="consumer replicas per policy")
    parser.add_argument("--work-ms", type=float, default=40.0, help="the callback's sleep per message")
    parser.add_argument("--batch-size", type=int, default=25, help="GROUPOPS_BATCH_SIZE of every consumer")
    parser.add_argument("--cold-rate", type=float, default=2.5, help="msg/s of a cold partition")
    parser.add_argument("--hot-rate", type=float, default=12.5, help="msg/s of a hot partition")
    parser.add_argument(
        "--tick", type=float, default=None, help="the operator's --tick (default: its own, 5 s)"
    )
    parser.add_argument(
        "--leader-lease",
        type=float,
        default=15.0,
        help="operator --leader-lease-seconds (its 5 s default lost leadership at load 20 here)",
    )
    parser.add_argument("--sample-s", type=float, default=5.0, help="time lag sampling period")
    parser.add_argument("--max-in-flight", type=int, default=3, help="disruptionBudget.maxHandoffsInFlight")
    parser.add_argument(
        "--max-moved-per-minute", type=int, default=20, help="disruptionBudget.maxPartitionsMovedPerMinute"
    )
    parser.add_argument("--imbalance-threshold", type=float, default=1.5)
    parser.add_argument("--min-improvement", type=float, default=0.2)
    parser.add_argument("--cooldown", type=int, default=60, help="rebalance.cooldownSeconds")
    parser.add_argument("--target-time-lag", type=float, default=30.0, help="targetTimeLagSeconds")
    parser.add_argument("--seed", type=int, default=12, help="the hot-set schedule's seed")
    parser.add_argument("--ready-timeout", type=float, default=900.0, help="seconds for every replica to run")
    parser.add_argument("--out", default=str(BENCHMARKS / "results"), help="where the chart and JSON go")
    parser.add_argument("--name", default="fleet", help="file name stem of the chart and JSON")
    parser.add_argument("--calibrate", action="store_true", help="measure one replica's drain rate only")
    parser.add_argument("--calibrate-seconds", type=float, default=60.0)
    return parser.parse_args(argv)


def raise_interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM unwinds like Ctrl-C, so every `finally` stops what it started; a second SIGTERM or
    Ctrl-C (a process group signalled twice) must not cut that short."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, raise_interrupt)
    signal.signal(signal.SIGINT, raise_interrupt)
    if args.calibrate:
        return run_calibration(args)
    return run_fleet(args)


if __name__ == "__main__":
    raise SystemExit(main())
