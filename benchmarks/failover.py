"""Failover benchmark: our Lease-fenced failover against Kafka's static membership, on the same
broker in the same run, through the real operator and the kubelet harness of the e2e tests.

    .venv/bin/python benchmarks/failover.py [--runs 5] [--lease N] [--tick S] [--json FILE]

Without --lease/--tick the operator runs with its defaults (Lease 4 s, tick 5 s): out of the box.

Uses $KAFKA_BOOTSTRAP and $KUBECONFIG when set, else starts a broker and an API server with
groupops.devstack (built by `make stack`). Measures, each the median (and range) of --runs:

1. crash -> consuming: SIGKILL the replica that owns the partitions; time until another replica
   processes one of them. Ours: policy `failover` (delivery plan), 3 replicas by priority.
   Kafka: 3 static members (delivery native, range; group.instance.id, default
   session.timeout.ms 45 s). The crashed process is not restarted until the measurement ends,
   so Kafka's figure is its session timeout. Ours twice: a crash the kubelet reports (the pod's
   status shows the container ended: planner/exits.py), and a lost node (the process dies and
   nothing reports it: the Lease duration).
2. graceful stop -> consuming: SIGTERM instead (the process exits and stays down). A static
   member does not leave the group on close, so Kafka again waits for the session timeout.
3. messages processed twice per crash (processed by the victim, not yet committed).
4. partitions paused per rebalance (scale 3 -> 4 and 4 -> 3, 12 partitions): ours (delivery
   plan with the range and the cooperative-sticky strategies: only moving partitions pause) vs
   Kafka's eager (range: every partition pauses) and cooperative (cooperative-sticky) protocols,
   with the mean time a paused partition waited until it was consumed again.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import AdminClient  # noqa: E402
from tests.e2e.kube_api import KubeApi  # noqa: E402
from tests.e2e.kubelet import Kubelet  # noqa: E402
from tests.e2e.operator_support import Kubectl, OperatorProcess, create_namespace, install_crd  # noqa: E402
from tests.e2e.runtime_support import SteadyProducer, create_topic, wait_for  # noqa: E402

from groupops.consumer.audit import Journals, load_journals  # noqa: E402
from groupops.devstack import KafkaCluster, KafkaSettings  # noqa: E402
from groupops.devstack.kube import KubeApiServer  # noqa: E402
from groupops.planner.handoff import DEFAULT_LEASE_DURATION_S  # noqa: E402
from groupops.planner.plan_format import plan_from_configmap  # noqa: E402


@dataclass
class Setup:
    name: str
    api: KubeApi
    kubectl: Kubectl
    namespace: str
    topic: str
    partitions: int
    group_id: str
    kubelet: Kubelet
    operator: OperatorProcess
    bootstrap: str
    producer: SteadyProducer | None = None
    admin: Any = None

    def identity(self, ordinal: int) -> str:
        return f"{self.group_id}-{ordinal}"

    def pod_of(self, identity: str) -> str:
        return f"{self.name}-{identity.rsplit('-', 1)[1]}"

    def journals(self) -> Journals:
        return load_journals(self.kubelet.record_dir)

    def plan_sets(self) -> dict[str, list[tuple[str, int]]]:
        configmap = self.api.get("ConfigMap", self.namespace, f"{self.name}-plan")
        if configmap is None:
            return {}
        plan = plan_from_configmap(configmap.get("data") or {}, configmap["metadata"].get("annotations"))
        if plan.releasing:
            return {}
        return {str(k): [tuple(tp) for tp in v] for k, v in plan.plan.assignment.items() if v}  # type: ignore[misc]

    def broker_sets(self) -> dict[str, list[tuple[str, int]]]:
        if self.admin is None:
            self.admin = AdminClient({"bootstrap.servers": self.bootstrap})
        description = self.admin.describe_consumer_groups([self.group_id])[self.group_id].result(timeout=30)
        if not str(description.state).endswith("STABLE"):
            return {}
        return {
            str(m.group_instance_id): [(tp.topic, tp.partition) for tp in m.assignment.topic_partitions]
            for m in description.members
            if m.assignment.topic_partitions
        }


def first_processing(
    setup: Setup, partitions: set[tuple[str, int]], *, not_by: str, after: float
) -> float | None:
    starts = [
        r.start
        for r in setup.journals().processed
        if (r.topic, r.partition) in partitions and r.identity != not_by and r.start > after
    ]
    return min(starts) if starts else None


def duplicates_of(journals: Journals, victim: str, at: float) -> int:
    seen: dict[tuple[str, int, int], list[Any]] = {}
    for r in journals.processed:
        seen.setdefault((r.topic, r.partition, r.offset), []).append(r)
    count = 0
    for records in seen.values():
        if len(records) < 2:
            continue
        records.sort(key=lambda r: r.start)
        for earlier, later in pairwise(records):
            if earlier.identity == victim and earlier.start < at < later.start:
                count += 1
    return count


@contextmanager
def stack(workdir: Path) -> Iterator[tuple[str, str]]:
    """(bootstrap, kubeconfig): $KAFKA_BOOTSTRAP / $KUBECONFIG when set, else started here
    (benchmarks/fleet.py uses it too)."""
    with ExitStack() as exits:
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
        if not bootstrap:
            kafka = KafkaCluster(workdir / "kafka", KafkaSettings())
            kafka.start()
            exits.callback(kafka.stop)
            bootstrap = kafka.bootstrap
        kubeconfig = os.environ.get("KUBECONFIG")
        if not kubeconfig:
            server = KubeApiServer(workdir / "kube")
            server.start()
            exits.callback(server.stop)
            kubeconfig = str(server.kubeconfig)
        yield bootstrap, kubeconfig


@contextmanager
def policy_setup(
    label: str, bootstrap: str, kubeconfig: str, workdir: Path, args: argparse.Namespace, spec: dict[str, Any]
) -> Iterator[Setup]:
    suffix = f"{label}-{int(time.time()) % 100000}"
    api = KubeApi(kubeconfig)
    kubectl = Kubectl(kubeconfig)
    install_crd(kubectl)
    namespace = f"bench-{suffix}"
    create_namespace(kubectl, namespace)
    topic = f"bench-{suffix}"
    partitions = int(spec.pop("partitions"))
    create_topic(bootstrap, topic, partitions)
    kubelet = Kubelet(
        api=api,
        namespace=namespace,
        workdir=workdir / label / "pods",
        record_dir=workdir / label / "journal",
        restart_delay=3600.0,  # a crashed replica stays down until the measurement is over
        exit_report_delay=1.0,  # a kubelet's relist period, the worst case
    )
    operator = OperatorProcess(
        kubeconfig=kubeconfig,
        namespace=namespace,
        log_path=workdir / label / "operator.log",
        extra=[
            *([] if args.lease is None else ["--lease-duration", str(args.lease)]),
            *([] if args.tick is None else ["--tick", str(args.tick)]),
        ],
        tick=None,
    )
    (workdir / label).mkdir(parents=True, exist_ok=True)
    setup = Setup(
        name="bench",
        api=api,
        kubectl=kubectl,
        namespace=namespace,
        topic=topic,
        partitions=partitions,
        group_id=f"g-{suffix}",
        kubelet=kubelet,
        operator=operator,
        bootstrap=bootstrap,
    )
    policy = {
        "apiVersion": "groupops.dev/v1alpha1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {"name": setup.name},
        "spec": {
            "kafka": {"bootstrapServers": bootstrap},
            "groupId": setup.group_id,
            "topics": [topic],
            "lagSource": {"type": "static", "static": {"lags": {topic: [1] * partitions}}},
            **spec,
        },
    }
    kubelet.start()
    operator.start()
    try:
        kubectl.apply(policy, namespace)
        setup.producer = SteadyProducer(bootstrap, topic, partitions, total=10**8, rate=args.rate).start()
        yield setup
    finally:
        operator.stop()
        kubelet.stop()
        api.close()


def steady_sets(
    setup: Setup,
    owner_sets: Callable[[], dict[str, list[tuple[str, int]]]],
    replicas: int,
    quiet_s: float = 10.0,
) -> dict[str, list[tuple[str, int]]]:
    """The assignment once `replicas` processes run and it has not changed for `quiet_s` (a
    static member that rejoined may still cause a rebalance right after the group looked stable)."""
    deadline = time.monotonic() + 300
    last: dict[str, list[tuple[str, int]]] = {}
    since = time.monotonic()
    while time.monotonic() < deadline:
        current = owner_sets() if len(setup.kubelet.pod_names()) == replicas else {}
        if current != last:
            last, since = current, time.monotonic()
        elif current and time.monotonic() - since >= quiet_s:
            return current
        time.sleep(0.5)
    raise AssertionError(f"no steady assignment of {replicas} replicas; last {last}")


def measure_takeovers(
    setup: Setup,
    runs: int,
    *,
    owner_sets: Callable[[], dict[str, list[tuple[str, int]]]],
    how: str,
    replicas: int,
) -> tuple[list[float], list[int]]:
    """Repeatedly stop the owner of partition 0 (crash or graceful) and time the takeover."""
    times: list[float] = []
    duplicates: list[int] = []
    for run in range(runs):
        sets = steady_sets(setup, owner_sets, replicas)
        victim = next(identity for identity, tps in sets.items() if (setup.topic, 0) in tps)
        partitions = {(str(t), int(p)) for t, p in sets[victim]}
        since = time.time() - 3
        wait_for(
            "the victim consuming",
            lambda ps=partitions, t=since: first_processing(setup, ps, not_by="", after=t),
            60,
        )
        time.sleep(5)  # steady state: the victim has committed its start-up backlog
        pod = setup.pod_of(victim)
        at = time.time()
        if how == "crash":
            setup.kubelet.crash(pod)
        elif how == "node-lost":
            setup.kubelet.lose_node(pod)
        else:
            setup.kubelet.stop_process(pod)
        first = wait_for(
            "another replica consuming the victim's partitions",
            lambda ps=partitions, v=victim, t=at: first_processing(setup, ps, not_by=v, after=t),
            240,
            interval=0.05,
        )
        times.append(first - at)
        time.sleep(3)  # let the takeover commit, so every duplicate is counted
        duplicates.append(duplicates_of(setup.journals(), victim, at))
        print(
            f"  {how} {run + 1}/{runs}: {victim} -> consuming after {times[-1]:.2f} s, "
            f"{duplicates[-1]} duplicates",
            flush=True,
        )
        setup.kubelet.restart_now(pod)
    return times, duplicates


def pauses_since(
    setup: Setup, at: float
) -> tuple[dict[tuple[str, int], float], dict[tuple[str, int], float], float]:
    """Partitions paused since `at` (first release/revoke/lost event of each), when each was
    consumed again (if it was), and the time of the last pause event."""
    journals = setup.journals()
    paused: dict[tuple[str, int], float] = {}
    last = at
    for event in sorted(journals.events, key=lambda e: e["w"]):
        if event["k"] in ("release", "revoke", "lost") and event["w"] >= at:
            last = max(last, event["w"])
            for name in event.get("parts", []):
                topic, _, number = name.rpartition("-")
                paused.setdefault((topic, int(number)), event["w"])
    resumed: dict[tuple[str, int], float] = {}
    for r in journals.processed:
        tp = (r.topic, r.partition)
        if tp in paused and r.start > paused[tp] and (tp not in resumed or r.start < resumed[tp]):
            resumed[tp] = r.start
    return paused, resumed, last


def measure_rebalances(setup: Setup, scale: Callable[[int], None]) -> list[tuple[int, float, float]]:
    """Scale 3 -> 4 -> 3 -> 4 -> 3. Per change: the partitions paused (by every rebalance the
    change caused, including one a departed static member causes only at its session timeout),
    their mean and longest pause. A change is over when every paused partition is consumed
    again and nothing paused for 15 s (at most 120 s)."""
    results: list[tuple[int, float, float]] = []
    for replicas in (4, 3, 4, 3):
        time.sleep(5)
        at = time.time()
        scale(replicas)
        wait_for(f"{replicas} replicas", lambda r=replicas: len(setup.kubelet.pod_names()) == r, 180)
        while True:
            paused, resumed, last = pauses_since(setup, at)
            now = time.time()
            if now - at > 120 or (now - at > 10 and set(resumed) == set(paused) and now - last > 15):
                break
            time.sleep(1.0)
        waits = [resumed.get(tp, now) - since for tp, since in paused.items()]
        mean = statistics.mean(waits) if waits else 0.0
        longest = max(waits) if waits else 0.0
        results.append((len(paused), mean, longest))
        print(
            f"  scale to {replicas}: {len(paused)} partitions paused, "
            f"mean pause {mean:.2f} s, longest {longest:.2f} s",
            flush=True,
        )
    return results


def describe(values: list[float]) -> str:
    return (
        f"{statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f}, n={len(values)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--lease", type=int, default=None, help="our Lease duration, seconds (default: 4)")
    parser.add_argument("--tick", type=float, default=None, help="the operator's tick, seconds (default: 5)")
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second produced")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--skip-kafka-failover", action="store_true", help="only ours (quick runs)")
    parser.add_argument("--only-rebalance", action="store_true", help="only the partitions-paused part")
    parser.add_argument(
        "--skip-rebalance", action="store_true", help="no partitions-paused part (failover figures only)"
    )
    args = parser.parse_args()
    figures: dict[str, Any] = {
        "runs": args.runs,
        "lease_s": args.lease or DEFAULT_LEASE_DURATION_S,
        "tick_s": args.tick or "operator default",
        "rate": args.rate,
    }
    workdir = Path(tempfile.mkdtemp(prefix="groupops-failover-"))
    print(f"work directory {workdir}")
    with stack(workdir) as (bootstrap, kubeconfig):
        if not args.only_rebalance:
            print("== ours: failover policy, delivery plan, 3 replicas")
            spec = {
                "partitions": 4,
                "strategy": {"type": "failover", "failback": False, "autoOffsetReset": "earliest"},
                "consumers": {"replicas": 3},
            }
            with policy_setup("ours", bootstrap, kubeconfig, workdir, args, spec) as ours:
                figures["ours_crash"], figures["ours_crash_duplicates"] = measure_takeovers(
                    ours, args.runs, owner_sets=ours.plan_sets, how="crash", replicas=3
                )
                figures["ours_node_lost"], figures["ours_node_lost_duplicates"] = measure_takeovers(
                    ours, args.runs, owner_sets=ours.plan_sets, how="node-lost", replicas=3
                )
                figures["ours_graceful"], _ = measure_takeovers(
                    ours, args.runs, owner_sets=ours.plan_sets, how="graceful", replicas=3
                )
            if not args.skip_kafka_failover:
                print(
                    "== Kafka static membership: delivery native, range, 3 replicas, default session timeout"
                )
                spec = {
                    "partitions": 4,
                    "strategy": {"type": "range", "autoOffsetReset": "earliest"},
                    "consumers": {"replicas": 3, "delivery": "native"},
                }
                with policy_setup("static", bootstrap, kubeconfig, workdir, args, spec) as static:
                    figures["static_crash"], figures["static_crash_duplicates"] = measure_takeovers(
                        static, args.runs, owner_sets=static.broker_sets, how="crash", replicas=3
                    )
                    figures["static_graceful"], _ = measure_takeovers(
                        static, args.runs, owner_sets=static.broker_sets, how="graceful", replicas=3
                    )
        rebalances = (
            ()
            if args.skip_rebalance
            else (
                ("rebalance-ours", "range", "plan"),
                ("rebalance-ours-sticky", "cooperative-sticky", "plan"),
                ("rebalance-eager", "range", "native"),
                ("rebalance-cooperative", "cooperative-sticky", "native"),
            )
        )
        for label, strategy, delivery in rebalances:
            print(f"== partitions paused per rebalance: {label}")
            spec = {
                "partitions": 12,
                "strategy": {"type": strategy, "autoOffsetReset": "earliest"},
                "consumers": {"replicas": 3, "delivery": delivery},
            }
            with policy_setup(label, bootstrap, kubeconfig, workdir, args, spec) as setup:
                wait_for("3 replicas", lambda s=setup: len(s.kubelet.pod_names()) == 3, 300)
                time.sleep(15)

                def scale(replicas: int, s: Setup = setup) -> None:
                    s.api.patch(
                        "ConsumerGroupPolicy",
                        s.namespace,
                        s.name,
                        {"spec": {"consumers": {"replicas": replicas}}},
                    )

                figures[label] = measure_rebalances(setup, scale)
    print("\n== results")
    for key, values in figures.items():
        if key in ("ours_crash", "ours_node_lost", "ours_graceful", "static_crash", "static_graceful"):
            print(f"{key}: {describe(values)}")
        elif key.endswith("duplicates"):
            print(f"{key}: median {statistics.median(values)} (all {values})")
        elif key.startswith("rebalance"):
            paused = [p for p, _, _ in values]
            pause = [w for _, w, _ in values]
            longest = [m for _, _, m in values]
            print(
                f"{key}: partitions paused per scale change {statistics.mean(paused):.1f} (each {paused}); "
                f"mean pause {statistics.mean(pause):.2f} s; longest {max(longest):.2f} s"
            )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
